#!/usr/bin/env bash
# Builds the tfk8s image (the repo's Dockerfile) with no Docker engine and no registry: buildah, daemonless
# (--isolation chroot; its store overlay, or vfs where the kernel lacks overlay: lib.sh), on a base made here
# from Debian's packages by mmdebstrap (localhost/tfk8s-base:bookworm) instead of the Dockerfile's default
# python:3.11-slim-bookworm, which cannot be pulled here. Nothing prebuilt is downloaded: Debian packages (mmdebstrap) and Python wheels (pip, in the build) only.
#
#   hack/image/build.sh [--variant cpu|gpu] [--image NAME] [--base local|REF] [--archive PATH]
#                       [--archive-format docker|oci] [--rebuild-base] [--no-cache] [--verify]
#
# --variant: cpu (default: tensorflow-cpu, tagged tfk8s/__init__.py's DEFAULT_IMAGE) or gpu (TensorFlow's CUDA
# build, tensorflow[and-cuda], tagged DEFAULT_GPU_IMAGE); the Dockerfile's build argument VARIANT.
#
# Everything persistent is under ${XDG_CACHE_HOME:-$HOME/.cache}/tfk8s/image/ (override: TFK8S_IMAGE_CACHE):
#   base/<key>.tar   the base's root file system, as mmdebstrap made it (key: the recipe below)
#   storage/         buildah's image store: the base, the layer cache (--layers) and the built image
#   tfk8s_<tag>.tar  the archive `make image-archive` writes by default (docker-archive: `ctr images import`)
# A warm build reuses the base and every layer above the first one whose input changed: a change to a .py
# file rebuilds only the project layers, a change to pyproject.toml the dependency layer too.
#
# The proxy CA: the host's CA bundle (PIP_CERT, else REQUESTS_CA_BUNDLE, SSL_CERT_FILE, pip's `global.cert`,
# /etc/ssl/certs/ca-certificates.crt) goes to the build only as the secret `pip_cert`, which the Dockerfile
# mounts for its pip RUNs alone: it is in no layer, no ENV, no history. buildah passes the host's *_PROXY
# variables to RUN (--http-proxy, its default) without writing them into the image.
set -euo pipefail

# --- pinned versions -------------------------------------------------------------------------------------
DEBIAN_SUITE=bookworm                                   # Debian 12: Python 3.11 (python3 3.11.2)
DEBIAN_MIRRORS=(
    "deb http://deb.debian.org/debian bookworm main"
    "deb http://deb.debian.org/debian bookworm-updates main"
    "deb http://deb.debian.org/debian-security bookworm-security main"
)
# python3-pip: the Dockerfile's venv is made --without-pip and uses the base's pip (as on the TF base, which
# has no ensurepip either); passwd: useradd; libstdc++6: the tensorflow wheel links against it; binutils:
# `strip` for the Dockerfile's trimming of TensorFlow's shared libraries.
BASE_PACKAGES=python3,python3-pip,ca-certificates,passwd,libstdc++6,binutils
BASE_VARIANT=apt                                        # Essential: yes packages + apt, nothing else
BASE_RECIPE_VERSION=1                                   # bump to rebuild the base when the recipe changes
BUILDAH_VERSION=1.28                                    # Debian bookworm's buildah (1.28.2): the minimum
MMDEBSTRAP_VERSION=1.3                                  # Debian bookworm's mmdebstrap (1.3.5): the minimum
BASE_IMAGE=localhost/tfk8s-base:$DEBIAN_SUITE

IMAGE=
VARIANT=cpu
BASE=local
ARCHIVE=
ARCHIVE_FORMAT=docker
REBUILD_BASE=0
NO_CACHE=0
VERIFY=0

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
    case $1 in
        --image) IMAGE=$2; shift 2 ;;
        --variant) VARIANT=$2; shift 2 ;;
        --base) BASE=$2; shift 2 ;;
        --archive) ARCHIVE=$2; shift 2 ;;
        --archive-format) ARCHIVE_FORMAT=$2; shift 2 ;;
        --rebuild-base) REBUILD_BASE=1; shift ;;
        --no-cache) NO_CACHE=1; shift ;;
        --verify) VERIFY=1; shift ;;
        -h|--help) usage 0 ;;
        *) echo "build.sh: unknown argument $1" >&2; usage 2 >&2 ;;
    esac
