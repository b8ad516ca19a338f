#!/usr/bin/env bash
# Builds Argo Workflows at a pinned version from the Go module proxy, once (make test-e2e, make test-argo;
# tests/realnode/argo_fixtures.py):
#   workflow-controller   the controller (run as a pod on the e2e node, from a one-file image packed by the tests)
#   argoexec              the executor (emissary): static, packed by tests/realnode/argo_fixtures.py into a one-file image
#   argo                  the CLI (argo submit / get / cron create), for the tests and the commands in docs/kfp.md
# into ${XDG_CACHE_HOME:-~/.cache}/tfk8s/argo/<version>/ and prints that directory (last line). A second run finds
# them there and returns at once. Needs Go >= 1.24 (Argo's go.mod).
#
# The module zip lacks the UI's build output (ui/dist/app, which the CLI's embedded server needs) and the
# repository's one symbolic link (workflow/executor/osspecific/signal_linux.go), so the three are built from a
# copy of the module's source with both put back: an empty placeholder page, what Argo's own Makefile does before
# `go build ./cmd/argo` (no UI is served), and the link. Nothing else differs. The dependency
# versions are Argo's own (./go.mod requires only argo-workflows and repeats its replace line; ./go.sum pins them).
#
#   hack/argo/build.sh          # build what is missing, print the directory
#   hack/argo/build.sh --dir    # print the directory only (nothing built)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
ARGO_VERSION=v3.7.3   # change it here and in ./go.mod (then `go mod tidy` here), and in ./install.yaml
ARGO_COMMIT=bded09fe4abd37cb98d7fc81b4c14a6f5034e9ab  # the tag's commit (the module proxy's .info Origin)
dir="${XDG_CACHE_HOME:-$HOME/.cache}/tfk8s/argo/${ARGO_VERSION}-${ARGO_COMMIT:0:7}"
case "${1:-}" in
  --dir) echo "$dir"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--dir]" >&2; exit 2 ;;
esac
grep -q "github.com/argoproj/argo-workflows/v3 ${ARGO_VERSION}\$" "$here/go.mod" || {
  echo "build.sh: ARGO_VERSION ${ARGO_VERSION} differs from ./go.mod's require: keep them equal" >&2; exit 2; }
bins=(workflow-controller argoexec argo)
missing=()
for b in "${bins[@]}"; do [[ -x "$dir/$b" ]] || missing+=("$b"); done
if [[ ${#missing[@]} -eq 0 ]]; then echo "$dir"; exit 0; fi
if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then export PATH="/usr/local/go/bin:$PATH"; fi
command -v go >/dev/null || { echo "build.sh: go is not installed: the Argo tests need Go >= 1.24" >&2; exit 3; }
mkdir -p "$dir"
tmp="$(mktemp -d "$dir/.build.XXXXXX")"
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
start=$(date +%s)
echo "building ${missing[*]} into $dir (cold: about 6 minutes on 2 cores after the control plane's build, measured 2026-12-02)" >&2
export GOFLAGS="-trimpath -buildvcs=false -mod=mod" CGO_ENABLED=0
mod="$(cd "$here" && go mod download -json github.com/argoproj/argo-workflows/v3 | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
[[ -d "$mod" ]] || { echo "build.sh: go mod download found no source for argo-workflows ${ARGO_VERSION}" >&2; exit 3; }
src="$tmp/src"
cp -r "$mod" "$src"
chmod -R u+w "$src"
mkdir -p "$src/ui/dist/app"
echo "<!-- the UI is not built (tfk8s hack/argo/build.sh) -->" > "$src/ui/dist/app/index.html"
# Module zips carry no symbolic links: Argo's Linux signal handling is signal_linux.go -> signal_darwin.go in its
# repository, so without the link argoexec does not compile ("undefined: Setpgid"). Put it back.
ln -s signal_darwin.go "$src/workflow/executor/osspecific/signal_linux.go"
cp "$here/go.mod" "$here/go.sum" "$tmp/"
sed -i "s|^module .*|module tfk8s.dev/hack/argo/build|" "$tmp/go.mod"
echo "replace github.com/argoproj/argo-workflows/v3 => ./src" >> "$tmp/go.mod"
pkg=github.com/argoproj/argo-workflows/v3
ldflags="-s -w -X $pkg.version=${ARGO_VERSION} -X $pkg.gitTag=${ARGO_VERSION} -X $pkg.gitTreeState=clean"
ldflags+=" -X $pkg.buildDate=1970-01-01T00:00:00Z -X $pkg.gitCommit=${ARGO_COMMIT}"
targets=()
for b in "${missing[@]}"; do targets+=("$pkg/cmd/$b"); done
# One `go build` at a time (several engineers share this machine): the three share most packages.
for t in "${targets[@]}"; do
  echo "  $(basename "$t") ($(( $(date +%s) - start ))s)" >&2
  (cd "$tmp" && go build -ldflags="$ldflags" -o "$tmp/bin/" "$t")
  mv -f "$tmp/bin/$(basename "$t")" "$dir/"  # kept even if a later one fails
done
echo "built ${missing[*]} in $(( $(date +%s) - start ))s; $(du -sh "$dir" | cut -f1) in $dir" >&2
echo "$dir"
