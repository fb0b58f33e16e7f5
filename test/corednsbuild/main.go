// Command coredns is CoreDNS built from its Go module with only the plugins
// the bench's dot scenario (issue 37) configures: bind (one loopback
// address), errors, cache, and forward (to a DNS over TLS server). The way CoreDNS documents an external
// build: import the plugins, set dnsserver.Directives to their order, and
// run coremain. Only make bench builds it (make coredns), never make test.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
)

// directives is the plugins' order in a server block, as in CoreDNS's own
// plugin.cfg: bind and errors first, cache before forward.
var directives = []string{"bind", "errors", "cache", "forward"}

func init() { dnsserver.Directives = directives }

func main() { coremain.Run() }
