package upstream

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/clock"
	"github.com/towerd/towerd/resolver/dnswire"
)

// GroupOptions tunes a Group. The zero value of every field means its
// documented default, so GroupOptions{} is a sensible configuration.
type GroupOptions struct {
	// MaxAttempts bounds the attempts of one resolution across all servers,
	// and so the packets one client query can cause; 0 means 3.
	MaxAttempts int
	// MinAttemptTimeout is the floor of the per-attempt timeout (the wait
	// before the next packet; the attempt itself waits on until its
	// resolution ends); 0 means 100ms. It keeps a jittery sub-millisecond
	// server from being sent a retransmission after one slow packet.
	MinAttemptTimeout time.Duration
	// MaxAttemptTimeout is the ceiling of the per-attempt timeout and the
	// timeout of a health probe; 0 means 1500ms.
	MaxAttemptTimeout time.Duration
	// InitialAttemptTimeout is used before a server's first RTT sample;
	// 0 means 500ms.
	InitialAttemptTimeout time.Duration
	// FailThreshold is the number of retransmission timeouts in a row,
	// each twice the one before, that a server leaves without any reply
	// (to clients' attempts and to the group's own probes alike,
	// silence.go) before it is marked down; 0 means 3. A reply of any
	// rcode, or one that does not parse, is a reply: an rcode is an answer
	// about one name, never a failure of the server.
	FailThreshold int
	// MinSilence and MaxSilence bound the silence that marks a server
	// down: never less than MinSilence since its first unanswered packet
	// (0 means 1s), always by MaxSilence (0 means 5s), whatever
	// FailThreshold and the RTOs say.
	MinSilence, MaxSilence time.Duration
	// ProbeName and ProbeType are the question a health probe asks; ""
	// and 0 mean ". NS". Any well-formed reply, whatever its rcode, counts
	// as up, so an authoritative-only server that refuses "." is still up.
	ProbeName string
	ProbeType uint16
	// ProbeInterval is the wait before the first probe of a down server;
	// 0 means 1s. It doubles, up to 5s, while the server stays down.
	ProbeInterval time.Duration
	// OnHealthChange, if set, is called when a server is marked down or up,
	// so the caller can log it. It may call Servers but must not block long:
	// the exchange or probe that caused the change waits for it.
	OnHealthChange func(server string, up bool)
	// Observe, if set, is called once for every attempt (not probes) when
	// its resolution ends, with the server, the attempt's duration and ""
	// on a reply, ErrorKind(err) on a failure, or KindSuperseded for an
	// attempt still unanswered when another attempt's reply ended the
	// resolution.
	Observe func(server string, d time.Duration, kind string)
	// OnBrokenChain, if set, is called (CountBrokenChain) for a resolution
	// whose answer the caller found broken after it ended: a CNAME chase
	// across zones that looped or passed its limits, server the one whose
	// reply made it so. For metrics; it must not block.
	OnBrokenChain func(server string)
	// HedgeBudget is the share of attempts that may be hedges (hedge.go):
	// tokens earned per attempt sent, spent by a hedge; 0 means 0.05,
	// negative turns hedging (and exploring, which relies on it) off.
	HedgeBudget float64
	// OnHedge, if set, is called for each hedge event (HedgeSent,
	// HedgeWon, HedgeRefused), for metrics; it must not block.
	OnHedge func(event string)
	// TLSRoots verifies the certificates of the group's DNS over TLS
	// servers; nil means the system's roots.
	TLSRoots *x509.CertPool
	// OnTLSFailure, if set, is told why a TLS server's connection failed
	// (TLSFailureReasons), once per change of reason, so the caller can
	// log it once rather than per query.
	OnTLSFailure func(server, reason string, err error)
	// Clock is what the group reads the time from and makes every timer
	// with (issue 33): RTT samples, the call's RTO and deadline timer,
	// silence, probes and their timeouts; nil means the wall clock. A
	// caller's context deadline is the wall clock's, as sockets' are.
	Clock clock.Clock
}

