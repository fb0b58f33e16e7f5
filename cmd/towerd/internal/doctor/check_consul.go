package doctor

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// defaultCheckTimeout is Consul's timeout for an HTTP, TCP, gRPC, H2PING
// or UDP check that sets none (agent/checks: 10 s).
const defaultCheckTimeout = 10 * time.Second

// networkChecks are the check types that reach a target by name or
// address; "" is a check of the agent's config files, which the API lists
// without a type.
var networkChecks = map[string]bool{"http": true, "tcp": true, "grpc": true, "h2ping": true, "udp": true, "": true}

func checkConsul(n *Node) []Finding {
	c := n.Consul
	if c == nil {
		return nil
	}
	if c.Err != nil {
		return []Finding{newFinding("consul-unreachable", Warning, "%s: %s", c.Addr, oneLineErr(c.Err))}
	}
	var out []Finding
	// An ACL refusal is a 403 (401 from a proxy in front); any other error
	// is the agent's own, reported as what it is (issue 35: a 500 was
	// reported as a refused token).
	acl := newFinding("consul-acl-denied", Warning, "the agent at %s refused doctor's questions (token: %s)", c.Addr, tokenSource(n))
	failed := newFinding("consul-agent-error", Warning, "the agent at %s answered with errors", c.Addr)
	for _, e := range []struct {
		path string
		err  error
	}{{"/v1/agent/self", c.SelfErr}, {"/v1/agent/services", c.ServicesErr}, {"/v1/agent/checks", c.ChecksErr}} {
		var se *statusError
		switch {
		case e.err == nil:
		case errors.As(e.err, &se) && (se.Code == http.StatusForbidden || se.Code == http.StatusUnauthorized):
			acl = acl.with(e.path, "%s", oneLineErr(e.err))
		default:
			failed = failed.with(e.path, "%s", oneLineErr(e.err))
		}
	}
	for _, f := range []Finding{acl, failed} {
		if len(f.Items) > 0 {
			out = append(out, f)
		}
	}
	out = append(out, checkServices(c)...)
	out = append(out, checkChecks(n)...)
	out = append(out, checkAgentDNS(c)...)
	return out
}

func tokenSource(n *Node) string {
	if n.Towerd.TokenSource == "" {
		return "none"
	}
	return n.Towerd.TokenSource
}

func checkServices(c *consulView) []Finding {
	noAddr := newFinding("consul-service-no-address", Info, "answered with the node's address %s", c.NodeAddr)
	named := newFinding("consul-service-address-hostname", Warning, "Consul's DNS answers these with a CNAME")
	for _, s := range c.Services {
		subject := fmt.Sprintf("%s (%s)", s.ID, s.Name)
		switch {
		case s.Address == "" && isName(c.NodeAddr):
			named = named.with(subject, "no address of its own; the node's is the name %s", c.NodeAddr)
		case s.Address == "":
			noAddr = noAddr.with(subject, "port %d", s.Port)
		case isName(s.Address):
			named = named.with(subject, "address %s, port %d", s.Address, s.Port)
		}
	}
	var out []Finding
	for _, f := range []Finding{noAddr, named} {
		if len(f.Items) > 0 {
			out = append(out, f)
		}
	}
	return out
}

// checkChecks judges each network check by its target and timeout against
// the node's resolver.
func checkChecks(n *Node) []Finding {
	c := n.Consul
	retry, retryFrom := n.resolverRetry()
	hosts := n.hostsFileNames()
	var judged int
	byName := newFinding("consul-check-hostname", Warning, "")
	short := newFinding("consul-check-timeout-under-resolver", Problem, "%s", retryFrom)
	unknown := newFinding("consul-check-target-unknown", Info, "")
	for _, ck := range c.Checks {
		if !networkChecks[ck.Type] {
			continue
		}
		subject := ck.ID
		if ck.Name != "" && ck.Name != ck.ID {
			subject += " (" + ck.Name + ")"
		}
		if ck.Target == "" {
			if ck.Type != "" {
				unknown = unknown.with(subject, "%s check", ck.Type)
			}
			continue
		}
		judged++
		host := targetHost(ck.Target)
		if !isName(host) || hosts[strings.ToLower(host)] {
			continue
		}
		timeout, note := ck.Timeout, ""
		if timeout == 0 {
			timeout, note = defaultCheckTimeout, " (Consul's default)"
		}
		detail := fmt.Sprintf("%s %s, timeout %v%s; seen in its %s", ck.Type, ck.Target, timeout, note, ck.TargetFrom)
		byName = byName.with(subject, "%s", detail)
		if timeout <= retry {
			short = short.with(subject, "%s", detail)
		}
	}
	var out []Finding
	if len(byName.Items) > 0 {
		byName.Saw = fmt.Sprintf("%d of the %d checks whose target doctor saw resolve a host name, all through this node's resolver", len(byName.Items), judged)
		out = append(out, byName)
	}
	if len(short.Items) > 0 {
		out = append(out, short)
	}
	if len(unknown.Items) > 0 {
		unknown.Saw = fmt.Sprintf("%d check(s); data_dir %q", len(unknown.Items), c.DataDir)
		out = append(out, unknown)
	}
	return out
}

