# Sourced by hack/image/build.sh and smoke.sh: the cache, buildah's store in it, and the cleanup.
#
# The store's driver: overlay where the kernel has it (layers are diffs: the ~2.6 GB dependency layer is
# stored once and a step above it costs only its own files), else vfs (every layer, even a 4 kB COPY, a full
# copy of the root file system below it: measured here, a cold build left 17 GB in the store and took 9 min).
# overlay.skip_mount_home: no private bind mount of the store is left behind; buildah mounts a container's
# root only while a step runs, and cleanup() unmounts whatever an interrupted run left under the store.
# TFK8S_IMAGE_STORAGE_DRIVER=vfs|overlay chooses; a store keeps the driver it was made with.

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CACHE=${TFK8S_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tfk8s/image}
STORE=$CACHE/storage
DEFAULT_IMAGE=$(sed -n 's/^DEFAULT_IMAGE = "\(.*\)"$/\1/p' "$REPO/tfk8s/__init__.py" 2>/dev/null || true)
DEFAULT_IMAGE=${DEFAULT_IMAGE:-ghcr.io/tfk8s/tfk8s:0.1.0}
DEFAULT_GPU_IMAGE=$(sed -n 's/^DEFAULT_GPU_IMAGE = "\(.*\)"$/\1/p' "$REPO/tfk8s/__init__.py" 2>/dev/null || true)
DEFAULT_GPU_IMAGE=${DEFAULT_GPU_IMAGE:-$DEFAULT_IMAGE-gpu}

storage_driver() {
    if [ -n "${TFK8S_IMAGE_STORAGE_DRIVER:-}" ]; then echo "$TFK8S_IMAGE_STORAGE_DRIVER"
    elif [ -d "$STORE/overlay" ]; then echo overlay
    elif [ -d "$STORE/vfs" ]; then echo vfs
    elif grep -qw overlay /proc/filesystems 2>/dev/null \
        && [ "$(stat -f -c %T "$(dirname "$CACHE")" 2>/dev/null || true)" != overlayfs ]; then echo overlay
    else echo vfs
    fi
}
STORAGE_DRIVER=$(storage_driver)

# This run's scratch: buildah's run root (locks, mount counts: transient state) and temporary files.
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/tfk8s-image.XXXXXX")
mkdir -p "$SCRATCH/run" "$SCRATCH/tmp"
BUILDAH=(buildah --root "$STORE" --runroot "$SCRATCH/run" --storage-driver "$STORAGE_DRIVER")
[ "$STORAGE_DRIVER" != overlay ] || BUILDAH+=(--storage-opt overlay.skip_mount_home=true)
WORKING=()  # working containers this run made: removed at exit

cleanup() {
    local c m
    for c in "${WORKING[@]}"; do "${BUILDAH[@]}" rm "$c" >/dev/null 2>&1 || true; done
    "${BUILDAH[@]}" unmount --all >/dev/null 2>&1 || true
    # anything still mounted under the store (a run killed mid-step): deepest first
    while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done < <(
        awk -v s="$STORE" 'index($2, s) == 1 {print $2}' /proc/mounts | sort -r)
    rm -rf "$SCRATCH"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { printf '[%s %(%H:%M:%S)T] %s\n' "$(basename "$0" .sh)" -1 "$*" >&2; }
elapsed() { echo "$(( $(date +%s) - $1 ))s"; }
