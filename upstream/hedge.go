package upstream

import (
	"sync"
	"time"
)

// A hedged miss (issue 36): when the first attempt of a resolution has no
// reply by its server's tail estimate (latency.go), the same question goes
// to the next server of the resolution's order, the next fastest (with a
// single server, or when the next is measured slower than the first's RTO,
// the same one from a new port and ID), and the first
// answer wins; both sockets are heard until the resolution ends, and what
// comes after is dropped with the sockets (wirecall.go's one end). Dean
// and Barroso ("The Tail at Scale", CACM 2013) show that a request resent
// after the 95th percentile cuts the tail for a few percent more
// requests; a lost packet, which would cost a whole RTO (at least
// upstream.min_attempt_timeout), costs the tail estimate instead.
//
// The hedge is the resolution's second attempt, sent early: it counts
// against MaxAttempts like any retransmission, so no resolution sends
// more packets than before. Three rules keep it from adding load where it
// hurts:
//   - a budget: a token bucket that starts empty, earns HedgeBudget of a
//     token per attempt sent (hedges excluded) and holds at most
//     hedgeBurst; a hedge (or an exploration, latency.go) takes a token,
//     and without one the attempt waits for its RTO as it always did. Unbound
//     refuses racing as unsocial (NLnetLabs/unbound#167): this bounds it to
//     a few percent of the queries a site's resolvers get from us. A hedge
//     that won while its first attempt, unanswered, had waited past its
//     RTO gets its token back: without hedging, that resolution would have
//     sent a retransmission at the RTO, so the hedge was that packet, sent
//     earlier, and no packet more. The budget so bounds what hedging adds
//     to the packets a site gets, (1 − loss)·P(RTT > tail) of the
//     attempts (2 % at the 98th percentile, whatever the loss), and a
//     lossy server's lost packets (each one a retransmission anyway) do
//     not spend the tokens of the late replies and explorations. Without
//     the refund, a server losing 2 % of exchanges would spend 4 % of
//     the 5 % on hedges alone (the lossy day: 1.04 queries per miss), 6 %
//     with two servers exploring, and one losing 4 % would run the
//     bucket dry, its lost packets waiting for their RTO again.
//   - no hedge while every server of the zone is silent (suspect or down,
//     silence.go): an outage is never amplified;
//   - one hedge per resolution, and only of its first attempt.
// A SERVFAIL or REFUSED never wins while another attempt may still answer
// (resolution.go, settleLocked), so a hedge that fails does not end a
// resolution its first attempt may still answer.

// hedgeBurst is the most tokens the budget holds: enough for a burst of
// lost packets, few enough that a budget spent stays spent.
const hedgeBurst = 10

// defaultHedgeBudget is GroupOptions.HedgeBudget's default: hedges and
// explorations may add 5 % to the attempts. They need 4 % (the replies
// later than the 98th percentile, 2 %, and exploreShare's 2 %, latency.go),
// so a burst of late replies is paid for; "a few percent", as Dean and
// Barroso's hedged requests cost (docs/resolving.md works it out).
const defaultHedgeBudget = 0.05

// Hedge events, for GroupOptions.OnHedge and the hedges metric.
const (
	HedgeSent    = "sent"    // a hedge went out
	HedgeWon     = "won"     // a hedge's reply was the answer
	HedgeRefused = "refused" // a hedge was due but the budget had no token
	HedgeExplore = "explore" // another server asked beside the fastest (latency.go)
)

// hedgeBudget is a group's token bucket of hedges.
type hedgeBudget struct {
	mu     sync.Mutex
	tokens float64
	share  float64 // tokens earned per attempt; 0: hedging is off
}

// newHedgeBudget returns an empty bucket: hedges are earned by traffic,
// so a group that has sent a handful of queries (a test's, a node's first
// seconds) sends no hedge at all.
func newHedgeBudget(share float64) *hedgeBudget { return &hedgeBudget{share: share} }

