#!/usr/bin/env bash
# Runs the built image for real, without Docker: a buildah working container of it (chroot isolation, as the
# image's own user, UID 10001) runs the imports, the steps' --help and the checks below; it is removed at
# exit, leaving the image and the cache as they were. hack/image/build.sh --verify calls it after a build.
#
#   hack/image/smoke.sh [IMAGE]            (default: tfk8s/__init__.py DEFAULT_IMAGE)
#   TFK8S_IMAGE_SMOKE_DATA=DIR ...         also a 2-replica local training (components.launch_training
#                                          --backend local) on DIR, a prepared data folder (prepare_dataset),
#                                          with TFK8S_IMAGE_SMOKE_ARGS (e.g. "--epochs 1 --batch-size 256")
set -euo pipefail

# shellcheck source=hack/image/lib.sh
. "$(dirname "$0")/lib.sh"
IMAGE=${1:-$DEFAULT_IMAGE}
CTR=
smoke_cleanup() {
    [ -z "$CTR" ] || "${BUILDAH[@]}" rm "$CTR" >/dev/null 2>&1 || true
    cleanup
}
trap smoke_cleanup EXIT

say() { printf '[smoke %(%H:%M:%S)T] %s\n' -1 "$*"; }
fail() { echo "smoke: FAILED: $*" >&2; exit 1; }

"${BUILDAH[@]}" inspect --type image "$IMAGE" >/dev/null 2>&1 || fail "no image $IMAGE in $STORE"

# The image's configuration: user, environment (no proxy, no CA setting, no TF_USE_LEGACY_KERAS: the
# trainer sets that itself before importing TensorFlow), command.
user=$("${BUILDAH[@]}" inspect --type image --format '{{.OCIv1.Config.User}}' "$IMAGE")
[ "$user" = 10001:10001 ] || fail "USER is '$user', not 10001:10001"
envs=$("${BUILDAH[@]}" inspect --type image --format '{{range .OCIv1.Config.Env}}{{println .}}{{end}}' "$IMAGE")
forbidden='https?_proxy|no_proxy|all_proxy|ftp_proxy|pip_cert|pip_index_url|pip_extra_index_url|pip_trusted_host'
forbidden+='|requests_ca_bundle|ssl_cert_file|ssl_cert_dir|curl_ca_bundle|tf_use_legacy_keras'
if grep -iE "^($forbidden)=" <<<"$envs"; then
    fail "the image's environment sets a proxy, a CA or TF_USE_LEGACY_KERAS (above)"
fi
say "config: USER $user; env $(tr '\n' ' ' <<<"$envs")"

t0=$(date +%s)
CTR=$("${BUILDAH[@]}" from --pull=never --quiet --name "tfk8s-smoke-$$" "$IMAGE")
say "working container $CTR ($(( $(date +%s) - t0 ))s)"
run() { "${BUILDAH[@]}" run --isolation chroot --env TF_CPP_MIN_LOG_LEVEL=2 "$CTR" -- "$@"; }

[ "$(run id -u):$(run id -g)" = 10001:10001 ] || fail "runs as $(run id), not 10001:10001"
say "runs as $(run id)"
run sh -c 'for p in python python3; do printf "%s -> %s: " $p "$(command -v $p)"; $p --version; done'
run python -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version'
run python -c 'import tensorflow as tf, tf_keras, kfp, tfk8s, trainer.task
print("tensorflow", tf.__version__, "tf_keras", tf_keras.__version__, "kfp", kfp.__version__, "tfk8s", tfk8s.__version__)'
# As the project does it: nothing in the image's environment; trainer.task sets TF_USE_LEGACY_KERAS=1
# before TensorFlow is imported, so tf.keras is tf_keras (Keras 2), not Keras 3.
run python -c '
import os
assert "TF_USE_LEGACY_KERAS" not in os.environ, "the image sets TF_USE_LEGACY_KERAS"
import trainer.task
import tensorflow as tf
import tf_keras
assert os.environ["TF_USE_LEGACY_KERAS"] == "1"
dense = tf.keras.layers.Dense.__module__
assert dense.startswith("tf_keras.") and tf_keras.__version__.startswith("2."), (dense, tf_keras.__version__)
print("TF_USE_LEGACY_KERAS=1, set by trainer.task: tf.keras is tf_keras", tf_keras.__version__, f"({dense})")'
# The variant (Dockerfile: LABEL org.tfk8s.image.variant): cpu has tensorflow-cpu and no CUDA kernels, so
# TensorFlow's import (all its log lines shown: TF_CPP_MIN_LOG_LEVEL=0) says nothing of CUDA or cuInit, the lines
# that alarmed users of the CUDA build on CPU nodes; gpu has the CUDA build (tensorflow[and-cuda]).
variant=$("${BUILDAH[@]}" inspect --type image --format '{{index .OCIv1.Config.Labels "org.tfk8s.image.variant"}}' "$IMAGE")
tf_dists=$(run python -c 'import importlib.metadata as m, re
names = {re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower() for d in m.distributions()}
print(" ".join(sorted(n for n in names if re.fullmatch(r"tensorflow(-cpu|-gpu|-intel)?", n))))')
tf_log=$("${BUILDAH[@]}" run --isolation chroot --env TF_CPP_MIN_LOG_LEVEL=0 "$CTR" -- \
    python -c 'import tensorflow as tf; print("devices", [d.device_type for d in tf.config.list_physical_devices()])' 2>&1)
case $variant in
    cpu) [ "$tf_dists" = tensorflow-cpu ] || fail "the cpu variant's TensorFlow distributions are '$tf_dists', not tensorflow-cpu"
         if grep -iE 'cuInit|CUDA error|cuda drivers|cudart' <<<"$tf_log"; then
             fail "the cpu variant's TensorFlow import logs CUDA lines (above)"
         fi ;;
    gpu) grep -qw tensorflow <<<"$tf_dists" || fail "the gpu variant has no tensorflow distribution: '$tf_dists'" ;;
    *) fail "no org.tfk8s.image.variant label (cpu or gpu): '$variant'" ;;
