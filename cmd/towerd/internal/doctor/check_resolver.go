package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/towerd/towerd/cmd/towerd/internal/resolvconf"
)

// resolverPath is how the node's programs resolve: resolv.conf as glibc
// (and Go's resolver, which reads the same options) takes it.
type resolverPath struct {
	conf resolvconf.Conf
	opts glibcOptions
	// viaTowerd: the first nameserver glibc asks is towerd's (a file
	// without nameservers counts when towerd listens on 127.0.0.1:53,
	// where glibc then asks).
	viaTowerd, towerdListed bool
}

// glibcOptions are resolv.conf's options as resolv.conf(5) reads them:
// each clamped to glibc's maximum, the last of a repeated option winning.
type glibcOptions struct {
	timeout, attempts, ndots int
	rotate, singleRequest    bool
	words                    []string // as written, for the findings
}

func parseOptions(words []string) glibcOptions {
	o := glibcOptions{timeout: 5, attempts: 2, words: words}
	for _, w := range words {
		name, value, _ := strings.Cut(w, ":")
		n, err := strconv.Atoi(value)
		switch {
		case name == "rotate":
			o.rotate = true
		case name == "single-request" || name == "single-request-reopen":
			o.singleRequest = true
		case err != nil:
		case name == "timeout":
			o.timeout = min(max(n, 1), 30) // RES_MAXRETRANS
		case name == "attempts":
			o.attempts = min(max(n, 1), 5) // RES_MAXRETRY
		}
	}
	o.ndots = resolvconf.Ndots(words) // the resolver's search lists read it so
	return o
}

// wait is how long glibc waits for one server before it resends.
func (o glibcOptions) wait() time.Duration { return time.Duration(o.timeout) * time.Second }

func (n *Node) resolverPath() resolverPath {
	p := resolverPath{conf: n.ResolvConf.resolvConf()}
	p.opts = parseOptions(p.conf.Options)
	if !n.Towerd.Installed {
		return p // 127.0.0.1 is some other program's
	}
	listen := n.Towerd.Config.Listen
	for i, ns := range p.conf.Nameservers {
		if isTowerd(ns, listen) {
			p.towerdListed = true
			p.viaTowerd = p.viaTowerd || i == 0
		}
	}
	if len(p.conf.Nameservers) == 0 && n.ResolvConf.ok() && isTowerd("127.0.0.1:53", listen) {
		p.viaTowerd, p.towerdListed = true, true
	}
	return p
}

// isTowerd tells whether a query to server reaches towerd's listen.
func isTowerd(server string, listen []string) bool {
	return len(resolvconf.WithoutAddresses([]string{server}, listen)) == 0
}

// towerdAnswerWait is the longest towerd keeps a client waiting: a miss is
// answered (or SERVFAIL) within query_timeout, a stale answer goes out
// once serve_stale.client_timeout has passed.
func (n *Node) towerdAnswerWait() time.Duration {
	c := n.Towerd.Config
	wait := c.QueryTimeout.Duration
	if c.ServeStale.Enabled {
		wait = max(wait, c.ServeStale.ClientTimeout.Duration)
	}
	return wait
}

// resolverRetry is how long a lookup on this node waits when one packet
// is lost, and a sentence that says why: towerd's bound when lookups go
// through it, else glibc's timeout before it resends.
func (n *Node) resolverRetry() (time.Duration, string) {
	if p := n.resolverPath(); !p.viaTowerd {
		return p.opts.wait(), fmt.Sprintf("glibc and Go resend a lost DNS packet after %v (resolv.conf's timeout:%d)", p.opts.wait(), p.opts.timeout)
	}
	return n.towerdAnswerWait(), fmt.Sprintf("lookups go through towerd, which answers within %v (query_timeout, serve_stale.client_timeout)", n.towerdAnswerWait())
}

// describeNameserver names what a nameserver of resolv.conf is; listen
// is nil when towerd is not installed.
func describeNameserver(server string, listen []string) string {
	host, _, _ := net.SplitHostPort(server)
	ip, _ := netip.ParseAddr(host)
	switch {
	case listen != nil && isTowerd(server, listen):
		return "towerd"
	case host == "127.0.0.53" || host == "127.0.0.54":
		return "systemd-resolved's stub"
	case ip.IsLoopback():
		return "another resolver on this node"
	}
	return "a shared resolver"
}

