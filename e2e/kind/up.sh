#!/usr/bin/env bash
# linea on kind, for users with Docker. NOT RUN IN CI: the machines CI runs on have no
# Docker daemon, so this script has only been checked with `bash -n` and shellcheck, and
# its manifests against a real API server (e2e/chart.sh); it is meant to be correct, not
# known to be.
#
# What it does, idempotently (re-running reuses the cluster, the image cache and the
# MinIO credentials):
#   1. kind cluster from kind-config.yaml: a control plane, an on-demand worker and a
#      worker labelled and tainted like a spot node;
#   2. `docker build` of the repository's Dockerfile (linea + linea-operator) and
#      `kind load docker-image` into the nodes;
#   3. `helm upgrade --install linea charts/linea` in namespace linea-system, with the
#      loaded image;
#   4. MinIO in namespace linea-demo (minio.yaml), bucket `linea`, and the a9a training
#      set prepared into s3://linea/a9a/grid by `linea prepare` running in the image on
#      the kind Docker network (a small synthetic data set when ../shared/data is absent);
#   5. the example TrainingJob (example-trainingjob.yaml), then waits until it has
#      Succeeded or Failed and, with a9a, evaluates the model on the test set.
#
# Needs: docker (daemon running), kind (v0.20 or newer, for node labels), kubectl, helm 3.
# Environment:
#   KIND_CLUSTER_NAME  cluster name (default linea)
#   KIND_NODE_IMAGE    kindest/node image (default: kind's own default)
#   LINEA_IMAGE        image name:tag to build and load (default linea:dev)
#   LINEA_DATA         libsvm training file (default ../shared/data/a9a/a9a.train.libsvm)
#   LINEA_HELM_ARGS    extra `helm upgrade --install` arguments, e.g.
#                      "--set networkPolicy.enabled=true --set networkPolicy.jobNamespaces={linea-demo}"
#   JOB_TIMEOUT        seconds to wait for the TrainingJob (default 1200)
#
# Clean up: kind delete cluster --name linea
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CLUSTER="${KIND_CLUSTER_NAME:-linea}"
IMAGE="${LINEA_IMAGE:-linea:dev}"
DATA="${LINEA_DATA:-$ROOT/../shared/data/a9a/a9a.train.libsvm}"
JOB_TIMEOUT="${JOB_TIMEOUT:-1200}"
CONTEXT="kind-$CLUSTER"
# Containers on this Docker network reach the nodes by name (kind's default network).
NETWORK="${KIND_EXPERIMENTAL_DOCKER_NETWORK:-kind}"
# MinIO's NodePort (minio.yaml), as seen from the kind network.
S3_FROM_DOCKER="http://$CLUSTER-control-plane:30900"
MC_IMAGE="quay.io/minio/mc:RELEASE.2025-08-13T08-35-41Z"
DEMO_NS=linea-demo
JOB=a9a

log() { printf '[kind] %s\n' "$*" >&2; }
die() { printf '[kind] ERROR: %s\n' "$*" >&2; exit 1; }
k() { kubectl --context "$CONTEXT" "$@"; }

for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found on PATH"
done
docker info >/dev/null 2>&1 || die "cannot reach the Docker daemon (is it running?)"

# --- 1. cluster ----------------------------------------------------------------------------
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  log "cluster $CLUSTER exists, reusing it"
else
  log "creating cluster $CLUSTER"
  kind create cluster --name "$CLUSTER" --config "$HERE/kind-config.yaml" --wait 180s \
    ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"}
fi
k wait --for=condition=Ready node --all --timeout=180s >/dev/null

# --- 2. image --------------------------------------------------------------------------------
log "building $IMAGE (first build compiles the workspace: several minutes)"
DOCKER_BUILDKIT=1 docker build -t "$IMAGE" "$ROOT"
log "loading $IMAGE into the nodes"
kind load docker-image "$IMAGE" --name "$CLUSTER"

# --- 3. operator -------------------------------------------------------------------------------
# The tag is whatever follows the last ':' after the last '/' (a registry port is not a tag).
repo="$IMAGE" tag=""
case "${IMAGE##*/}" in *:*) repo="${IMAGE%:*}" tag="${IMAGE##*:}" ;; esac
log "installing the chart (release linea, namespace linea-system)"
# shellcheck disable=SC2086  # LINEA_HELM_ARGS is a list of arguments
helm upgrade --install linea "$ROOT/charts/linea" --kube-context "$CONTEXT" \
  --namespace linea-system --create-namespace \
  --set image.repository="$repo" --set image.tag="${tag:-latest}" --set image.pullPolicy=IfNotPresent \
  ${LINEA_HELM_ARGS:-}
