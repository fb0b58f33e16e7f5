package resolver

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/upstream"
)

// maxChaseSteps bounds the resolutions one question may take when its
// CNAME chain crosses configured zones, the first one included; unbound's
// iterator gives up after 8 restarts too (MAX_RESTART_COUNT).
const maxChaseSteps = 8

// errChase is why a chase across zones gave up: a loop, or too many steps.
// The query then fails as if the upstream had (stale or SERVFAIL), and the
// partial chain is never cached.
var errChase = errors.New("CNAME chase across zones")

// exchange resolves key through zone's upstream and, when the answer's
// CNAME/DNAME chain leaves the zone (ScrubResult.ChaseName), resolves the
// target through the zone that owns it, as often as the chain goes on
// leaving, and joins the answers (issue 11, unbound's scrubber: what one
// zone's servers say about another zone's names is never believed). Any
// failing step fails the whole query. server is the one that answered the
// question itself (for the query log), "" when none did.
func (h *Handler) exchange(ctx context.Context, s *settings, zone Zone, key cache.Key) (reply *dns.Msg, server string, err error) {
	reply, server, chase, err := exchangeScrubbed(ctx, zone.Upstream, upstreamQuery(key))
	return h.chase(ctx, s, zone, key, reply, server, chase, err)
}

// chase is exchange's part after the first reply (reply, from server, with
// the scrubber's ChaseName chase, or err): the rest of the chain through
// the zones that own it. The wire miss path (wiremiss.go) hands it a
// reply its wire check declined.
func (h *Handler) chase(ctx context.Context, s *settings, zone Zone, key cache.Key, reply *dns.Msg, server, chase string, err error) (*dns.Msg, string, error) {
	if err == nil && chase == "" {
		reply, chase = cutAtSubzone(s, zone, reply)
	}
	if err != nil || chase == "" {
		return reply, server, err
	}
	seen := map[string]bool{strings.ToLower(key.Name): true}
	for step := 2; chase != ""; step++ {
		if step > maxChaseSteps {
			return nil, server, fmt.Errorf("%w: more than %d steps at %s", errChase, maxChaseSteps, chase)
		}
		if seen[chase] {
			return nil, server, fmt.Errorf("%w: loop at %s", errChase, chase)
		}
		seen[chase] = true
		next := s.router.route(chase)
		q := upstreamQuery(cache.Key{Name: chase, Type: key.Type, Class: key.Class, DO: key.DO, CD: key.CD})
		var part *dns.Msg
		part, _, chase, err = exchangeScrubbed(ctx, next.Upstream, q)
		if err != nil {
			return nil, server, fmt.Errorf("chasing %s in zone %s: %w", q.Question[0].Name, next.Name, err)
		}
		if chase == "" {
			part, chase = cutAtSubzone(s, next, part)
		}
		reply = joinChase(reply, part)
	}
	return reply, server, nil
}

// cutAtSubzone finds where reply's answer chain, which the upstream of
// zone kept as inside its zone, enters a zone configured below it (the
// servers of "." answering a CNAME into "consul."): the upstream's
// scrubber knows only its own zone, the router knows them all. It returns
// reply cut there (a copy: the answer and additional records owned by
// names of other zones, and the authority, which speaks of the chain's
// end, left out) and that target; reply itself and "" when the chain stays.
func cutAtSubzone(s *settings, zone Zone, reply *dns.Msg) (*dns.Msg, string) {
	if len(reply.Answer) == 0 || len(reply.Question) != 1 {
		return reply, ""
	}
	ours := func(name string) bool { return s.router.route(name).Name == zone.Name }
	name := strings.ToLower(reply.Question[0].Name)
	target := ""
	for step := 0; step < maxChaseSteps && target == ""; step++ {
		next := ""
		for _, rr := range reply.Answer {
			if c, ok := rr.(*dns.CNAME); ok && strings.EqualFold(c.Hdr.Name, name) {
				next = strings.ToLower(dns.Fqdn(c.Target))
				break
			}
		}
		switch {
		case next == "":
			return reply, ""
		case !ours(next):
			target = next
		}
		name = next
	}
	if target == "" {
		return reply, ""
	}
	keepOurs := func(rrs []dns.RR) []dns.RR {
		var kept []dns.RR
		for _, rr := range rrs {
			if rr.Header().Rrtype == dns.TypeOPT || ours(rr.Header().Name) {
				kept = append(kept, rr)
			}
		}
		return kept
	}
	cut := *reply
	cut.Answer = keepOurs(reply.Answer)
	cut.Extra = keepOurs(reply.Extra)
	cut.Ns = nil
	return &cut, target
}

// exchangeScrubbed asks up, through ExchangeScrubbedFrom when it has it
// (every upstream.Group); any other upstream's reply is taken as it comes,
// without a server's name. chase is ScrubResult's ChaseName.
func exchangeScrubbed(ctx context.Context, up upstream.Upstream, m *dns.Msg) (reply *dns.Msg, server, chase string, err error) {
	if up, ok := up.(scrubbingExchanger); ok {
		reply, server, result, err := up.ExchangeScrubbedFrom(ctx, m)
		return reply, server, result.ChaseName, err
	}
	reply, err = up.Exchange(ctx, m)
	return reply, "", "", err
}

// joinChase is the answer to the original question: first's chain up to
// the record that leaves its zone, then what the target's zone answered.
// The rcode, AD and authority are the target zone's (the first server's
// word on the target was not believed; AD only when both parts had it),
// the additional records both, without OPT (the answer gets towerd's own).
// Every TTL becomes the smallest of all parts when the reply is shaped
// (cache.Shape) and stored.
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
