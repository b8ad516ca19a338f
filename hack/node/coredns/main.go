// CoreDNS with only the plugins the e2e node's DNS needs (the upstream binary links ~60 plugins, among them
// the cloud DNS providers and their SDKs): it serves the cluster domain from the API server (kubernetes) and
// nothing else. There is deliberately no forward plugin: a name outside the cluster domain is REFUSED, never
// sent to a resolver outside this machine.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	// The same relative order as upstream's core/dnsserver/zdirectives.go (the order requests pass them in).
	dnsserver.Directives = []string{"bind", "ready", "health", "errors", "log", "cache", "kubernetes"}
}

func main() {
	coremain.Run()
}
