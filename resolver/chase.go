package resolver

import (
	"context"
	"fmt"
	"strings"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/upstream"
)

// maxChaseSteps bounds the resolutions one question may take when its
// CNAME chain crosses configured zones, the first one included: every step
// is an upstream resolution a client's one question costs. unbound's
// iterator gives up after 11 restarts (MAX_RESTART_COUNT, 1.17); the
// joined chain is bounded by upstream.MaxChainLinks as well.
const maxChaseSteps = 16

// errChase is why a chase across zones gave up: a loop, too many steps or
// too many links. It wraps upstream.ErrBrokenChain: the query then fails
// as on SERVFAIL (stale or SERVFAIL), and the partial chain is never
// cached.
var errChase = fmt.Errorf("CNAME chase across zones: %w", upstream.ErrBrokenChain)

// brokenChainCounter is the zone's upstream counting a chain found broken
// across zones (upstream.Group); a test's double may not count.
type brokenChainCounter interface {
	CountBrokenChain(server string)
}

var _ brokenChainCounter = (*upstream.Group)(nil)

// chase resolves the rest of a question's chain: raw is the first reply
// (from key's zone, scrubbed: its answer ends with the record that leaves
// the zone, ScrubResult.ChaseName is target), and every step asks the zone
// that owns the target (Handler.ask), as long as the chain goes on leaving
// zones, joining the answers (issue 11, unbound's scrubber: what one
// zone's servers say about another zone's names is never believed; a zone
// configured below another is one of those, upstream.WireQuery.Below).
// Any failing step fails the whole query. It returns the joined answer,
// packed, for the one settle.
func (h *Handler) chase(ctx context.Context, s *settings, zone Zone, key cache.Key, raw []byte, server, target string) ([]byte, error) {
	reply := new(dns.Msg)
	if err := reply.Unpack(raw); err != nil {
		return nil, fmt.Errorf("chasing from zone %s: %w", zone.Name, err)
	}
	// broken counts the chain as broken by the server whose reply made it
	// so (upstream.Group.CountBrokenChain: towerd_upstream_errors_total
	// {reason="chain"}, as a chain broken within one reply is).
	broken := func(z Zone, server string, err error) ([]byte, error) {
		if c, ok := z.Upstream.(brokenChainCounter); ok {
			c.CountBrokenChain(server)
		}
		return nil, err
	}
	seen := map[string]bool{strings.ToLower(key.Name): true}
	chainNamesOf(reply, seen)
	for step := 2; target != ""; step++ {
		if step > maxChaseSteps {
			return broken(zone, server, fmt.Errorf("%w: more than %d steps at %s", errChase, maxChaseSteps, target))
		}
		if seen[target] {
			return broken(zone, server, fmt.Errorf("%w: loop at %s", errChase, target))
		}
		seen[target] = true
		next := s.router.route(target)
		wr, err := h.ask(ctx, next, cache.Key{Name: target, Type: key.Type, Class: key.Class, DO: key.DO, CD: key.CD})
		if err != nil {
			return nil, fmt.Errorf("chasing %s in zone %s: %w", target, next.Name, err)
		}
		part := new(dns.Msg)
		if err := part.Unpack(wr.Raw); err != nil {
			return nil, fmt.Errorf("chasing %s in zone %s: %w", target, next.Name, err)
		}
		// A name of this part's chain seen before is a loop across the
		// zones, whatever the step's own reply looked like.
		zone, server = next, wr.Server
		for name := range chainNamesOf(part, map[string]bool{}) {
			if name != target && seen[name] {
				return broken(zone, server, fmt.Errorf("%w: loop at %s", errChase, name))
			}
			seen[name] = true
		}
		reply = joinChase(reply, part)
		if links := chainLinks(reply); links > upstream.MaxChainLinks {
			return broken(zone, server, fmt.Errorf("%w: more than %d links", errChase, upstream.MaxChainLinks))
		}
		target = wr.Scrub.ChaseName
	}
	return reply.Pack()
}

// chainNamesOf adds to names the lower-cased owners of m's CNAME and DNAME
// records (the chain's names in a scrubbed reply) and returns names.
func chainNamesOf(m *dns.Msg, names map[string]bool) map[string]bool {
	for _, rr := range m.Answer {
		if t := rr.Header().Rrtype; t == dns.TypeCNAME || t == dns.TypeDNAME {
			names[strings.ToLower(rr.Header().Name)] = true
		}
	}
	return names
}

// chainLinks counts the links of a joined answer's chain: its CNAMEs (a
// DNAME comes with the CNAME it synthesizes).
func chainLinks(m *dns.Msg) int {
	n := 0
	for _, rr := range m.Answer {
		if rr.Header().Rrtype == dns.TypeCNAME {
			n++
		}
	}
	return n
}

// joinChase is the answer to the original question: first's chain up to
// the record that leaves its zone, then what the target's zone answered.
// The rcode, AD and authority are the target zone's (the first server's
// word on the target was not believed; AD only when both parts had it),
// the additional records both, without OPT (the answer gets towerd's own).
// Every TTL becomes the smallest of all parts when the joined reply is
// settled (the cache's entry builder).
func joinChase(first, next *dns.Msg) *dns.Msg {
	out := first.Copy()
	out.Answer = append(out.Answer, next.Answer...)
	out.Rcode = next.Rcode
	out.AuthenticatedData = first.AuthenticatedData && next.AuthenticatedData
	out.Ns = append([]dns.RR(nil), next.Ns...)
	out.Extra = withoutOPT(out.Extra)
	for _, rr := range next.Extra {
		if rr.Header().Rrtype != dns.TypeOPT && !containsRR(out.Extra, rr) {
			out.Extra = append(out.Extra, rr)
		}
	}
	return out
}

func containsRR(rrs []dns.RR, rr dns.RR) bool {
	for _, have := range rrs {
		if dns.IsDuplicate(have, rr) {
			return true
		}
	}
	return false
}
