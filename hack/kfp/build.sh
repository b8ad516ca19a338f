#!/usr/bin/env bash
# Builds the five Go programs of a Kubeflow Pipelines v2 backend from a KFP source tree, once (make test-kfp;
# tests/kfp/):
#   apiserver              the KFP API server (backend/src/apiserver; REST :8888, gRPC :8887)
#   persistence_agent      copies Argo workflow status into the API server's database (backend/src/agent/persistence)
#   scheduledworkflow      the ScheduledWorkflow controller: recurring runs (backend/src/crd/controller/scheduledworkflow)
#   driver                 the v2 driver, run by Argo before every task (backend/src/v2/cmd/driver)
#   launcher-v2            the v2 launcher, copied into every step's container by an init container
#                          (backend/src/v2/cmd/launcher-v2), so it must be static
# and, for the tests' object store, MinIO (github.com/minio/minio at a pinned pseudo-version from the Go module
# proxy: its go.mod has no replace lines, so `go install` builds it; the S3 server KFP shipped until 2.14),
# all with CGO_ENABLED=0 (static; the API server's one cgo dependency, go-sqlite3, has a `!cgo` stub and SQLite is
# not used at run time), into ${XDG_CACHE_HOME:-~/.cache}/tfk8s/kfp/<version>/, and prints that directory (last
# line). A second run finds them there and returns at once. Needs Go >= 1.26 (KFP 2.17.0's go.mod).
#
# The source is NOT fetched here and never goes into this repository or the project image: the Go module proxy
# refuses KFP's root module, so the tree is a checkout (or `git archive`) of github.com/kubeflow/pipelines at
# tag $KFP_VERSION, named by KFP_SRC, or unpacked at ${XDG_CACHE_HOME:-~/.cache}/tfk8s/kfp/src-<version>/.
# Every dependency comes from the Go module proxy (KFP's own go.mod and go.sum).
#
#   hack/kfp/build.sh          # build what is missing, print the directory
#   hack/kfp/build.sh --dir    # print the directory only (nothing built)
#   hack/kfp/build.sh --src    # print the source tree found (exit 4 and one line if none)
#   hack/kfp/build.sh --minio  # MinIO alone, which needs no KFP source tree (make test-e2e's bucket), print the dir
# Exit codes: 0 built (or already there), 2 usage, 3 no Go / a build failed, 4 no KFP source tree.
set -euo pipefail
KFP_VERSION="${KFP_VERSION:-2.17.0}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/tfk8s/kfp"
dir="$cache/$KFP_VERSION"
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c  # github.com/minio/minio's last commit on the proxy (2026-02-12)
bins=(apiserver persistence_agent scheduledworkflow driver launcher-v2 minio)

find_src() {
  local s="${KFP_SRC:-$cache/src-$KFP_VERSION}"
  [[ -f "$s/go.mod" && -d "$s/backend/src/v2/cmd/driver" ]] || return 1
  grep -q '^module github.com/kubeflow/pipelines$' "$s/go.mod" || return 1
  echo "$(cd "$s" && pwd)"
}
no_src() {
  echo "hack/kfp/build.sh: no KFP source tree (set KFP_SRC=<a checkout of kubeflow/pipelines at $KFP_VERSION>, or unpack one at $cache/src-$KFP_VERSION)" >&2
  exit 4
}

case "${1:-}" in
  --dir) echo "$dir"; exit 0 ;;
  --src) find_src || no_src; exit 0 ;;
  --minio) bins=(minio) ;;
  "") ;;
  *) echo "usage: $0 [--dir|--src|--minio]" >&2; exit 2 ;;
