#!/usr/bin/env bash
# Build a trtwarm image and label it with what only the finished build knows.
#
#   images/build.sh init|sidecar|init-pull TAG [build options passed to the engine, e.g. --build-arg K=V, --network host]
#
# Step 1 builds the Dockerfile's target. Step 2 reads /opt/trtwarm/labels from the image without running it
# (create + cp, so it works for any platform) and rebuilds FROM it with those labels: a metadata-only step, no new
# layer. A Dockerfile LABEL cannot hold a value computed during the build (such as the TensorRT version pip actually
# installed), hence the two steps. ENGINE=docker|podman picks the tool (default: podman if installed, else docker).
# REVISION and CREATED default to the git commit and the current UTC time.
set -euo pipefail
if [ $# -lt 2 ] || { [ "$1" != init ] && [ "$1" != sidecar ] && [ "$1" != init-pull ]; }; then
  echo "usage: $0 init|sidecar|init-pull TAG [build options...]" >&2
  exit 2
fi
target=$1 tag=$2
shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
engine=${ENGINE:-$(command -v podman >/dev/null 2>&1 && echo podman || echo docker)}
revision=${REVISION:-$(git -C "$here" rev-parse HEAD 2>/dev/null || echo unknown)}
created=${CREATED:-$(date -u +%Y-%m-%dT%H:%M:%SZ)}

"$engine" build --target "$target" --tag "$tag" --build-arg "REVISION=$revision" --build-arg "CREATED=$created" \
  "$@" "$here"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
container=$("$engine" create "$tag")
"$engine" cp "$container:/opt/trtwarm/labels" "$work/labels" >/dev/null
"$engine" rm "$container" >/dev/null
label_args=()
while IFS= read -r line; do
  [ -n "$line" ] && label_args+=(--label "$line")
done <"$work/labels"
printf 'FROM %s\n' "$tag" >"$work/Dockerfile"
"$engine" build --tag "$tag" "${label_args[@]}" "$work" >/dev/null
echo "$tag: $(tr '\n' ' ' <"$work/labels")"
