package upstream

import (
	"context"
	"fmt"
	"time"

	"github.com/miekg/dns"
)

// WireReply is ExchangeWire's answer: the reply either as its bytes, when
// the wire check found nothing to scrub, or unpacked and scrubbed.
type WireReply struct {
	// Raw, when set, is the reply as the server sent it (its ID the
	// attempt's), with its question's name in the server's letter case; it
	// passed the ID, question and source checks, and Scrub would leave it
	// unchanged (wirecheck.go). Its rcode is NOERROR or NXDOMAIN. The
	// caller owns it.
	Raw []byte
	// Msg, when Raw is nil, is the reply unpacked and scrubbed, exactly as
	// ExchangeScrubbedFrom returns it, with Scrub's result.
	Msg   *dns.Msg
	Scrub ScrubResult
	// Server is the host:port of the server that sent the reply.
	Server string
}

// ExchangeWire is ExchangeScrubbedFrom for a query already packed (the
// resolver's wire miss path, issue 17): every rule of a resolution is the
// same (attempts that wait for each other, a fresh random ID and socket per
// attempt, the RTO, health, TCP on TC, the ID, question and source check),
// but a reply the wire check finds clean comes back as bytes, never
// unpacked. query is the caller's: its ID is overwritten by each attempt,
// and it is not kept after the call. Its question must be uncompressed, as
// any packer writes a query's. Errors are ExchangeScrubbedFrom's; with a
// *RcodeError the reply is in Msg.
//
// The resolution gives up at deadline (the zero time: ctx's deadline, else
// 5 s) or when ctx is done. The deadline is a parameter, not a context of
// its own, because context.WithTimeout costs four allocations, a quarter
// of a wire miss's (docs/benchmarks.md).
func (g *Group) ExchangeWire(ctx context.Context, query []byte, deadline time.Time) (WireReply, error) {
	if err := ctx.Err(); err != nil {
		return WireReply{}, fmt.Errorf("group %s: %w", g.name, classify(ctx, err))
	}
	if ctxDeadline, ok := ctx.Deadline(); ok && (deadline.IsZero() || ctxDeadline.Before(deadline)) {
		deadline = ctxDeadline
	}
	if deadline.IsZero() {
		deadline = time.Now().Add(defaultResolutionTimeout)
	}
	reply, raw, server, err := g.resolve(ctx, deadline, query, nil, true)
	switch {
	case raw != nil:
		return WireReply{Raw: raw, Server: server}, err
	case reply == nil:
		return WireReply{}, err
	}
	reply.Id = 0
	return WireReply{Msg: reply, Server: server, Scrub: g.scrub(reply.Question, reply)}, err
}