esac
missing=()
for b in "${bins[@]}"; do [[ -x "$dir/$b" ]] || missing+=("$b"); done
if [[ ${#missing[@]} -eq 0 ]]; then echo "$dir"; exit 0; fi
src=""
if [[ "${missing[*]}" != minio ]]; then src="$(find_src)" || no_src; fi
if [[ -n "$src" && -f "$src/VERSION" ]] && [[ "$(tr -d '[:space:]' < "$src/VERSION")" != "$KFP_VERSION" ]]; then
  echo "hack/kfp/build.sh: $src/VERSION says $(tr -d '[:space:]' < "$src/VERSION"), not $KFP_VERSION (set KFP_VERSION or KFP_SRC)" >&2
  exit 4
fi
if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then export PATH="/usr/local/go/bin:$PATH"; fi
command -v go >/dev/null || { echo "hack/kfp/build.sh: go is not installed: the KFP tests need Go >= 1.26" >&2; exit 3; }
mkdir -p "$dir"
tmp="$(mktemp -d "$dir/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
echo "building ${missing[*]} from ${src:-the Go module proxy} into $dir (cold: about 25 minutes on 2 shared cores, measured 2026-12-04)" >&2
# GOTOOLCHAIN=local: KFP's go.mod names toolchain go1.26.4; any local Go >= 1.26 builds it (no toolchain download).
export GOFLAGS="-trimpath -buildvcs=false" CGO_ENABLED=0 GOOS=linux GOTOOLCHAIN=local
declare -A pkg=(
  [apiserver]=./backend/src/apiserver
  [persistence_agent]=./backend/src/agent/persistence
  [scheduledworkflow]=./backend/src/crd/controller/scheduledworkflow
  [driver]=./backend/src/v2/cmd/driver
  [launcher-v2]=./backend/src/v2/cmd/launcher-v2
)
# go-sqlite3's `!cgo` stub lacks the two names the API server's SQLite dialect uses (storage/db.go:
# sqlite3.Error, sqlite3.ErrConstraint: "undefined" with CGO_ENABLED=0). SQLite is KFP's unit-test database only,
# never used by a running server, so the API server is built with an overlay (`go build -overlay`, the tree itself
# is not changed) of db.go whose SQLite IsDuplicateError reads the error's text instead ("UNIQUE constraint
# failed", what SQLite says); the MySQL and PostgreSQL dialects are untouched.
db_go="$src/backend/src/apiserver/storage/db.go"
overlay=""
if [[ -n "$src" ]] && grep -q 'sqlite3.ErrConstraint' "$db_go"; then
  sed -e 's|^\tsqlite3 "github.com/mattn/go-sqlite3"$|\t_ "github.com/mattn/go-sqlite3"|' \
      -e 's|^\tsqlError, ok := err.(sqlite3.Error)$|\treturn err != nil \&\& strings.Contains(err.Error(), "constraint failed")|' \
      -e '/^\treturn ok && sqlError.Code == sqlite3.ErrConstraint$/d' "$db_go" > "$tmp/db.go"
  ! grep -q 'sqlite3\.' "$tmp/db.go" || { echo "hack/kfp/build.sh: could not make the db.go overlay (KFP changed?)" >&2; exit 3; }
  printf '{"Replace": {"%s": "%s"}}\n' "$db_go" "$tmp/db.go" > "$tmp/overlay.json"
  overlay="-overlay=$tmp/overlay.json"
fi
# One `go build` at a time, niced (several engineers share this machine); the five share most packages.
for b in "${missing[@]}"; do
  if [[ "$b" == minio ]]; then
    echo "  minio ($(( $(date +%s) - start ))s)" >&2
    (cd "$tmp" && GOBIN="$tmp" nice -n 10 go install -ldflags="-s -w" "github.com/minio/minio@${MINIO_VERSION}") || {
      echo "hack/kfp/build.sh: building minio failed (above)" >&2; exit 3; }
    mv -f "$tmp/minio" "$dir/minio"
    continue
  fi
  echo "  $b ($(( $(date +%s) - start ))s)" >&2
  (cd "$src" && GOFLAGS="$GOFLAGS -mod=readonly" nice -n 10 go build ${overlay:+"$overlay"} -tags netgo -ldflags="-s -w" -o "$tmp/$b" "${pkg[$b]}") || {
    echo "hack/kfp/build.sh: building $b failed (above)" >&2; exit 3; }
  mv -f "$tmp/$b" "$dir/$b"  # kept even if a later one fails
done
echo "built ${missing[*]} in $(( $(date +%s) - start ))s; $(du -sh "$dir" | cut -f1) in $dir" >&2
echo "$dir"
