package admin

import (
	"strings"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/upstream"
)

// The checks of a snapshot an operator loads (`towerd cache load`), made by
// the daemon itself, on top of those a state file gets at start (cache.Load:
// format, checksum, each entry answers its key, the store policy, no stored
// time in the future, TTLs cut to the running max_ttl). A file's checksum
// proves only that it is whole, not who wrote it: issue 21's forged snapshot
// passed every one of those and made www.example.com answer 6.6.6.6, put
// web.service.consul and another [[zone]]'s names in under ".", and brought
// DO-only entries and unscrubbed authority and additional records with it.
// An entry goes in only if it is what towerd itself could have stored from
// an upstream of the running configuration.

// Why importCheck drops an entry: stable words, counted by reason in the
// load's answer and in the log.
const (
	rejectDNSSECKey   = "a DO or CD entry: towerd does not check DNSSEC, so only a server's own reply may answer those"
	rejectClass       = "class other than IN"
	rejectRecords     = "a name local data or the Consul watch answers, not an upstream"
	rejectScrubbed    = "records the zone's servers would not be believed for (the scrubber drops them)"
	rejectChainLeaves = "the answer's CNAME chain leaves the zone the name is forwarded to"
)

// importCheck is cache.LoadOptions.Check for `towerd cache load`: it asks
// the running configuration what would answer k, and refuses every entry
// that an upstream of that zone could not have given towerd.
func (a *Server) importCheck(k cache.Key, m *dns.Msg) string {
	switch {
	case k.DO || k.CD:
		return rejectDNSSECKey
	case k.Class != dns.ClassINET:
		return rejectClass
	}
	if covered, _ := a.handler.RecordsCover(k.Name); covered {
		return rejectRecords
	}
	// Every name routes to a zone with upstreams ("." at least), by the
	// longest suffix, as a query for it would.
	zone, scope := a.handler.ScopeOf(k.Name)
	raw, err := m.Pack()
	if err != nil {
		return rejectScrubbed
	}
	res, err := upstream.ScrubCheck(raw, scope)
	switch {
	case err != nil, res.Broken != nil:
		// A chain that loops or runs past upstream.MaxChainLinks is no
		// answer from an upstream (issue 23), nor from a snapshot.
		return rejectScrubbed
	case res.ChaseName != "":
		// The scrubber also drops what follows the exit (counted in
		// Dropped): the exit is the reason.
		return rejectChainLeaves
	case res.Dropped() > 0:
		return rejectScrubbed
	}
	// The scrubber knows only the zone it is given: "." keeps a CNAME into
	// consul., which the resolver would chase there (and never believe from
	// "."'s servers). So every name on the chain must route where the key
	// does, and none may be one the records answer.
	for _, rr := range m.Answer {
		c, ok := rr.(*dns.CNAME)
		if !ok {
			continue
		}
		target := strings.ToLower(dns.Fqdn(c.Target))
		if a.handler.ZoneOf(target) != zone {
			return rejectChainLeaves
		}
		if covered, _ := a.handler.RecordsCover(target); covered {
			return rejectRecords
		}
	}
	return ""
}
