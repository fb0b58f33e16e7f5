package upstream

import (
	"context"
	"fmt"
	"time"

	"github.com/miekg/dns"
)

// The tests' ways into a Group's one resolution (issue 34: only tests
// called them, so they live with the tests): each is Wait over StartWire,
// what the resolver runs, with a dns.Msg packed and unpacked around it.

// ExchangeWire resolves query, a query already packed, and waits for the
// reply (StartWire's): attempts that wait for each other, a fresh random ID
// and socket per attempt, the RTO, health, TCP on TC, the ID, question and
// source check, the scrubber. query is the caller's: its ID is overwritten
// by each attempt, and it is not kept after the call. Errors are
// ExchangeScrubbed's; with a *RcodeError the failure reply is in Raw.
//
// The resolution gives up at deadline (the zero time: ctx's deadline, else
// 5 s) or when ctx is done. The deadline is a parameter, not a context of
// its own, because context.WithTimeout costs four allocations, as many as
// most of a whole wire miss (docs/benchmarks.md). It is StartWire, waited
// for.
func (g *Group) ExchangeWire(ctx context.Context, query []byte, deadline time.Time) (WireReply, error) {
	return Wait(g, WireQuery{Ctx: ctx, Packed: query, Deadline: deadline})
}

// Exchange resolves m through the group and returns the scrubbed reply; see
// ExchangeScrubbed, whose ScrubResult it drops. A caller that caches or
// relays replies should use ExchangeScrubbed and act on ChaseName.
func (g *Group) Exchange(ctx context.Context, m *dns.Msg) (*dns.Msg, error) {
	reply, _, err := g.ExchangeScrubbed(ctx, m)
	return reply, err
}

// ExchangeScrubbed resolves m: it sends a first attempt to the first usable
// server and, each time the newest attempt's RTO runs out or an attempt
// fails (SERVFAIL, REFUSED, network error), one more to the next server, up
// to MaxAttempts packets. Every attempt's socket stays open until the
// resolution ends, and the first reply to any of them that is an answer
// (any rcode but SERVFAIL and REFUSED) wins: a slow server whose reply to
// the first packet arrives after the third was sent is still heard. The
// resolution ends then, when ctx is done (only the caller's deadline gives
// up on a slow server; without one, 5s does), or when every attempt has
// failed. The reply is scrubbed (with the group's zone as its scope) and
// carries m's ID. Without an answer, the last SERVFAIL or REFUSED reply is
// returned with a *RcodeError, else an error wrapping ErrTimeout or
// ErrNetwork, or the context's error when the caller cancelled.
func (g *Group) ExchangeScrubbed(ctx context.Context, m *dns.Msg) (*dns.Msg, ScrubResult, error) {
	reply, _, result, err := g.exchange(ctx, m)
	return reply, result, err
}

// exchange is Exchange and ExchangeScrubbed: the one resolution
// (ExchangeWire) of m packed, its reply unpacked for a caller that wants a
// dns.Msg.
func (g *Group) exchange(ctx context.Context, m *dns.Msg) (*dns.Msg, string, ScrubResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", ScrubResult{}, fmt.Errorf("group %s: %w", g.name, classify(ctx, err))
	}
	bufp := packPool.Get().(*[]byte)
	defer packPool.Put(bufp)
	packed, err := m.PackBuffer((*bufp)[:cap(*bufp)])
	if err != nil {
		return nil, "", ScrubResult{}, fmt.Errorf("group %s: packing query: %w", g.name, err)
	}
	*bufp = packed[:0]
	wr, err := g.ExchangeWire(ctx, packed, time.Time{})
	if wr.Raw == nil {
		return nil, "", ScrubResult{}, err
	}
	reply := new(dns.Msg)
	if uerr := reply.Unpack(wr.Raw); uerr != nil {
		// The view read it, miekg/dns does not (a record the view does not
		// read through): as a reply that does not unpack, no answer.
		return nil, "", ScrubResult{}, fmt.Errorf("group %s: %w: reply from %s does not unpack: %w", g.name, ErrNetwork, wr.Server, uerr)
	}
	reply.Id = m.Id
	return reply, wr.Server, wr.Scrub, err
}