done
case $ARCHIVE_FORMAT in docker|oci) ;; *) echo "build.sh: --archive-format docker or oci" >&2; exit 2 ;; esac
case $VARIANT in cpu|gpu) ;; *) echo "build.sh: --variant cpu or gpu (make image VARIANT=cpu|gpu), got '$VARIANT'" >&2; exit 2 ;; esac
[ "$BASE" = local ] && BASE=$BASE_IMAGE

# --- state: the cache (kept) and this run's scratch (removed): lib.sh ------------------------------------
# shellcheck source=hack/image/lib.sh
. "$(dirname "$0")/lib.sh"
if [ "$VARIANT" = gpu ]; then IMAGE=${IMAGE:-$DEFAULT_GPU_IMAGE}; else IMAGE=${IMAGE:-$DEFAULT_IMAGE}; fi

# --- tools: Debian's packages ----------------------------------------------------------------------------
version_at_least() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }
need_tools=()
command -v buildah >/dev/null || need_tools+=(buildah)
if [ "$BASE" = "$BASE_IMAGE" ]; then command -v mmdebstrap >/dev/null || need_tools+=(mmdebstrap); fi
if [ ${#need_tools[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] || { echo "build.sh: needs ${need_tools[*]} (apt-get install ${need_tools[*]})" >&2; exit 1; }
    log "installing ${need_tools[*]} from Debian's packages"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need_tools[@]}" >&2 \
        || { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
             --no-install-recommends "${need_tools[@]}" >&2; }
fi
BUILDAH_HAVE=$(buildah --version | awk '{print $3}')
version_at_least "$BUILDAH_HAVE" "$BUILDAH_VERSION" || { echo "build.sh: buildah $BUILDAH_HAVE < $BUILDAH_VERSION" >&2; exit 1; }

# --- the cache: one build at a time ------------------------------------------------------------------------
mkdir -p "$CACHE/base" "$STORE"
exec 9>"$CACHE/lock"
flock -n 9 || { log "another build holds $CACHE/lock; waiting"; flock 9; }
export TMPDIR=$SCRATCH/tmp        # buildah's and mmdebstrap's temporary files (an archive's blobs on push)

