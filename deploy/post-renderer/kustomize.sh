#!/bin/sh
# Helm post-renderer: put trtwarm in front of a third-party chart's Deployment(s).
#   TRTWARM_CONTAINER=server TRTWARM_MODEL=/models/src/model.onnx TRTWARM_CACHE_CLAIM=trtwarm-cache \
#   TRTWARM_MODEL_CLAIM=models helm install x their/chart --post-renderer deploy/post-renderer/kustomize.sh
# Optional: TRTWARM_TARGET (a label selector choosing the Deployments; default: all), TRTWARM_ARGS (more
# `trtwarm init` flags, space separated), TRTWARM_VERSION (image tag). Needs `kustomize` or `kubectl` on PATH.
set -eu
: "${TRTWARM_CONTAINER:?name of the inference container to patch}"
: "${TRTWARM_MODEL:?path of the ONNX model inside /models/src}"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/all.yaml"
extra=""
for a in ${TRTWARM_ARGS:-}; do extra="$extra            - $a
"; done
sed -e "s|@CONTAINER@|$TRTWARM_CONTAINER|g" -e "s|@MODEL@|$TRTWARM_MODEL|g" \
    -e "s|@CACHE_CLAIM@|${TRTWARM_CACHE_CLAIM:-trtwarm-cache}|g" -e "s|@MODEL_CLAIM@|${TRTWARM_MODEL_CLAIM:-models}|g" \
    -e "s|@VERSION@|${TRTWARM_VERSION:-0.1.0}|g" "$here/trtwarm-patch.yaml" | awk -v extra="$extra" \
    '{ if ($0 ~ /@EXTRA_ARGS@/) printf "%s", extra; else print }' > "$work/trtwarm-patch.yaml"
cat > "$work/kustomization.yaml" <<KUST
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [all.yaml]
patches:
  - path: trtwarm-patch.yaml
    target:
      kind: Deployment
      labelSelector: "${TRTWARM_TARGET:-}"
KUST
if command -v kustomize >/dev/null 2>&1; then exec kustomize build "$work"; fi
exec kubectl kustomize "$work"