k -n linea-system rollout status deployment/linea-operator --timeout=180s

# --- 4. storage and data ---------------------------------------------------------------------
k create namespace "$DEMO_NS" --dry-run=client -o yaml | k apply -f - >/dev/null
if secret="$(k -n "$DEMO_NS" get secret minio-credentials -o jsonpath='{.data.AWS_SECRET_ACCESS_KEY}' 2>/dev/null)" \
  && [ -n "$secret" ]; then
  secret="$(printf '%s' "$secret" | base64 -d)"
else
  secret="$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"
  k -n "$DEMO_NS" create secret generic minio-credentials \
    --from-literal=AWS_ACCESS_KEY_ID=linea --from-literal=AWS_SECRET_ACCESS_KEY="$secret" >/dev/null
fi
log "starting MinIO in $DEMO_NS"
k apply -f "$HERE/minio.yaml" >/dev/null
k -n "$DEMO_NS" rollout status deployment/minio --timeout=180s

# Credentials go to the containers through the environment of this script, never on a
# command line.
export AWS_ACCESS_KEY_ID=linea AWS_SECRET_ACCESS_KEY="$secret" AWS_REGION=us-east-1
export AWS_ENDPOINT_URL="$S3_FROM_DOCKER" MC_HOST_demo="http://linea:$secret@$CLUSTER-control-plane:30900"
log "creating bucket linea"
docker run --rm --network "$NETWORK" -e MC_HOST_demo "$MC_IMAGE" mb --ignore-existing demo/linea

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"   # the image runs as uid 65532
if [ -f "$DATA" ]; then
  cp "$DATA" "$work/train.libsvm"
  test_set="${DATA%.train.libsvm}.test.libsvm"
  if [ "$test_set" != "$DATA" ] && [ -f "$test_set" ]; then cp "$test_set" "$work/test.libsvm"; fi
else
  log "$DATA not found: generating a synthetic data set (20000 rows, 50 binary features)"
  awk 'BEGIN { srand(7)
    for (i = 0; i < 20000; i++) {
      s = 0; line = ""
      for (j = 1; j <= 50; j++) if (rand() < 0.2) { s += (j % 5) - 2; line = line " " j ":1" }
      print ((s + 2 * rand() - 1 > 0) ? "+1" : "-1") line
    } }' >"$work/train.libsvm"
fi
chmod 644 "$work"/*.libsvm
docker_linea() {
  docker run --rm --network "$NETWORK" -v "$work:/data:ro" \
    -e AWS_ACCESS_KEY_ID -e AWS_SECRET_ACCESS_KEY -e AWS_REGION -e AWS_ENDPOINT_URL \
    "$IMAGE" "$@"
}
log "preparing the grid into s3://linea/$JOB/grid"
docker_linea prepare --input /data/train.libsvm --format libsvm \
  --output "s3://linea/$JOB/grid" --rows-per-shard 4096

# --- 5. the TrainingJob -----------------------------------------------------------------------
log "applying $HERE/example-trainingjob.yaml"
k apply -f "$HERE/example-trainingjob.yaml"
deadline=$((SECONDS + JOB_TIMEOUT)) last=""
while :; do
  phase="$(k -n "$DEMO_NS" get trainingjob "$JOB" -o jsonpath='{.status.phase}' 2>/dev/null)" || phase=""
  if [ "$phase" != "$last" ]; then
    k -n "$DEMO_NS" get trainingjob "$JOB" -o wide
    last="$phase"
  fi
  case "$phase" in
    Succeeded) break ;;
    Failed)
      k -n "$DEMO_NS" describe trainingjob "$JOB"
      die "TrainingJob $JOB failed" ;;
  esac
  if [ $SECONDS -ge $deadline ]; then
    k -n "$DEMO_NS" describe trainingjob "$JOB"
    k -n "$DEMO_NS" get pods -o wide
    die "TrainingJob $JOB not finished after ${JOB_TIMEOUT}s (phase '${phase:-none}')"
  fi
  sleep 5   # polling interval
done
log "TrainingJob $JOB succeeded: model at s3://linea/$JOB/model"
if [ -f "$work/test.libsvm" ]; then
  docker_linea eval --model "s3://linea/$JOB/model" --data /data/test.libsvm
fi
log "done. kubectl --context $CONTEXT get tj -A; kind delete cluster --name $CLUSTER to remove it"
