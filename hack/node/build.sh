#!/usr/bin/env bash
# Builds the e2e node's binaries (`make test-e2e`, tests/realnode/realnode.py) at pinned versions, once:
#   kubelet, kube-proxy             k8s.io/kubernetes (the control plane's ../controlplane/kubernetes/go.mod:
#                                   same version, same replace lines, so the Go build cache is shared)
#   containerd, containerd-shim-runc-v2, ctr
#                                   github.com/containerd/containerd/v2 (go install: its own go.mod)
#   coredns                         github.com/coredns/coredns with the plugins the node needs (./coredns)
#   pause, probe                    ./images: the sandbox image's program and the smoke tests' program
#                                   (static, standard library only; tests/realnode/realnode.py packs them into images)
# into ${XDG_CACHE_HOME:-~/.cache}/tfk8s/node/<versions>/ and prints that directory (last line); pause and
# probe go into its images-<hash of their source>/ (`--images-dir` prints it). runc, the CNI plugins (bridge,
# host-local, loopback, portmap), iptables and nftables (the teardown's nft) are Debian's packages, installed
# here when missing and linked into the directory (runc, cni/). A second run finds everything there and returns
# at once. Needs Go >= 1.26.
# Nothing is downloaded but Go modules (the module proxy) and Debian packages.
#
#   hack/node/build.sh               # build/install what is missing, print the directory
#   hack/node/build.sh --dir         # print the directory only (nothing built)
#   hack/node/build.sh --images-dir  # print the images directory only (nothing built)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# The versions: change them here (Kubernetes: also in ../controlplane/build.sh and its kubernetes/go.mod;
# CoreDNS: also in ./coredns/go.mod, then `go mod tidy` there).
KUBERNETES_VERSION=v1.37.2
CONTAINERD_VERSION=v2.4.2
COREDNS_VERSION=v1.15.0
DEBIAN_PACKAGES=(runc containernetworking-plugins iptables nftables)  # nft: the sweep removes the nftables tables iptables-nft made
dir="${XDG_CACHE_HOME:-$HOME/.cache}/tfk8s/node/kubernetes-${KUBERNETES_VERSION}_containerd-${CONTAINERD_VERSION}_coredns-${COREDNS_VERSION}"
images_hash="$(cd "$here/images" && cat go.mod pause/main.go probe/main.go | sha256sum | cut -c1-12)"
images="$dir/images-$images_hash"
case "${1:-}" in
  --dir) echo "$dir"; exit 0 ;;
  --images-dir) echo "$images"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--dir|--images-dir]" >&2; exit 2 ;;
esac
grep -q "^KUBERNETES_VERSION=${KUBERNETES_VERSION}\$" "$here/../controlplane/build.sh" || {
  echo "build.sh: KUBERNETES_VERSION ${KUBERNETES_VERSION} differs from ../controlplane/build.sh's: keep them equal" >&2
  exit 2
}