// checkResolvConf looks at the nameservers and options of resolv.conf.
func checkResolvConf(n *Node) []Finding {
	rcf := n.ResolvConf
	if !rcf.ok() {
		if errors.Is(rcf.Err, fs.ErrNotExist) {
			saw := "there is no /etc/resolv.conf"
			if n.ResolvConfLink != "" {
				saw = "/etc/resolv.conf links to " + n.ResolvConfLink + ", which does not exist"
			}
			return []Finding{newFinding("resolv-conf-unreadable", Warning, saw)}
		}
		return []Finding{newFinding("resolv-conf-unreadable", Problem, "%v", rcf.Err)}
	}
	var out []Finding
	p := n.resolverPath()
	var listen []string
	if n.Towerd.Installed {
		listen = n.Towerd.Config.Listen
	}
	servers := p.conf.Nameservers
	if n.Towerd.Installed && !p.viaTowerd {
		saw := "resolv.conf names no nameserver, and towerd (on " + strings.Join(listen, ", ") + ") is not at 127.0.0.1:53, where glibc then asks"
		if len(servers) > 0 {
			saw = fmt.Sprintf("the first nameserver glibc asks is %s, %s; towerd listens on %s",
				servers[0], describeNameserver(servers[0], listen), strings.Join(listen, ", "))
		}
		f := newFinding("resolv-conf-bypasses-towerd", Problem, "%s", saw)
		for _, s := range servers {
			f = f.with(s, describeNameserver(s, listen))
		}
		out = append(out, f)
	}
	if p.viaTowerd && len(servers) > 1 {
		f := newFinding("resolv-conf-fallback-servers", Warning, "resolv.conf names %d nameservers after towerd", len(servers)-1)
		for _, s := range servers[1:] {
			f = f.with(s, describeNameserver(s, listen))
		}
		out = append(out, f)
	}
	if p.opts.rotate && p.towerdListed && len(servers) > 1 {
		out = append(out, newFinding("resolv-conf-rotate", Problem,
			"options rotate with %d nameservers, towerd one of them: about %d in %d lookups start elsewhere", len(servers), len(servers)-1, len(servers)))
	}
	total := time.Duration(p.opts.timeout*p.opts.attempts) * time.Second
	switch {
	case p.viaTowerd && total < n.towerdAnswerWait():
		out = append(out, newFinding("resolver-gives-up-before-towerd", Problem,
			"timeout:%d × attempts:%d = %v, while towerd may take up to %v (query_timeout %v, serve_stale.client_timeout %v)",
			p.opts.timeout, p.opts.attempts, total, n.towerdAnswerWait(),
			n.Towerd.Config.QueryTimeout.Duration, n.Towerd.Config.ServeStale.ClientTimeout.Duration))
	case !p.viaTowerd && p.opts.timeout >= 2 && !firstIsLoopback(servers):
		// A resolver on loopback loses no packets to the node's programs;
		// it retries upstream by its own timers.
		saw := fmt.Sprintf("lookups go to %s with timeout:%d", describeServers(servers, listen), p.opts.timeout)
		if !hasOption(p.opts.words, "timeout") {
			saw += " (glibc's default)"
		}
		out = append(out, newFinding("resolver-timeout-long", Warning, "%s: a lost packet holds a lookup for %d s", saw, p.opts.timeout))
	}
	if p.opts.singleRequest {
		sev, saw := Warning, "options single-request: a miss costs the shared resolver two round trips, one after the other"
		if p.viaTowerd {
			sev, saw = Info, "options single-request: each lookup asks towerd twice in a row; a miss that towerd forwards waits for two upstream answers"
		}
		out = append(out, newFinding("resolver-single-request", sev, saw))
	}
	return out
}

// firstIsLoopback: glibc's first server is on this node (none listed
// means 127.0.0.1).
func firstIsLoopback(servers []string) bool {
	if len(servers) == 0 {
		return true
	}
	host, _, _ := net.SplitHostPort(servers[0])
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

func describeServers(servers, listen []string) string {
	if len(servers) == 0 {
		return "127.0.0.1 (resolv.conf names none)"
	}
	return servers[0] + ", " + describeNameserver(servers[0], listen)
}

func hasOption(words []string, name string) bool {
	for _, w := range words {
		if n, _, _ := strings.Cut(w, ":"); n == name {
			return true
		}
	}
	return false
}