// earn adds one attempt's share of a token.
func (b *hedgeBudget) earn() {
	if b.share == 0 {
		return
	}
	b.mu.Lock()
	b.tokens = min(b.tokens+b.share, hedgeBurst)
	b.mu.Unlock()
}

// take spends a token, if there is one.
func (b *hedgeBudget) take() bool {
	if b.share == 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// refund gives back the token of a hedge that took the place of a
// retransmission (WireCall.endLocked), within hedgeBurst.
func (b *hedgeBudget) refund() {
	if b.share == 0 {
		return
	}
	b.mu.Lock()
	b.tokens = min(b.tokens+1, hedgeBurst)
	b.mu.Unlock()
}

// zoneSilent reports whether every server of the group is silent: marked
// down, or suspect (its silence watcher at work).
func (g *Group) zoneSilent() bool {
	for _, s := range g.servers {
		s.mu.Lock()
		silent := s.down || s.watching
		s.mu.Unlock()
		if !silent {
			return false
		}
	}
	return true
}

// hedgeEvent reports one hedge event.
func (g *Group) hedgeEvent(event string) {
	switch event {
	case HedgeSent:
		g.hedges.sent.Add(1)
	case HedgeWon:
		g.hedges.won.Add(1)
	case HedgeRefused:
		g.hedges.refused.Add(1)
	case HedgeExplore:
		g.hedges.explored.Add(1)
	}
	if g.opts.OnHedge != nil {
		g.opts.OnHedge(event)
	}
}

// armHedgeLocked sets when the first attempt a, just sent, is hedged: its
// tail estimate (r.hedgeAfter, at least minHedgeDelay) after it was sent,
// if that comes before its RTO and another attempt may be sent. A
// resolution whose first server is not sampled yet is not hedged.
// Nor is one that could not send a hedge now (canSendLocked): what it
// depends on does not change while a waits, the only time a hedge goes
// out; so a first attempt waiting on the zone's only server's TLS
// connection (nextLocked does not ask it again) arms no hedge, which
// would set the calls' timer for nothing on nearly every miss
// (calltimers.go).
func (c *WireCall) armHedgeLocked(a *attempt, hedgeAfter time.Duration) {
	if hedgeAfter <= 0 || c.g.budget.share == 0 {
		return
	}
	hedgeAfter = max(hedgeAfter, minHedgeDelay)
	if hedgeAfter >= a.rto || len(c.order) == 0 || !c.canSendLocked() {
		return
	}
	c.hedgeAt = a.sent.Add(hedgeAfter)
}

// hedgeLocked is the hedge falling due: if the first attempt is still
// the only one and still waiting, another may be sent and a server of the
// zone is not silent, the hedge goes out, paid for by a token (none: no
// hedge, and the attempt waits for its RTO).
func (c *WireCall) hedgeLocked() (end bool) {
	c.hedgeAt = time.Time{}
	// A first attempt waiting on a TLS connection is hedged too, to
	// another server: nextLocked does not ask its server again (tlscall.go).
	if len(c.attempts) != 1 || (c.attempts[0].state != waitingUDP && c.attempts[0].state != waitingTLS) ||
		!c.canSendLocked() || c.g.zoneSilent() {
		c.armLocked()
		return false
	}
	if !c.g.budget.take() {
		c.g.hedgeEvent(HedgeRefused)
		c.armLocked()
		return false
	}
	// The next server is not worth asking when it is measured slower than
	// the first's RTO: the first would most likely answer, or be asked
	// again, before it. Then the hedge asks the first server again, from a
	// new port with a new ID, as with a single server: what made it late
	// is most likely a lost packet.
	first := c.attempts[0]
	if next := c.nextLocked(); next != first.server {
		e := next.estimate()
		c.again = e.sampled && e.srtt > first.rto
	}
	c.hedged = true
	c.g.hedgeEvent(HedgeSent)
	return c.sendLocked()
}
