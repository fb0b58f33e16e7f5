package resolver

import (
	"fmt"
	"sort"
	"strings"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/dnswire"
)

// Zone sends the queries for names at or below Name to Upstream.
type Zone struct {
	// Name is the zone apex, e.g. "consul." or "." for everything else.
	Name string
	// Upstream answers the zone's queries: an *upstream.Group.
	Upstream Upstream

	// below are the zones configured below this one, in wire form: its
	// servers are not believed about their names (upstream.WireQuery).
	below [][]byte
}

// router picks the zone of a query name by longest suffix, comparing labels
// case-insensitively (RFC 4343), so "A.Corp.Example." belongs to "corp.example.".
type router struct {
	// zones is sorted by label count, most labels first, so the first match
	// is the longest one.
	zones []Zone
}

func newRouter(zones []Zone) (*router, error) {
	seen := make(map[string]bool, len(zones))
	sorted := make([]Zone, 0, len(zones))
	for _, z := range zones {
		if z.Upstream == nil {
			return nil, fmt.Errorf("zone %q has no upstream", z.Name)
		}
		if _, ok := dns.IsDomainName(z.Name); !ok {
			return nil, fmt.Errorf("zone %q is not a domain name", z.Name)
		}
		name := dns.CanonicalName(z.Name)
		if seen[name] {
			return nil, fmt.Errorf("zone %q is configured twice", name)
		}
		seen[name] = true
		sorted = append(sorted, Zone{Name: name, Upstream: z.Upstream})
	}
	if !seen["."] {
		// Without a root zone some names would have nowhere to go; refuse the
		// configuration rather than answer them with SERVFAIL forever.
		return nil, fmt.Errorf("no zone for %q: every name needs an upstream", ".")
	}
	sort.SliceStable(sorted, func(i, j int) bool {
		return dns.CountLabel(sorted[i].Name) > dns.CountLabel(sorted[j].Name)
	})
	for i := range sorted {
		for _, z := range sorted {
			if z.Name != sorted[i].Name && dnswire.InZoneText(z.Name, sorted[i].Name) {
				wire, ok := dnswire.AppendWireName(nil, z.Name)
				if !ok {
					return nil, fmt.Errorf("zone %q is not a domain name", z.Name)
				}
				sorted[i].below = append(sorted[i].below, wire)
			}
		}
	}
	return &router{zones: sorted}, nil
}

// route returns the zone responsible for qname.
func (r *router) route(qname string) Zone {
	name := strings.ToLower(dns.Fqdn(qname))
	for _, z := range r.zones {
		if dnswire.InZoneText(name, z.Name) {
			return z
		}
	}
	// Unreachable: newRouter insists on a root zone.
	return r.zones[len(r.zones)-1]
}

// routeCanonical is route for a name already canonical (lower case, fully
// qualified), as the fast path reads it, without allocating.
func (r *router) routeCanonical(name []byte) Zone {
	for _, z := range r.zones {
		if dnswire.InZoneText(name, z.Name) {
			return z
		}
	}
	return r.zones[len(r.zones)-1]
}
