#!/usr/bin/env bash
# Everything in e2e/ that runs without Docker: the control-plane smoke test, the
# TrainingJob CRD, the Helm chart (lint, schema, dry-run, install, RBAC) and the operator
# (running with the chart's RBAC) against the real API server, then real pods on the one-node
# cluster of e2e/cluster.sh (kubelet, containerd, runc); e2e/kind/up.sh needs Docker and is not run here. Builds the control
# plane from Go modules the first time (about 12 minutes on 2 cores), cached in
# ~/.cache/linea/e2e after that.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# Everything Go up front, in one go: the six kubernetes commands share one `go build`.
"$HERE/control-plane/build.sh" etcd kubernetes helm node coredns >/dev/null
"$HERE/node/install-deps.sh"
"$HERE/control-plane/smoke.sh"
"$HERE/crd-validation.sh"
"$HERE/chart.sh"
"$HERE/operator.sh"
# Real pods: the image assembled like the Dockerfile's, then a one-node cluster (kubelet,
# containerd) running the chart's operator and a TrainingJob, with faults.
"$HERE/node/image-check.sh"
"$HERE/cluster-journey.sh"
