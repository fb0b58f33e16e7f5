// Package faultproxy is a user-space UDP and TCP proxy that sits in front of
// any DNS server and misbehaves on purpose: delay with jitter, loss, duplicate
// replies, SERVFAIL, truncation, forged replies (wrong ID, wrong question,
// wrong source port) sent ahead of the genuine one, and total black-holing.
// There is no netem on the machines towerd is tested on, so this is how the
// tests and `towerd drill` make a bad day.
//
// Every random choice comes from one generator seeded by the caller
// (math/rand/v2 PCG), so a failing run can be replayed with its seed: the
// fates drawn are the same for the same order of arriving queries. Faults
// can be switched while the proxy runs (SetFaults, SetBlackhole, Flap), and
// Stats counts what the proxy did, so a test can assert counts, not speeds.
package faultproxy

import (
	"math/rand/v2"
	"sync"
	"time"
)

// Faults says how the proxy misbehaves. The zero value is a transparent
// proxy. Probabilities are in [0, 1] and drawn independently per query.
type Faults struct {
	// Delay holds each query this long before it is forwarded; Jitter
	// spreads it uniformly over [Delay-Jitter, Delay+Jitter] (never below 0).
	Delay, Jitter time.Duration
	// Loss drops a packet in each direction with this probability: the
	// query before it is forwarded, and the reply before it is relayed.
	Loss float64
	// Duplicate sends the reply twice.
	Duplicate float64
	// ServFail answers SERVFAIL in place of forwarding the query.
	ServFail float64
	// Truncate answers a UDP query with an empty reply with TC set, so the
	// client retries over TCP (which passes through). No effect on TCP.
	Truncate float64
	// WrongID, WrongQuestion and WrongSource send a forged copy of the
	// genuine reply ahead of it over UDP: with the ID plus one, with another
	// question name, or from another port of the proxy. Forgeries carry
	// ForgedAddr in place of every A record's address, so a resolver that
	// accepts one is caught by what it answers or caches.
	WrongID, WrongQuestion, WrongSource float64
	// Blackhole drops everything, both ways, while true: queries are read
	// and never answered, and replies still on their way are not relayed.
	Blackhole bool
}

// ForgedAddr is the IPv4 address every forged reply carries (TEST-NET-3,
// RFC 5737): it never appears in a genuine test zone.
const ForgedAddr = "203.0.113.66"

// Stats counts what the proxy did since it started. Queries counts every
// query read (UDP and TCP); the other fields count the fates applied.
type Stats struct {
	Queries       uint64 // queries read from clients
	TCPQueries    uint64 // of which over TCP
	Forwarded     uint64 // queries sent to the target
	Replies       uint64 // genuine replies relayed to clients
	LostQueries   uint64 // queries dropped by Loss
	LostReplies   uint64 // replies dropped by Loss
	Blackholed    uint64 // queries or replies dropped while black-holing
	Duplicated    uint64 // extra copies of replies sent
	ServFails     uint64 // SERVFAILs sent in place of forwarding
	Truncated     uint64 // TC replies sent in place of forwarding
	WrongID       uint64 // forged replies with a wrong ID sent
	WrongQuestion uint64 // forged replies with a wrong question sent
	WrongSource   uint64 // forged replies sent from a wrong port
	TargetErrors  uint64 // queries the target did not answer (timeout, refused)
}

// fate is everything decided about one query when it arrives, in one draw
// under the lock, so a replay with the same seed and the same arrival order
// applies the same faults.
type fate struct {
	hold                                time.Duration
	loseQuery, loseReply                bool
	duplicate, servFail, truncate       bool
	wrongID, wrongQuestion, wrongSource bool
}

// chooser holds the seeded generator and the faults in force.
type chooser struct {
	mu     sync.Mutex
	rng    *rand.Rand
	faults Faults
}

func newChooser(f Faults, seed uint64) *chooser {
	return &chooser{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), faults: f}
}

// draw decides a query's fate. It always draws the same number of values,
// whatever the probabilities, so switching one fault on at run time does
// not shift every later decision of the others.
func (c *chooser) draw() fate {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.faults
	roll := func(p float64) bool { return c.rng.Float64() < p }
	var x fate
	span := int64(2*f.Jitter) + 1
	x.hold = max(0, f.Delay-f.Jitter+time.Duration(c.rng.Int64N(span)))
	x.loseQuery, x.loseReply = roll(f.Loss), roll(f.Loss)
	x.duplicate, x.servFail, x.truncate = roll(f.Duplicate), roll(f.ServFail), roll(f.Truncate)
	x.wrongID, x.wrongQuestion, x.wrongSource = roll(f.WrongID), roll(f.WrongQuestion), roll(f.WrongSource)
	return x
}

func (c *chooser) reseed(seed uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

func (c *chooser) get() Faults {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.faults
}

func (c *chooser) set(f Faults) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults = f
}

func (c *chooser) blackholing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.faults.Blackhole
}

func (c *chooser) setBlackhole(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults.Blackhole = on
}
