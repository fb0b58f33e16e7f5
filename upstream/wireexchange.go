package upstream

import "time"

// WireReply is a resolution's reply, as bytes.
type WireReply struct {
	// Raw is the reply, nil when there is none (with the error). An
	// answer's bytes are scrubbed: as the server sent them (its ID the
	// attempt's, its question's name in the server's letter case) when the
	// scrubber dropped nothing, else written again without what it dropped.
	// With a *RcodeError it is the SERVFAIL or REFUSED reply as it came. It
	// passed the ID, question and source checks and parses as a dnswire.Msg.
	Raw []byte
	// Scrub is what the scrubber dropped, and where the chain left the zone.
	Scrub ScrubResult
	// Server is the host:port of the server that sent the reply.
	Server string
	// Sent is when the attempt that got Raw was sent (the real clock), and
	// TCP whether Raw came over TCP (a retry after TC): for dnstap's
	// forwarder messages (issue 38).
	Sent time.Time
	TCP  bool
	// Hedge: Raw is the reply to the hedge (hedge.go), sent when the first
	// attempt was late, not to the first attempt.
	Hedge bool
}

// Starter starts resolutions: a Group, or what stands in front of one
// (the resolver's zones).
type Starter interface {
	StartWire(c *WireCall, q WireQuery, recv WireReceiver)
}

// Wait starts q on s and waits for the reply, Kicking the resolution when
// q.Ctx is done; the reply's bytes are the caller's.
func Wait(s Starter, q WireQuery) (WireReply, error) {
	ch := make(wireWait, 1)
	c := new(WireCall)
	s.StartWire(c, q, ch)
	var o wireOutcome
	select {
	case o = <-ch:
	case <-q.Ctx.Done():
		c.Kick()
		o = <-ch
	}
	return o.wr, o.err
}

// wireWait is Wait's receiver.
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
