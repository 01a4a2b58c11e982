// Command coredns is the pinned CoreDNS with only the plugins the Corefile of
// `make cluster` names (hack/cluster/addons.go): errors, health, ready,
// kubernetes, cache. CoreDNS's own main links every plugin it ships — the
// clouds' SDKs, tracing, dnstap — which on a cold 2-core machine took
// minutes to compile for a cluster that uses five. Their order is CoreDNS's
// (dnsserver.Directives is left as it ships); a directive the Corefile names
// and this build lacks is refused at startup ("unknown directive").
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() { coremain.Run() }