# --- the base: mmdebstrap -> a tar in the cache -> an image in buildah's store ---------------------------
base_key() {
    printf '%s\n' "$BASE_RECIPE_VERSION" "$DEBIAN_SUITE" "$BASE_VARIANT" "$BASE_PACKAGES" "${DEBIAN_MIRRORS[@]}" \
        | sha256sum | cut -c1-16
}
build_base() {
    local key tar t0 ctr
    key=$(base_key)
    tar=$CACHE/base/$DEBIAN_SUITE-$key.tar
    if [ "$REBUILD_BASE" = 0 ] \
        && [ "$("${BUILDAH[@]}" inspect --type image --format '{{index .OCIv1.Config.Labels "org.tfk8s.base.key"}}' \
               "$BASE_IMAGE" 2>/dev/null)" = "$key" ]; then
        log "base $BASE_IMAGE: cached (key $key)"
        return
    fi
    t0=$(date +%s)
    if [ "$REBUILD_BASE" = 1 ] || [ ! -s "$tar" ]; then
        command -v mmdebstrap >/dev/null || { echo "build.sh: needs mmdebstrap" >&2; exit 1; }
        local have
        have=$(mmdebstrap --version | awk '{print $2}')
        version_at_least "$have" "$MMDEBSTRAP_VERSION" \
            || { echo "build.sh: mmdebstrap $have < $MMDEBSTRAP_VERSION" >&2; exit 1; }
        log "base: mmdebstrap $DEBIAN_SUITE ($BASE_VARIANT + $BASE_PACKAGES)"
        # merged-usr hook: /usr merged without the usrmerge package (and the perl it pulls in). No docs, man
        # pages or locales (copyright files stay); apt's lists are dropped (an apt-get update brings them).
        mmdebstrap --quiet --format=tar --variant="$BASE_VARIANT" --include="$BASE_PACKAGES" \
            --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
            --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
            --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
            --dpkgopt='path-include=/usr/share/doc/*/copyright' \
            --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/log/*.log' \
            --customize-hook="chroot \"\$1\" dpkg-query -W > '$tar.packages'" \
            "$DEBIAN_SUITE" "$tar.part" "${DEBIAN_MIRRORS[@]}" >&2
        mv "$tar.part" "$tar"
        find "$CACHE/base" -name "$DEBIAN_SUITE-*.tar*" ! -name "$DEBIAN_SUITE-$key.tar*" -delete
    fi
    log "base: importing $tar as $BASE_IMAGE"
    ctr=$("${BUILDAH[@]}" from scratch)
    WORKING+=("$ctr")
    "${BUILDAH[@]}" add --quiet "$ctr" "$tar" / >/dev/null
    "${BUILDAH[@]}" config \
        --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 \
        --cmd '["python3"]' --label "org.tfk8s.base.key=$key" \
        --label "org.opencontainers.image.description=Debian $DEBIAN_SUITE ($BASE_PACKAGES), made by tfk8s hack/image/build.sh" \
        "$ctr"
    "${BUILDAH[@]}" rmi "$BASE_IMAGE" >/dev/null 2>&1 || true
    "${BUILDAH[@]}" commit --quiet --rm "$ctr" "$BASE_IMAGE" >/dev/null
    WORKING=()
    log "base: done in $(elapsed "$t0")"
}

# --- the host's CA bundle, for pip in the build only ------------------------------------------------------
ca_bundle() {
    local c
    for c in "${PIP_CERT:-}" "${REQUESTS_CA_BUNDLE:-}" "${SSL_CERT_FILE:-}" \
             "$(pip3 config get global.cert 2>/dev/null || true)" /etc/ssl/certs/ca-certificates.crt; do
        if [ -n "$c" ] && [ -s "$c" ]; then echo "$c"; return; fi
    done
}

# --- the image --------------------------------------------------------------------------------------------
T_ALL=$(date +%s)
if [ "$BASE" = "$BASE_IMAGE" ]; then build_base; PULL=never; else PULL=missing; fi

args=(--isolation chroot --layers --pull="$PULL" --build-arg "BASE=$BASE" --build-arg "VARIANT=$VARIANT"
      -t "$IMAGE" -f "$REPO/Dockerfile")
[ "$NO_CACHE" = 1 ] && args+=(--no-cache)
CA=$(ca_bundle)
if [ -n "$CA" ]; then
    log "pip in the build trusts $CA (build secret pip_cert: not in the image)"
    args+=(--secret "id=pip_cert,src=$CA")
fi
t0=$(date +%s)
log "building $IMAGE ($VARIANT) on $BASE (buildah $BUILDAH_HAVE, store $STORE, $STORAGE_DRIVER)"
"${BUILDAH[@]}" build "${args[@]}" "$REPO" >&2
log "built $IMAGE in $(elapsed "$t0")"

# The layer cache keeps the images of the current build's steps; a rebuilt step leaves the old one (and the
# steps above it) dangling: drop them, else every warm build adds its layers (vfs: a full copy each) for good.
for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do
    [ -n "$("${BUILDAH[@]}" rmi --prune 2>/dev/null)" ] || break
done

ID=$("${BUILDAH[@]}" inspect --type image --format '{{.FromImageID}}' "$IMAGE")
SIZE=$("${BUILDAH[@]}" images --noheading --format '{{.Size}}' "$IMAGE" | head -n1)
log "$IMAGE: image ${ID:0:12}, $SIZE"

if [ -n "$ARCHIVE" ]; then
    mkdir -p "$(dirname "$ARCHIVE")"
    if [ -s "$ARCHIVE" ] && [ "$(cat "$ARCHIVE.id" 2>/dev/null)" = "$ID $ARCHIVE_FORMAT" ]; then
        log "archive $ARCHIVE: up to date"
    else
        t0=$(date +%s)
        rm -f "$ARCHIVE" "$ARCHIVE.id"
        "${BUILDAH[@]}" push --quiet "$IMAGE" "$ARCHIVE_FORMAT-archive:$ARCHIVE.part:$IMAGE" >&2
        mv "$ARCHIVE.part" "$ARCHIVE"
        echo "$ID $ARCHIVE_FORMAT" > "$ARCHIVE.id"
        log "archive $ARCHIVE ($ARCHIVE_FORMAT-archive, $(du -h "$ARCHIVE" | cut -f1)) in $(elapsed "$t0")"
    fi
fi

if [ "$VERIFY" = 1 ]; then
    TFK8S_IMAGE_STORAGE_DRIVER=$STORAGE_DRIVER TFK8S_IMAGE_CACHE=$CACHE bash "$REPO/hack/image/smoke.sh" "$IMAGE" >&2
fi
log "done in $(elapsed "$T_ALL")"
[ -z "$ARCHIVE" ] || echo "$ARCHIVE"