func checkAgentDNS(c *consulView) []Finding {
	d := c.DNS
	if !d.Known {
		return nil
	}
	var out []Finding
	if len(d.Recursors) > 0 {
		f := newFinding("consul-recursors", Info, "recursors, each given recursor_timeout %s", d.RecursorTimeout)
		for _, r := range d.Recursors {
			f = f.with(r, "")
		}
		out = append(out, f)
	}
	if !d.AllowStale {
		out = append(out, newFinding("consul-dns-allow-stale-off", Warning, "dns_config.allow_stale = false"))
	}
	out = append(out, newFinding("consul-dns-config", Info,
		"agent %s (datacenter %s): only_passing = %t, allow_stale = %t (max_stale %s), use_cache = %t (cache_max_age %s), soa.min_ttl = %d",
		c.Node, c.Datacenter, d.OnlyPassing, d.AllowStale, d.MaxStale, d.UseCache, d.CacheMaxAge, d.SOAMinTTL))
	return out
}

// targetHost is the host a check's target names: a URL's, or that of
// host:port (gRPC's host:port/service).
func targetHost(target string) string {
	if strings.Contains(target, "://") {
		if u, err := url.Parse(target); err == nil {
			return u.Hostname()
		}
		return ""
	}
	hostport, _, _ := strings.Cut(target, "/")
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		return host
	}
	return strings.Trim(hostport, "[]")
}

// isName tells whether host is a name a resolver must look up: not empty,
// not an IP literal, not localhost (RFC 6761 §6.3: answered on the host).
func isName(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "" || host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return false
	}
	_, err := netip.ParseAddr(host)
	return err != nil
}

// hostsFileNames are the names of /etc/hosts, which glibc and Go read
// before DNS when nsswitch.conf says files first (or has no hosts: line).
func (n *Node) hostsFileNames() map[string]bool {
	out := map[string]bool{}
	if !n.Hosts.ok() {
		return out
	}
	if !n.filesBeforeDNS() {
		return out
	}
	for _, line := range strings.Split(string(n.Hosts.Data), "\n") {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		for _, name := range f[min(1, len(f)):] {
			out[strings.ToLower(strings.TrimSuffix(name, "."))] = true
		}
	}
	return out
}

// What a check's last output shows of its target, when nothing else
// does: Consul's own wording ("HTTP GET http://…: 200 OK", "TCP connect
// host:port: Success", "gRPC check host:port/svc: success") or the
// resolver's ("lookup NAME on 10.0.0.2:53: …").
var (
	outputURL    = regexp.MustCompile(`https?://[^\s"']+`)
	outputTarget = regexp.MustCompile(`(?:TCP connect|gRPC check|UDP check|dial to|dial tcp|dial udp) ([^\s:]+:\d+[^\s:]*)`)
	outputLookup = regexp.MustCompile(`lookup ([^\s:]+)(?: on |: )`)
)

func targetFromOutput(out string) string {
	if m := outputURL.FindString(out); m != "" {
		return strings.TrimRight(m, ":")
	}
	if m := outputTarget.FindStringSubmatch(out); m != nil {
		return m[1]
	}
	if m := outputLookup.FindStringSubmatch(out); m != nil {
		return m[1]
	}
	return ""
}
