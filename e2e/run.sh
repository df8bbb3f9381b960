#!/usr/bin/env bash
# Everything in e2e/ that runs without Docker: the control-plane smoke test and the
# TrainingJob CRD against the real API server. Builds the control plane from Go modules
# the first time (about 12 minutes on 2 cores), cached in ~/.cache/linea/e2e after that.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
"$HERE/control-plane/smoke.sh"
"$HERE/crd-validation.sh"
