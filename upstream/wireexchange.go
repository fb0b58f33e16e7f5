package upstream

import (
	"context"
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
// its own, because context.WithTimeout costs four allocations, as many as
// most of a whole wire miss (docs/benchmarks.md). It is StartWire, waited
// for.
func (g *Group) ExchangeWire(ctx context.Context, query []byte, deadline time.Time) (WireReply, error) {
	ch := make(wireWait, 1)
	c := new(WireCall)
	g.StartWire(c, ctx, query, deadline, ch)
	var o wireOutcome
	select {
	case o = <-ch:
	case <-ctx.Done():
		c.Kick()
		o = <-ch
	}
	return o.wr, o.err
}

// wireWait is ExchangeWire's receiver.
type wireWait chan wireOutcome

type wireOutcome struct {
	wr  WireReply
	err error
}

func (w wireWait) ReceiveWire(wr WireReply, err error) {
	if wr.Raw != nil {
		wr.Raw = append([]byte(nil), wr.Raw...) // the reader's buffer
	}
	w <- wireOutcome{wr, err}
}
