package resolver

import (
	"errors"
	"fmt"
	"strings"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/dnswire"
)

// SearchList is one search list of towerd's clients (issue 28): the
// search domains of a resolv.conf, in order, and its ndots. The daemon
// gives the node's own (the search line of /etc/resolv.conf) and the ones
// configured for clients that read another file (containers).
type SearchList struct {
	// Domains are the search domains in the order the client tries them,
	// with or without a final dot.
	Domains []string
	// Ndots is resolv.conf's options ndots: a name with at least this many
	// dots is tried as it is before the search domains (glibc's default 1).
	Ndots int
}

// Bounds of Config.Search: a list longer than glibc read before 2.26
// (MAXDNSRCH, 6) is rare, and every domain is a question a round may ask
// ahead; RES_MAXNDOTS is glibc's ceiling of ndots.
const (
	MaxSearchLists   = 8
	MaxSearchDomains = 8
	maxNdots         = 15
)

// Tries are the names glibc's res_search asks for name, in order (glibc's
// resolv/res_query.c, which Go's resolver and musl follow for a name below
// ndots): as it is first when it has at least ndots dots, then under each
// search domain, then as it is when that was not tried first. A name with
// a final dot is asked only as it is. towerd doctor prices a search list
// with it; the resolver reads its queries' names against it (searchModel).
func (l SearchList) Tries(name string) []string {
	if strings.HasSuffix(name, ".") {
		return []string{name}
	}
	asIsFirst := strings.Count(name, ".") >= l.Ndots
	var tries []string
	if asIsFirst {
		tries = append(tries, name)
	}
	for _, d := range l.Domains {
		if d = strings.Trim(d, "."); d != "" {
			tries = append(tries, name+"."+d)
		}
	}
	if !asIsFirst {
		tries = append(tries, name)
	}
	return tries
}

// errSearchList is wrapped by every refusal of Config.Search.
var errSearchList = errors.New("search list")

// searchModel is Config.Search read for the resolver: which lookups a
// query name may be a try of, and what those lookups ask after it.
type searchModel struct {
	lists []searchSuffixes
}

// searchSuffixes is one list: each domain canonical with a leading dot
// (".corp.example."), so a name under it ends with it.
type searchSuffixes struct {
	suffixes []string
	ndots    int
}

// CheckSearchList reports why l cannot be one of Config.Search, or nil.
func CheckSearchList(l SearchList) error {
	_, err := newSearchModel([]SearchList{l})
	return err
}

func newSearchModel(lists []SearchList) (*searchModel, error) {
	if len(lists) == 0 {
		return nil, nil
	}
	if len(lists) > MaxSearchLists {
		return nil, fmt.Errorf("%w: %d lists, at most %d", errSearchList, len(lists), MaxSearchLists)
	}
	m := &searchModel{}
	for _, l := range lists {
		if l.Ndots < 0 || l.Ndots > maxNdots {
			return nil, fmt.Errorf("%w: ndots %d is outside 0 to %d", errSearchList, l.Ndots, maxNdots)
		}
		if len(l.Domains) > MaxSearchDomains {
			return nil, fmt.Errorf("%w: %d domains, at most %d", errSearchList, len(l.Domains), MaxSearchDomains)
		}
		s := searchSuffixes{ndots: l.Ndots}
		for _, d := range l.Domains {
			c := dns.CanonicalName(d)
			// A search domain is a host name's suffix: letters, digits,
			// '-' and '_' (a name with escapes is no resolv.conf word).
			wire, ok := dnswire.AppendWireName(nil, c)
			if !ok || c == "." || !dnswire.PlainLabels(wire) {
				return nil, fmt.Errorf("%w: %q is not a domain name", errSearchList, d)
			}
			s.suffixes = append(s.suffixes, "."+c)
		}
		if len(s.suffixes) > 0 {
			m.lists = append(m.lists, s)
		}
	}
	if len(m.lists) == 0 {
		return nil, nil
	}
	return m, nil
}

// searchTypes are the question types a lookup walks a search list for:
// getaddrinfo's A and AAAA. Other types (PTR above all, which glibc asks
// without searching) go the usual way.
func searchTypes(qtype uint16) bool { return qtype == dns.TypeA || qtype == dns.TypeAAAA }

// dots is how many dots the name a client typed has, for a canonical name
// (its final dot is not typed).
func dots(name string) int { return strings.Count(name, ".") - 1 }

// isTry reports whether name (canonical) may be a try of a lookup that
// asks something after it, without allocating: every route's miss asks,
// and most names are no such try.
func (m *searchModel) isTry(name string) bool {
	if m == nil || len(name) < 2 || strings.Contains(name, `\`) {
		return false
	}
	for _, l := range m.lists {
		if dots(name) >= l.ndots {
			return true // tried as it is first; the expansions follow
		}
		for i, sfx := range l.suffixes {
			if strictlyBelow(name, sfx) {
				base := name[:len(name)-len(sfx)]
				if strings.Count(base, ".") < l.ndots || i < len(l.suffixes)-1 {
					return true
				}
			}
		}
	}
	return false
}

// searchWalk is one reading of a query name as a try of a lookup.
type searchWalk struct {
	// later are the names the lookup asks after this try, in order,
	// canonical.
	later []string
	// first is set when the try is the first its lookup can start a round
	// with: the name as it is (at least ndots dots), or the name under the
	// list's first domain (a dotted name's as-is try starts a round only
	// on the evidence this one gives). Only such a reading asks ahead
	// (searchAhead): under nested domains every question is also a later
	// try of other readings, whose first tries started their rounds.
	first bool
	// firstExpansion is set when the try is the name as it is, asked
	// first (it has at least ndots dots): the lookup asks later only when
	// the name does not exist, which only a client asking
	// firstExpansion shows (searchAhead's evidence).
	firstExpansion string
}

// walks returns every reading of name (canonical) as a try of a lookup
// that asks something after it: per list, the name as it is and the name
// as a base under each of the list's domains.
func (m *searchModel) walks(name string) []searchWalk {
	if !m.isTry(name) {
		return nil
	}
	var out []searchWalk
	for _, l := range m.lists {
		if dots(name) >= l.ndots {
			w := searchWalk{first: true}
			for _, sfx := range l.suffixes {
				if c, ok := joinName(name[:len(name)-1], sfx); ok {
					w.later = append(w.later, c)
				}
			}
			if len(w.later) > 0 {
				w.firstExpansion = w.later[0]
				out = append(out, w)
			}
		}
		for i, sfx := range l.suffixes {
			if !strictlyBelow(name, sfx) {
				continue
			}
			base := name[:len(name)-len(sfx)]
			w := searchWalk{first: i == 0}
			for _, next := range l.suffixes[i+1:] {
				if c, ok := joinName(base, next); ok {
					w.later = append(w.later, c)
				}
			}
			if strings.Count(base, ".") < l.ndots {
				w.later = append(w.later, base+".") // tried as it is last
			}
			if len(w.later) > 0 {
				out = append(out, w)
			}
		}
	}
	return out
}

// joinName is base (canonical, without its final dot) under sfx, when the
// result is a name (at most 255 bytes on the wire).
func joinName(base, sfx string) (string, bool) {
	c := base + sfx
	if _, ok := dns.IsDomainName(c); !ok {
		return "", false
	}
	return c, true
}

// strictlyBelow reports whether name is below the search domain whose
// suffix (a dot and the domain) is sfx, with a label of its own before it:
// a try of that domain (dnswire.InZoneText, the one zone rule).
func strictlyBelow(name, sfx string) bool {
	return len(name) > len(sfx) && dnswire.InZoneText(name, sfx[1:])
}
