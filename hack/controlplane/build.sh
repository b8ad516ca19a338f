#!/usr/bin/env bash
# Builds the test control plane's binaries from the Go module proxy at pinned versions, once:
#   kube-apiserver, kube-controller-manager, kube-scheduler  (k8s.io/kubernetes, ./kubernetes/go.mod)
#   etcd                                                     (go.etcd.io/etcd/server/v3, ./etcd/go.mod)
#   kwok                                                     (sigs.k8s.io/kwok/cmd/kwok, go install)
# into ${XDG_CACHE_HOME:-~/.cache}/tfk8s/controlplane/<versions>/ and prints that directory (last line).
# A second run finds them there and returns at once. Needs Go >= 1.26 (k8s.io/kubernetes 1.37's go.mod).
#
#   hack/controlplane/build.sh          # build what is missing, print the directory
#   hack/controlplane/build.sh --dir    # print the directory only (nothing built)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# The versions: change them here and in ./kubernetes/go.mod, ./etcd/go.mod (then `go mod tidy` there).
KUBERNETES_VERSION=v1.37.2
ETCD_VERSION=v3.7.3
KWOK_VERSION=v0.8.0
dir="${XDG_CACHE_HOME:-$HOME/.cache}/tfk8s/controlplane/kubernetes-${KUBERNETES_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}"
if [[ "${1:-}" == "--dir" ]]; then
  echo "$dir"
  exit 0
fi
bins=(kube-apiserver kube-controller-manager kube-scheduler etcd kwok)
k8s_bins=(kube-apiserver kube-controller-manager kube-scheduler)
missing=()
for b in "${bins[@]}"; do
  if [[ ! -x "$dir/$b" ]]; then
    missing+=("$b")
  elif [[ " ${k8s_bins[*]} " == *" $b "* ]] && [[ "$("$dir/$b" --version 2>/dev/null)" != "Kubernetes ${KUBERNETES_VERSION}" ]]; then
    # Built before the version was stamped (it said v0.0.0-master+$Format:%H$, which Kueue refuses to parse):
    # linked again, a minute or two with the Go build cache of that build.
    missing+=("$b")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "$dir"
  exit 0
fi
if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then export PATH="/usr/local/go/bin:$PATH"; fi
command -v go >/dev/null || { echo "build.sh: go is not installed: the real-cluster tests need Go >= 1.26" >&2; exit 3; }
mkdir -p "$dir"
tmp="$(mktemp -d "$dir/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
export GOFLAGS="-trimpath -buildvcs=false"
ldflags="-s -w"
start=$(date +%s)
echo "building ${missing[*]} into $dir (cold: 12-15 minutes on 2 cores, measured 2026-12-02)" >&2
need() { [[ " ${missing[*]} " == *" $1 "* ]]; }
k8s=()
for b in "${k8s_bins[@]}"; do need "$b" && k8s+=("k8s.io/kubernetes/cmd/$b"); done
if [[ ${#k8s[@]} -gt 0 ]]; then
  # The version the API server reports (GET /version) and the components' user agents: what Kubernetes' own
  # build stamps (hack/lib/version.sh), as ../node/build.sh does for the kubelet; -X changes only the link. Without
  # it the API server says v0.0.0-master+$Format:%H$ and a client that parses it (Kueue) exits.
  kv=""
  minor="${KUBERNETES_VERSION#v1.}"; minor="${minor%%.*}"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    kv+=" -X $pkg.gitVersion=${KUBERNETES_VERSION} -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor}"
    kv+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$here/kubernetes" && go build -ldflags="$ldflags$kv" -o "$tmp/" "${k8s[@]}")
fi
if need etcd; then
  (cd "$here/etcd" && go build -ldflags="$ldflags" -o "$tmp/etcd" go.etcd.io/etcd/server/v3)
fi
if need kwok; then
  # kwok's go.mod has no replace lines, so plain `go install module@version` builds it.
  GOBIN="$tmp" go install -ldflags="$ldflags" "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"
fi
for b in "${missing[@]}"; do mv -f "$tmp/$b" "$dir/$b"; done
echo "built ${missing[*]} in $(( $(date +%s) - start ))s; $(du -sh "$dir" | cut -f1) in $dir" >&2
echo "$dir"
