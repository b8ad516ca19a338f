#!/usr/bin/env bash
# Imports the image archive into a private containerd, as a node would (`ctr -n k8s.io images import`), and
# runs it there for real (runc, as the image's user): the check that the archive `make image-archive` writes
# is what a one-node cluster's containerd takes. The containerd is this script's own (root, state and socket
# in a temporary folder, CRI and NRI off), stopped and removed at exit; it leaves no mount behind.
#
#   hack/image/containerd-check.sh [ARCHIVE] [BINDIR]
#     ARCHIVE  default: the one make image-archive writes (~/.cache/tfk8s/image/tfk8s_0.1.0.tar)
#     BINDIR   containerd, containerd-shim-runc-v2, ctr (and runc, else the PATH's); default: hack/node's
#              cache (~/.cache/tfk8s/node/*/), else the PATH's
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
CACHE_ROOT=${XDG_CACHE_HOME:-$HOME/.cache}/tfk8s
IMAGE=$(sed -n 's/^DEFAULT_IMAGE = "\(.*\)"$/\1/p' "$REPO/tfk8s/__init__.py")
ARCHIVE=${1:-${TFK8S_IMAGE_CACHE:-$CACHE_ROOT/image}/$(basename "${IMAGE//:/_}").tar}
BINDIR=${2:-$(ls -d "$CACHE_ROOT"/node/*/ 2>/dev/null | head -n1 || true)}
[ -s "$ARCHIVE" ] || { echo "containerd-check: no archive $ARCHIVE (make image-archive)" >&2; exit 1; }

D=$(mktemp -d "${TMPDIR:-/tmp}/tfk8s-containerd.XXXXXX")
mkdir -p "$D/bin"
for b in containerd containerd-shim-runc-v2 ctr runc; do
    src=${BINDIR:+$BINDIR/$b}
    [ -n "$src" ] && [ -x "$src" ] || src=$(command -v "$b" || true)
    [ -n "$src" ] || { [ "$b" = runc ] && continue; echo "containerd-check: no $b" >&2; rm -rf "$D"; exit 1; }
    cp -L "$src" "$D/bin/$b"
done
export PATH=$D/bin:$PATH
PID=
ID=tfk8s-image-check-$$
CTR=(ctr --address "$D/containerd.sock" -n k8s.io)
cleanup() {
    "${CTR[@]}" tasks kill -s KILL "$ID" >/dev/null 2>&1 || true
    "${CTR[@]}" containers delete "$ID" >/dev/null 2>&1 || true
    if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
    local m
    while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done < <(
        awk -v s="$D" 'index($2, s) == 1 {print $2}' /proc/mounts | sort -r)
    rm -rf "$D"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cat > "$D/config.toml" <<EOF
version = 3
root = "$D/root"
state = "$D/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime",
                    "io.containerd.podsandbox.controller.v1.podsandbox", "io.containerd.nri.v1.nri"]
[grpc]
  address = "$D/containerd.sock"
[ttrpc]
  address = "$D/containerd.sock.ttrpc"
[debug]
  address = "$D/debug.sock"
EOF
containerd --config "$D/config.toml" >"$D/containerd.log" 2>&1 &
PID=$!
for _ in $(seq 100); do "${CTR[@]}" version >/dev/null 2>&1 && break; sleep 0.1; done
"${CTR[@]}" version | sed -n 's/^ *Version: */containerd /p' | tail -n1

t0=$(date +%s)
echo "+ ctr -n k8s.io images import $ARCHIVE"
"${CTR[@]}" images import "$ARCHIVE"
echo "imported in $(( $(date +%s) - t0 ))s"
"${CTR[@]}" images ls | awk -v i="$IMAGE" 'NR == 1 || $1 == i'
"${CTR[@]}" images ls -q | grep -qx "$IMAGE" || { echo "containerd-check: $IMAGE not in containerd" >&2; exit 1; }

echo "+ ctr -n k8s.io run --rm $IMAGE (the image's user; no network)"
"${CTR[@]}" run --rm --env TF_CPP_MIN_LOG_LEVEL=2 "$IMAGE" "$ID" sh -c '
    echo "uid $(id -u) gid $(id -g)"; python --version
    python -c "import tensorflow as tf, tf_keras, kfp, tfk8s, trainer.task; print(\"tensorflow\", tf.__version__, \"tf_keras\", tf_keras.__version__, \"kfp\", kfp.__version__)"
    python -m trainer.task --help >/dev/null && echo "python -m trainer.task --help: ok"
    python -m components.launch_training --help >/dev/null && echo "python -m components.launch_training --help: ok"
    touch /mnt/tfk8s/.w /gcs/.w && echo "/mnt/tfk8s, /gcs: writable"'
echo "containerd-check: ok"
