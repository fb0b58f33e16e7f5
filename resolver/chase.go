package resolver

import (
	"context"
	"errors"
	"fmt"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/resolver/dnswire"
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
// Any failing step fails the whole query. The replies are read with
// dnswire's view and joined by its encoder (joinChase), and the joined
// chain is judged by the scrubber's own chain rules (upstream.ScrubCheck:
// a loop, or more than upstream.MaxChainLinks links, breaks it; issue
// 34: the chase had a second copy of them). It returns the joined answer
// for the one settle.
func (h *Handler) chase(ctx context.Context, s *settings, zone Zone, key cache.Key, raw []byte, server, target string) ([]byte, error) {
	// broken counts the chain as broken by the server whose reply made it
	// so (upstream.Group.CountBrokenChain: towerd_upstream_errors_total
	// {reason="chain"}, as a chain broken within one reply is).
	broken := func(z Zone, server string, err error) ([]byte, error) {
		if c, ok := z.Upstream.(brokenChainCounter); ok {
			c.CountBrokenChain(server)
		}
		return nil, err
	}
	joined := raw
	for step := 2; target != ""; step++ {
		if step > maxChaseSteps {
			return broken(zone, server, fmt.Errorf("%w: more than %d steps at %s", errChase, maxChaseSteps, target))
		}
		next := s.router.route(target)
		wr, err := h.ask(ctx, next, cache.Key{Name: target, Type: key.Type, Class: key.Class, DO: key.DO, CD: key.CD})
		if err != nil {
			return nil, fmt.Errorf("chasing %s in zone %s: %w", target, next.Name, err)
		}
		zone, server = next, wr.Server
		if joined, err = joinChase(joined, wr.Raw); err != nil {
			return nil, fmt.Errorf("chasing %s in zone %s: %w", target, next.Name, err)
		}
		// The chain joined so far, from the question, by the scrubber's
		// rules with every name believed: a name seen before is a loop
		// across the zones, found before the next zone is asked.
		verdict, err := upstream.ScrubCheck(joined, chainScope)
		if err != nil {
			return nil, fmt.Errorf("chasing %s in zone %s: %w", target, next.Name, err)
		}
		if verdict.Broken != nil {
			return broken(zone, server, fmt.Errorf("%w: %w", errChase, verdict.Broken))
		}
		target = wr.Scrub.ChaseName
	}
	return joined, nil
}

// chainScope believes every name: the joined chain is judged for its
// shape only, each part having been scrubbed for its own zone.
var chainScope = upstream.Scope{Zone: []byte{0}}

// errChaseJoin is a step's reply the chase cannot join: one that does not
// parse, or an rcode only an OPT record (which the joined answer drops)
// could carry.
var errChaseJoin = errors.New("reply cannot be joined")

// joinChase is the answer to the original question: first's chain up to
// the record that leaves its zone, then what the target's zone answered,
// written by dnswire's encoder from the two views. The rcode, AD and
// authority are the target zone's (the first server's word on the target
// was not believed; AD only when both parts had it), the additional
// records both, each once (dnswire.SameRecord), without OPT (the answer
// gets towerd's own). Every TTL becomes the smallest of all parts when the
// joined reply is settled (the cache's entry builder).
func joinChase(first, next []byte) ([]byte, error) {
	var a, b dnswire.Msg
	if a.Parse(first) != nil || b.Parse(next) != nil || a.QDCount != 1 {
		return nil, errChaseJoin
	}
	rcode := b.Rcode()
	if rcode > 0xF {
		return nil, errChaseJoin
	}
	flags := a.Flags&^(0xF|dnswire.FlagAD) | uint16(rcode)
	if a.Flags&b.Flags&dnswire.FlagAD != 0 {
		flags |= dnswire.FlagAD
	}
	var w dnswire.Builder
	w.Start(a.ID, flags)
	var q [dnswire.MaxNameLen]byte
	w.Question(a.Question(q[:0]), a.QType, a.QClass)
	for _, part := range []*dnswire.Msg{&a, &b} {
		from, to := part.Range(dnswire.Answer)
		for i := from; i < to; i++ {
			w.Record(dnswire.Answer, part, i)
		}
	}
	from, to := b.Range(dnswire.Authority)
	for i := from; i < to; i++ {
		w.Record(dnswire.Authority, &b, i)
	}
	// The additional records: first's, then next's not already there.
	addFrom, addTo := a.Range(dnswire.Additional)
	for i := addFrom; i < addTo; i++ {
		if a.RR(i).Type != dnswire.TypeOPT {
			w.Record(dnswire.Additional, &a, i)
		}
	}
	from, to = b.Range(dnswire.Additional)
	for j := from; j < to; j++ {
		if b.RR(j).Type == dnswire.TypeOPT || joinedHas(&a, addFrom, addTo, &b, from, j) {
			continue
		}
		w.Record(dnswire.Additional, &b, j)
	}
	if _, err := w.Finish(); err != nil {
		return nil, err
	}
	return w.AppendTo(nil), nil
}

// joinedHas reports whether next's additional record j is one joinChase
// wrote already: among first's additional records (aFrom to aTo-1) or
// next's before it (from bFrom).
func joinedHas(first *dnswire.Msg, aFrom, aTo int, next *dnswire.Msg, bFrom, j int) bool {
	for i := aFrom; i < aTo; i++ {
		if first.RR(i).Type != dnswire.TypeOPT && dnswire.SameRecord(first, i, next, j) {
			return true
		}
	}
	for i := bFrom; i < j; i++ {
		if next.RR(i).Type != dnswire.TypeOPT && dnswire.SameRecord(next, i, next, j) {
			return true
		}
	}
	return false
}