// withDefaults fills zero fields and rejects settings that cannot work.
func (o GroupOptions) withDefaults() (GroupOptions, error) {
	if o.MaxAttempts < 0 || o.FailThreshold < 0 || o.MinAttemptTimeout < 0 ||
		o.MaxAttemptTimeout < 0 || o.InitialAttemptTimeout < 0 || o.ProbeInterval < 0 ||
		o.MinSilence < 0 || o.MaxSilence < 0 || o.HedgeBudget > 1 {
		return o, errors.New("negative group option, or a hedge budget above 1")
	}
	setDefault(&o.MaxAttempts, 3)
	setDefault(&o.FailThreshold, 3)
	setDefault(&o.MinAttemptTimeout, 100*time.Millisecond)
	setDefault(&o.MaxAttemptTimeout, 1500*time.Millisecond)
	setDefault(&o.InitialAttemptTimeout, 500*time.Millisecond)
	setDefault(&o.ProbeInterval, time.Second)
	setDefault(&o.MinSilence, defaultMinSilence)
	setDefault(&o.MaxSilence, defaultMaxSilence)
	setDefault(&o.ProbeType, dns.TypeNS)
	switch {
	case o.HedgeBudget == 0:
		o.HedgeBudget = defaultHedgeBudget
	case o.HedgeBudget < 0:
		o.HedgeBudget = 0
	}
	if o.ProbeName == "" {
		o.ProbeName = "."
	}
	if _, ok := dns.IsDomainName(o.ProbeName); !ok {
		return o, fmt.Errorf("probe name %q is not a domain name", o.ProbeName)
	}
	o.ProbeName = dns.Fqdn(o.ProbeName)
	if o.MinAttemptTimeout > o.MaxAttemptTimeout {
		return o, fmt.Errorf("min attempt timeout %s above max attempt timeout %s",
			o.MinAttemptTimeout, o.MaxAttemptTimeout)
	}
	if o.MinSilence > o.MaxSilence {
		return o, fmt.Errorf("min silence %s above max silence %s", o.MinSilence, o.MaxSilence)
	}
	o.Clock = clock.Or(o.Clock)
	return o, nil
}

func setDefault[T int | uint16 | time.Duration](v *T, def T) {
	if *v == 0 {
		*v = def
	}
}

// Group forwards to a list of servers: the fastest healthy one by
// measured latency gets the query (latency.go), a late first attempt is
// hedged to the next (hedge.go), and a silent server is marked down and
// probed (silence.go, health.go). It is safe for concurrent use.
type Group struct {
	name string
	zone string // name, lower-cased and fully qualified
	// scope is what the group's servers are believed about: its zone
	// (scrubwire.go).
	scope   Scope
	opts    GroupOptions
	servers []*server

	// scrubbed counts the records Scrub dropped, per section (answer,
	// authority, additional); Metrics reads them at scrape time.
	scrubbed [3]atomic.Uint64

	// ctx ends when the group closes; probes derive from it so Close
	// interrupts one in flight.
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex // guards closed against a prober starting during Close
	closed bool
	wg     sync.WaitGroup

	// allDown is closed while every server is marked down and replaced by
	// an open one when a server comes back (AllDownSignal).
	allDownMu sync.Mutex
	allDown   chan struct{}

	// recoveredAt is when a server last came back up (the clock's
	// UnixNano; 0: never), for RecoveredSince.
	recoveredAt atomic.Int64

	// budget pays for hedges; hedges counts their events for Hedges.
	budget *hedgeBudget
	hedges struct{ sent, won, refused, explored atomic.Uint64 }
	// roll draws from [0,1) for exploring (latency.go); tests fix it.
	roll func() float64

	// timers are the calls' (calltimers.go): the process's on the real
	// clock, else the group's own on its clock.
	timers *callTimers
}

// ServerStatus is a snapshot of one server of a Group, for /stats and
// metrics.
type ServerStatus struct {
	Address        string
	Up             bool
	SRTT           time.Duration // 0 before the first sample
	Tail           time.Duration // tail estimate (latency.go); 0 before the first sample
	AttemptTimeout time.Duration // what the next attempt would wait
	Queries        uint64        // attempts sent, probes excluded
	Timeouts       uint64
	NetworkErrors  uint64
	ServFails      uint64
	Refused        uint64
	Mismatches     uint64 // replies rejected for wrong ID, question or form
	Superseded     uint64 // attempts left unanswered when a sibling's reply won
	// TLS is a DNS over TLS server's connection counters; nil for a
	// plain server.
	TLS *TLSStatus
}

