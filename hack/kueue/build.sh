#!/usr/bin/env bash
# Builds Kueue (sigs.k8s.io/kueue, the job queueing controller) at a pinned version from the Go module proxy, once
# (make test-cluster, make test-e2e, make test-kfp; tests/realcluster/kueue_server.py):
#   kueue        the manager binary (./cmd/kueue), run by the tests as a host process against the test control plane
#   crd/*.yaml   the module's CustomResourceDefinitions (config/components/crd/bases)
#   crd-conversion/*.yaml  the module's conversion-webhook patches (which CRDs convert v1beta1 <-> v1beta2)
#   webhook.yaml the module's Mutating/ValidatingWebhookConfigurations (config/components/webhook/manifests.yaml)
# into ${XDG_CACHE_HOME:-~/.cache}/tfk8s/kueue/<version>/ and prints that directory (last line). A second run finds
# them there (the stamp file .complete) and returns at once. Needs Go >= 1.25 (Kueue's go.mod).
#
# Kueue's go.mod has no replace lines, but it is built inside a copy of the module's directory (the module cache is
# read-only), with Kueue's own go.sum, so the dependency versions are exactly Kueue's.
#
#   hack/kueue/build.sh          # build what is missing, print the directory
#   hack/kueue/build.sh --dir    # print the directory only (nothing built)
set -euo pipefail
KUEUE_VERSION=v0.17.0   # change it here; tests/kueue_server.py reads the directory from `build.sh --dir`
dir="${XDG_CACHE_HOME:-$HOME/.cache}/tfk8s/kueue/${KUEUE_VERSION}"
case "${1:-}" in
  --dir) echo "$dir"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--dir]" >&2; exit 2 ;;
esac
if [[ -x "$dir/kueue" && -f "$dir/.complete" ]]; then echo "$dir"; exit 0; fi
if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then export PATH="/usr/local/go/bin:$PATH"; fi
command -v go >/dev/null || { echo "build.sh: go is not installed: the Kueue tests need Go >= 1.25" >&2; exit 3; }
mkdir -p "$dir"
tmp="$(mktemp -d "$dir/.build.XXXXXX")"
trap 'chmod -R u+w "$tmp" 2>/dev/null || true; rm -rf "$tmp"' EXIT
start=$(date +%s)
echo "building kueue ${KUEUE_VERSION} into $dir (cold: about 9 minutes on 2 cores beside the control plane's build, measured 2026-12-07)" >&2
# GOTOOLCHAIN=local: Kueue's go.mod names go 1.25.0; the local Go (>= 1.25) builds it, nothing is downloaded.
export GOFLAGS="-trimpath -buildvcs=false -mod=readonly" CGO_ENABLED=0 GOTOOLCHAIN=local
mod="$(cd "$tmp" && go mod download -json "sigs.k8s.io/kueue@${KUEUE_VERSION}" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
[[ -d "$mod" ]] || { echo "build.sh: go mod download found no source for sigs.k8s.io/kueue ${KUEUE_VERSION}" >&2; exit 3; }
src="$tmp/src"
cp -r "$mod" "$src"
chmod -R u+w "$src"
pkg=sigs.k8s.io/kueue/pkg/version
ldflags="-s -w -X $pkg.GitVersion=${KUEUE_VERSION} -X $pkg.GitCommit=${KUEUE_VERSION} -X $pkg.BuildDate=1970-01-01T00:00:00Z"
(cd "$src" && go build -ldflags="$ldflags" -o "$tmp/kueue" ./cmd/kueue)
mkdir -p "$tmp/out/crd" "$tmp/out/crd-conversion"
cp "$src"/config/components/crd/bases/*.yaml "$tmp/out/crd/"
# Only the patches that Kueue's own kustomization applies (the others are commented out there).
for p in $(sed -n 's|^- path: patches/\(webhook_in_.*\.yaml\)$|\1|p' "$src/config/components/crd/kustomization.yaml"); do
  cp "$src/config/components/crd/patches/$p" "$tmp/out/crd-conversion/"
done
cp "$src/config/components/webhook/manifests.yaml" "$tmp/out/webhook.yaml"
cp "$tmp/kueue" "$tmp/out/kueue"
rm -rf "$dir/crd" "$dir/crd-conversion"
mv "$tmp/out/crd" "$tmp/out/crd-conversion" "$tmp/out/webhook.yaml" "$tmp/out/kueue" "$dir/"
echo "${KUEUE_VERSION} built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $(( $(date +%s) - start ))s" > "$dir/.complete"
chmod -R u+w "$tmp"; rm -rf "$tmp"  # before the size below (the module's copy is 100 MB)
echo "built kueue ${KUEUE_VERSION} in $(( $(date +%s) - start ))s; $(du -sh "$dir" | cut -f1) in $dir" >&2
echo "$dir"
