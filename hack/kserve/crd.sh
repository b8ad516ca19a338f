#!/usr/bin/env bash
# KServe's own InferenceService CRD (serving.kserve.io, v1beta1 with its full OpenAPI schema), taken from KServe's
# Go module on the Go module proxy (github.com/kserve/kserve at a pinned version: its config/crd/full/), once,
# into ${XDG_CACHE_HOME:-~/.cache}/tfk8s/kserve/<version>/, and prints the CRD file's path (last line). The
# real-cluster tests install it so that the API server validates the push step's kserve=apply (no KServe
# controller runs). Never copied into this repository. A second run finds it there and returns at once.
#
#   hack/kserve/crd.sh           # fetch what is missing, print the CRD file's path
#   hack/kserve/crd.sh --path    # print the path only (nothing fetched)
# Exit codes: 0 there, 2 usage, 3 no Go / the download failed.
set -euo pipefail
KSERVE_VERSION="${KSERVE_VERSION:-v0.16.0}"
CRD=serving.kserve.io_inferenceservices.yaml
dir="${XDG_CACHE_HOME:-$HOME/.cache}/tfk8s/kserve/$KSERVE_VERSION"
case "${1:-}" in
  --path) echo "$dir/$CRD"; exit 0 ;;
  "") ;;
  *) echo "usage: hack/kserve/crd.sh [--path]" >&2; exit 2 ;;
esac
if [[ -s "$dir/$CRD" ]]; then
  echo "$dir/$CRD"
  exit 0
fi
if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then export PATH="/usr/local/go/bin:$PATH"; fi
command -v go >/dev/null || { echo "hack/kserve/crd.sh: go is not installed (the module proxy is read by go)" >&2; exit 3; }
mkdir -p "$dir"
tmp="$(mktemp -d "$dir/.fetch.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
# Outside any module (the folder is empty), so `go mod download` fetches the module as it is, checked against
# the checksum database like every module.
module_dir="$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "github.com/kserve/kserve@${KSERVE_VERSION}" \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')" || {
  echo "hack/kserve/crd.sh: go mod download github.com/kserve/kserve@${KSERVE_VERSION} failed (above)" >&2; exit 3; }
src="$module_dir/config/crd/full/$CRD"
[[ -s "$src" ]] || { echo "hack/kserve/crd.sh: no $CRD in $module_dir/config/crd/full" >&2; exit 3; }
cp "$src" "$tmp/$CRD"
chmod 644 "$tmp/$CRD"
mv -f "$tmp/$CRD" "$dir/$CRD"
echo "KServe ${KSERVE_VERSION}'s InferenceService CRD: $(du -h "$dir/$CRD" | cut -f1) in $dir" >&2
echo "$dir/$CRD"