// NewGroup returns a Group named name over servers (ParseServer forms:
// plain, or tls://ADDRESS[:PORT]#NAME, mixed as configured).
// It returns ErrNoServers when servers is empty.
func NewGroup(name string, servers []string, opts GroupOptions) (*Group, error) {
	if len(servers) == 0 {
		return nil, fmt.Errorf("group %s: %w", name, ErrNoServers)
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("group %s: %w", name, err)
	}
	if _, ok := dns.IsDomainName(name); !ok {
		return nil, fmt.Errorf("group %q: not a domain name", name)
	}
	g := &Group{name: name, zone: strings.ToLower(dns.Fqdn(name)), opts: opts}
	var zone [dnswire.MaxNameLen]byte
	n, err := dns.PackDomainName(g.zone, zone[:], 0, nil, false)
	if err != nil {
		return nil, fmt.Errorf("group %q: %w", name, err)
	}
	g.scope.Zone = append([]byte(nil), zone[:n]...)
	for _, addr := range servers {
		s, err := newServer(addr, &opts)
		if err != nil {
			return nil, fmt.Errorf("group %s: %w", name, err)
		}
		g.servers = append(g.servers, s)
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.allDown = make(chan struct{})
	g.budget = newHedgeBudget(opts.HedgeBudget)
	g.timers = newCallTimers(opts.Clock)
	g.roll = randomRoll
	return g, nil
}

// Address returns the group's name.
func (g *Group) Address() string { return g.name }

// Close stops the probers and waits for them; it is idempotent. A
// resolution still works afterwards, but servers that go down are no longer probed.
func (g *Group) Close() error {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.cancel()
	g.wg.Wait()
	for _, s := range g.servers {
		if s.tls != nil {
			s.tls.Close()
		}
	}
	return nil
}

// usable lists the servers to try, in configured order: the healthy ones, or
// all of them when none is healthy, because a resolver that refuses to try
// has certainly failed while one that tries a "down" server may not have.
func (g *Group) usable() []*server {
	if healthy := g.healthy(); len(healthy) > 0 {
		return healthy
	}
	return g.servers
}

// healthy lists the servers not marked down, in configured order. When
// none is down that is g.servers itself, not a copy: the usual case costs
// no allocation per resolution.
func (g *Group) healthy() []*server {
	down := 0
	for _, s := range g.servers {
		s.mu.Lock()
		if s.down {
			down++
		}
		s.mu.Unlock()
	}
	if down == 0 {
		return g.servers
	}
	healthy := make([]*server, 0, len(g.servers))
	for _, s := range g.servers {
		s.mu.Lock()
		if !s.down {
			healthy = append(healthy, s)
		}
		s.mu.Unlock()
	}
	return healthy
}

// AllDown reports whether every server is marked down. The resolver then
// answers stale at once instead of making clients wait on a dead upstream.
func (g *Group) AllDown() bool { return len(g.healthy()) == 0 }

// AllDownSignal returns a channel that is closed once every server is marked
// down: already closed when they are now, else closed by the failure that
// takes the last healthy server down. A server coming back makes a new
// channel, so a caller asks again for each wait. The resolver waits on it
// beside the client response timer: a client that started waiting for a
// refresh just before the group learnt that its servers are gone gets its
// stale answer then, not when its timer runs out (issue 7, test 7).
func (g *Group) AllDownSignal() <-chan struct{} {
	g.allDownMu.Lock()
	defer g.allDownMu.Unlock()
	return g.allDown
}

// RecoveredSince reports whether a server was marked up again after t (by
// a reply or a probe, after it had been marked down).
func (g *Group) RecoveredSince(t time.Time) bool { return g.recoveredAt.Load() > t.UnixNano() }

// updateAllDown brings the AllDownSignal channel in line with the servers'
// health. It is called after every up or down change, with no server lock
// held; whichever of two racing changes calls it last reads both, so the
// channel never stays in a state the servers have left.
func (g *Group) updateAllDown() {
	g.allDownMu.Lock()
	defer g.allDownMu.Unlock()
	down := g.AllDown()
	select {
	case <-g.allDown:
		if !down {
			g.allDown = make(chan struct{})
		}
	default:
		if down {
			close(g.allDown)
		}
	}
}

// Servers returns a snapshot of every server in configured order.
func (g *Group) Servers() []ServerStatus {
	out := make([]ServerStatus, 0, len(g.servers))
	for _, s := range g.servers {
		s.mu.Lock()
		st := ServerStatus{
			Address:        s.plain.Address(),
			Up:             !s.down,
			SRTT:           s.srtt,
			Tail:           s.tailLocked(),
			AttemptTimeout: s.attemptTimeoutLocked(&g.opts),
		}
		s.mu.Unlock()
		st.Queries = s.queries.Load()
		st.Timeouts = s.timeouts.Load()
		st.NetworkErrors = s.networkErrors.Load()
		st.ServFails = s.servFails.Load()
		st.Refused = s.refused.Load()
		st.Superseded = s.superseded.Load()
		st.Mismatches = s.plain.Mismatches()
		if s.tls != nil {
			st.TLS = s.tls.status()
		}
		out = append(out, st)
	}
	return out
}

// HedgeCounts are a group's hedge events since it was made.
type HedgeCounts struct{ Sent, Won, Refused, Explored uint64 }

// Hedges returns the group's hedge counts.
func (g *Group) Hedges() HedgeCounts {
	return HedgeCounts{Sent: g.hedges.sent.Load(), Won: g.hedges.won.Load(),
		Refused: g.hedges.refused.Load(), Explored: g.hedges.explored.Load()}
}

// CountBrokenChain counts a chain the caller found broken across zones
// (GroupOptions.OnBrokenChain): the reply came from server, the answer is
// unusable, as a reply whose own chain is broken (KindChain).
func (g *Group) CountBrokenChain(server string) {
	if g.opts.OnBrokenChain != nil {
		g.opts.OnBrokenChain(server)
	}
}