# Debian's packages (idempotent: apt-get runs only when one is missing).
missing_pkgs=()
for p in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing_pkgs+=("$p")
done
if [[ ${#missing_pkgs[@]} -gt 0 ]]; then
  command -v apt-get >/dev/null || { echo "build.sh: needs Debian packages ${missing_pkgs[*]} (no apt-get here)" >&2; exit 3; }
  echo "installing Debian packages ${missing_pkgs[*]}" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing_pkgs[@]}" >&2
fi

bins=(kubelet kube-proxy containerd containerd-shim-runc-v2 ctr coredns)
missing=()
for b in "${bins[@]}"; do [[ -x "$dir/$b" ]] || missing+=("$b"); done
for b in pause probe; do [[ -x "$images/$b" ]] || missing+=("$b"); done
link() {  # the Debian-provided tools, where tests/realnode/realnode.py looks for them
  ln -sfn "$(command -v runc || echo /usr/sbin/runc)" "$dir/runc"
  ln -sfn /usr/lib/cni "$dir/cni"
}
if [[ ${#missing[@]} -eq 0 ]]; then
  link
  echo "$dir"
  exit 0
fi
if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then export PATH="/usr/local/go/bin:$PATH"; fi
command -v go >/dev/null || { echo "build.sh: go is not installed: the e2e node needs Go >= 1.26" >&2; exit 3; }
mkdir -p "$dir" "$images"
link
tmp="$(mktemp -d "$dir/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
# The same GOFLAGS, ldflags and (default) CGO_ENABLED as ../controlplane/build.sh for kubelet and kube-proxy, so
# that the Kubernetes packages it compiled come from the Go build cache; the others are static (CGO_ENABLED=0).
export GOFLAGS="-trimpath -buildvcs=false"
ldflags="-s -w"
start=$(date +%s)
echo "building ${missing[*]} into $dir (cold, after the control plane's build: about 4 minutes on 2 cores, measured 2026-12-02)" >&2
need() { [[ " ${missing[*]} " == *" $1 "* ]]; }
step() { echo "  $1 ($(( $(date +%s) - start ))s)" >&2; }
k8s=()
for b in kubelet kube-proxy; do need "$b" && k8s+=("k8s.io/kubernetes/cmd/$b"); done
if [[ ${#k8s[@]} -gt 0 ]]; then
  step "kubernetes ${k8s[*]}"
  # The version the kubelet reports in the node's status (nodeInfo.kubeletVersion) and its user agent: what
  # Kubernetes' own build stamps (hack/lib/version.sh); -X changes only the link, not the cached packages.
  kv=""
  minor="${KUBERNETES_VERSION#v1.}"; minor="${minor%%.*}"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    kv+=" -X $pkg.gitVersion=${KUBERNETES_VERSION} -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor}"
    kv+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$here/../controlplane/kubernetes" && go build -ldflags="$ldflags$kv" -o "$tmp/" "${k8s[@]}")
fi
ctd=()
for b in containerd containerd-shim-runc-v2 ctr; do need "$b" && ctd+=("github.com/containerd/containerd/v2/cmd/$b@${CONTAINERD_VERSION}"); done
if [[ ${#ctd[@]} -gt 0 ]]; then
  step "containerd ${ctd[*]}"
  # containerd's go.mod has no replace lines: `go install module@version` builds it with its own
  # dependencies. Static, without the snapshotters the node does not use (btrfs needs cgo anyway).
  CGO_ENABLED=0 GOBIN="$tmp" go install -ldflags="$ldflags -X github.com/containerd/containerd/v2/version.Version=${CONTAINERD_VERSION}" \
    -tags "no_btrfs no_zfs no_devmapper" "${ctd[@]}"
fi
if need coredns; then
  step "coredns"
  grep -q "github.com/coredns/coredns ${COREDNS_VERSION}\$" "$here/coredns/go.mod" || {
    echo "build.sh: COREDNS_VERSION ${COREDNS_VERSION} differs from ./coredns/go.mod's require: keep them equal" >&2
    exit 2
  }
  (cd "$here/coredns" && CGO_ENABLED=0 go build -ldflags="$ldflags" -o "$tmp/coredns" .)
fi
for b in pause probe; do
  if need "$b"; then
    step "$b"
    (cd "$here/images" && CGO_ENABLED=0 go build -ldflags="$ldflags" -o "$tmp/$b" "./$b")
  fi
done
for b in "${missing[@]}"; do
  case "$b" in pause|probe) mv -f "$tmp/$b" "$images/$b" ;; *) mv -f "$tmp/$b" "$dir/$b" ;; esac
done
for old in "$dir"/images-*; do [[ "$old" == "$images" ]] || rm -rf "$old"; done  # earlier sources' programs
echo "built ${missing[*]} in $(( $(date +%s) - start ))s; $(du -sh "$dir" | cut -f1) in $dir" >&2
echo "$dir"