esac
say "variant $variant: $tf_dists; TensorFlow's import: $(grep -c . <<<"$tf_log") log lines$([ "$variant" = cpu ] && echo ', none of CUDA') ($(tail -n1 <<<"$tf_log"))"
run python -m components.launch_training --help >/dev/null && say "python -m components.launch_training --help: ok"
run python -m trainer.task --help >/dev/null && say "python -m trainer.task --help: ok"
run python -m pipelines.train --help >/dev/null && say "python -m pipelines.train --help (the CMD): ok"
run sh -c 'for d in /mnt/tfk8s /gcs /minio /s3 /oci; do
    [ "$(stat -c %u:%g "$d")" = 10001:10001 ] || { echo "$d: $(stat -c %U:%G "$d")"; exit 1; }
    touch "$d/.w" && rm "$d/.w"; done' || fail "the artifact folders are not 10001's, or not writable"
say "/mnt/tfk8s /gcs /minio /s3 /oci: 10001:10001, writable"
# No CA of the build host's (the proxy's, handed to pip as a build secret) is anywhere in the image: the
# certificates of the host's bundle that neither Debian's bundle in the image nor the host's Mozilla set has
# are searched for in all its files.
HOST_CA=${PIP_CERT:-${REQUESTS_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}}
if [ -s "$HOST_CA" ]; then
    mnt=$("${BUILDAH[@]}" mount "$CTR")
    python3 "$REPO/hack/image/host_only_ca.py" "$HOST_CA" "$mnt/etc/ssl/certs/ca-certificates.crt" \
        /usr/share/ca-certificates/mozilla \
        > "$SCRATCH/ca-lines"
    n=$(grep -c . "$SCRATCH/ca-lines" || true)
    if [ "$n" -gt 0 ]; then
        found=$(grep -rlF -f "$SCRATCH/ca-lines" "$mnt" 2>/dev/null | sed "s|^$mnt||" || true)
        [ -z "$found" ] || fail "a CA of the build host's ($HOST_CA) is in the image: $found"
    fi
    "${BUILDAH[@]}" umount "$CTR" >/dev/null
    say "no CA of the build host's in the image's files ($n host-only certificates of $HOST_CA searched)"
fi

if [ -n "${TFK8S_IMAGE_SMOKE_DATA:-}" ]; then
    DATA=$TFK8S_IMAGE_SMOKE_DATA
    mnt=$("${BUILDAH[@]}" mount "$CTR")
    mkdir -p "$mnt/mnt/tfk8s/data" && cp -a "$DATA/." "$mnt/mnt/tfk8s/data/"
    chown -R 10001:10001 "$mnt/mnt/tfk8s"
    "${BUILDAH[@]}" umount "$CTR" >/dev/null
    t0=$(date +%s)
    # shellcheck disable=SC2086  # the extra arguments are words
    run python -m components.launch_training --backend local --data-dir /mnt/tfk8s/data \
        --volume-root /mnt/tfk8s --run-id smoke ${TFK8S_IMAGE_SMOKE_ARGS:-} || fail "the local training"
    say "2-replica local training: ok ($(( $(date +%s) - t0 ))s)"
fi
say "ok: $IMAGE"
