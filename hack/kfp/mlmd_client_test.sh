#!/usr/bin/env bash
# Runs KFP's own ML Metadata client tests (backend/src/v2/metadata/client_test.go of the KFP source tree, the ones
# skipped upstream because they need an MLMD server) against hack/kfp/mlmd_server.py. The test file is copied into
# a temporary package inside the tree (removed afterwards: the tree itself is not changed) with its t.Skip lines
# taken out, the server's port put in for localhost:8080, and `&tls.Config{}` replaced by nil (the adapter, like
# MLMD in KFP's own manifests, serves plain gRPC; the upstream tests ask for TLS, which no upstream server has).
# Result 2026-12-04 (KFP 2.17.0, ml-metadata 1.17.1): 4 of the 5 un-skipped tests pass (Test_GetPipeline,
# _Twice, _FromExecution, _Concurrently); Test_DAG fails on its own map keys, not on the store: it looks up
# GetExecutionsInDAG's result under "task1", which KFP's client keys as GetTaskNameWithDagID ("task1_<dag id>")
# since the test was skipped; its counts (2 children of the root, 1 of task1) pass. The other tests of the file
# (no server) pass too. Cold: about 19 minutes on the loaded 2-core machine (go test compiles go-sqlite3 with cgo).
#   hack/kfp/mlmd_client_test.sh [go test flags...]     # prints go test's verdict; exit status is go test's
# Exit 4 (one line) without a KFP source tree, as hack/kfp/build.sh.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src="$(bash "$here/build.sh" --src)"
py="$(bash "$here/mlmd_venv.sh" | tail -n 1)"
if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then export PATH="/usr/local/go/bin:$PATH"; fi
work="$(mktemp -d)"
pkg="$src/backend/src/v2/metadata/tfk8s_unskipped_$$"
mkdir -p "$pkg"
server=""
cleanup() { [[ -n "$server" ]] && kill "$server" 2>/dev/null; wait 2>/dev/null; rm -rf "$pkg" "$work"; }
trap cleanup EXIT
"$py" "$here/mlmd_server.py" --listen 127.0.0.1:0 --sqlite "$work/mlmd.sqlite" > "$work/server.out" 2> "$work/server.err" &
server=$!
for _ in $(seq 100); do grep -q "^listening on" "$work/server.out" && break; sleep 0.2; done
port="$(sed -n 's/^listening on 127.0.0.1:\([0-9]*\) .*/\1/p' "$work/server.out")"
[[ -n "$port" ]] || { echo "mlmd_client_test.sh: the adapter did not start: $(cat "$work/server.err")" >&2; exit 3; }
sed -e '/t.Skip("Temporarily disable the test that requires cluster connection.")/d' \
    -e "s/\"8080\"/\"$port\"/g" -e 's/"localhost"/"127.0.0.1"/g' -e 's/&tls.Config{}/nil/g' \
    "$src/backend/src/v2/metadata/client_test.go" > "$pkg/client_test.go"
# crypto/tls is no longer used once the TLS configs are nil
sed -i '/^\t"crypto\/tls"$/d' "$pkg/client_test.go"
echo "KFP's MLMD client tests (un-skipped) against the adapter on 127.0.0.1:$port" >&2
cd "$src" && GOTOOLCHAIN=local GOFLAGS="-mod=readonly" nice -n 10 go test -count=1 "$@" "./backend/src/v2/metadata/$(basename "$pkg")/"
