package doctor

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cmd/towerd/internal/install"
	"github.com/towerd/towerd/resolver"
	"github.com/towerd/towerd/resolver/dnswire"
)

// What one getaddrinfo costs the upstream with the node's search list and
// ndots (issue 28): glibc's res_search order (resolver.SearchList.Tries,
// the model the resolver reads its queries with), A and AAAA for each name it
// tries, and which of those questions towerd must send upstream on every
// lookup. Positive answers are cached, so in the steady state a lookup
// costs the NXDOMAINs tried before the name that exists: towerd never
// caches NXDOMAIN (a name that appears must be seen at once).

// lookupExample is a name the node may ask, and which of its tries exists.
type lookupExample struct {
	name, what string
	// exists: the name as it is exists; no search expansion does.
	exists bool
}

// lookupCost is what one lookup of an example costs.
type lookupCost struct {
	tries      []string
	asked      int // tries made before the answer (all of them when none exists)
	upstream   int // questions sent upstream on every lookup
	roundTrips int // upstream round trips, one after another
	// wasted are the round trips spent on names tried before the one
	// that exists.
	wasted int
}

// cost walks the tries of ex. Each try is an A and an AAAA question, asked
// together (one after the other with single-request). Through towerd, a
// try that is answered on the node (a zone whose servers are on loopback,
// as consul. is; a bare name with domain_needed; local.domains) costs the
// upstream nothing, and so does the name that exists, which is cached; the
// others, NXDOMAIN, cost it two questions every time. Not through towerd,
// every try is a round trip to the resolver. With towerd's search-list
// rules (rules: search.enabled, and the list is the node's), the
// NXDOMAINs are still asked, but in one round: the client waits that
// round only when no name of the lookup exists, and none once the one
// that exists is known.
func (n *Node) cost(ex lookupExample, search []string, opts glibcOptions, viaTowerd, rules bool) lookupCost {
	c := lookupCost{tries: resolver.SearchList{Domains: search, Ndots: opts.ndots}.Tries(ex.name)}
	perTry := 1
	if opts.singleRequest {
		perTry = 2
	}
	for _, t := range c.tries {
		c.asked++
		found := ex.exists && t == ex.name
		if !viaTowerd || (!found && !n.answeredOnNode(t)) {
			c.upstream += 2
			c.roundTrips += perTry
			if !found {
				c.wasted += perTry
			}
		}
		if found {
			break
		}
	}
	if !ex.exists {
		c.wasted = 0 // nothing was found: the tries are the lookup
	}
	if viaTowerd && rules {
		c.roundTrips, c.wasted = min(c.roundTrips, perTry), 0
		if ex.exists {
			c.roundTrips = 0
		}
	}
	return c
}

// searchRules tells whether towerd's search-list rules read the node's
// list: search.enabled, with search.resolv_conf the file doctor read.
func (n *Node) searchRules() bool {
	s := n.Towerd.Config.Search
	return s.Enabled && s.ResolvConf == install.ResolvConfPath
}

// answeredOnNode tells whether towerd answers name without a shared
// upstream.
func (n *Node) answeredOnNode(name string) bool {
	cfg := n.Towerd.Config
	fqdn := dns.CanonicalName(name)
	if cfg.Local.DomainNeeded && !strings.Contains(strings.TrimSuffix(fqdn, "."), ".") {
		return true
	}
	for _, d := range cfg.Local.Domains {
		if dnswire.InZoneText(fqdn, dns.CanonicalName(d)) {
			return true
		}
	}
	best, servers := "", n.Towerd.RootZone.Servers
	for _, z := range cfg.MergedZones() {
		if z.Name != "." && dnswire.InZoneText(fqdn, z.Name) && len(z.Name) > len(best) {
			best, servers = z.Name, z.Servers
		}
	}
	if len(servers) == 0 {
		return false
	}
	for _, s := range servers {
		host, _, err := net.SplitHostPort(s)
		if err != nil {
			host = s
		}
		if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() {
			return false
		}
	}
	return true
}

// checkSearchList reports what the search list costs, when there is one.
func checkSearchList(n *Node) []Finding {
	if !n.ResolvConf.ok() {
		return nil
	}
	p := n.resolverPath()
	search := p.conf.Search
	if len(search) == 0 {
		return nil
	}
	domain := strings.TrimSuffix(dns.CanonicalName(n.Towerd.Config.Consul.Domain), ".")
	if domain == "" {
		domain = "consul"
	}
	examples := []lookupExample{
		{"web.service." + domain, "a Consul service", true},
		{"api.example.com", "a name that exists", true},
		{"ghost.example.com", "a name that exists nowhere", false},
		{"ghost", "a bare name that exists nowhere", false},
	}
	sev := Info
	f := newFinding("search-list-cost", Info, "")
	for _, ex := range examples {
		c := n.cost(ex, search, p.opts, p.viaTowerd, n.searchRules())
		if c.wasted > 0 {
			sev = Warning // a name that exists waits on NXDOMAINs first
		}
		f = f.with(ex.name+" ("+ex.what+")", "tries %s: %d upstream question(s), %d round trip(s) in a row",
			strings.Join(c.tries[:c.asked], ", "), c.upstream, c.roundTrips)
	}
	f.Severity = sev
	f.Saw = fmt.Sprintf("search %s, ndots:%d", strings.Join(search, " "), p.opts.ndots)
	if !p.viaTowerd {
		f.Saw += "; lookups go to the resolver directly, so every name tried is a round trip to it"
	}
	if sev == Warning {
		f.Saw += fmt.Sprintf("; a name with fewer than %d dots, a Consul name among them, is tried under the search domains before itself, every time", p.opts.ndots)
	}
	if p.viaTowerd && n.searchRules() {
		f.Saw += "; towerd's search-list rules (search.enabled) ask a lookup's expansions in one round and answer them at once when the name it ends at is known"
	}
	return []Finding{f}
}
