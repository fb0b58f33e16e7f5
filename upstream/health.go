package upstream

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/clock"
)

// maxProbeInterval caps the probe backoff: a server that has been down for
// an hour is still noticed within 5 s of coming back (with the failure
// recheck ending then, issue 23), at one packet per 5 s while it is not.
const maxProbeInterval = 5 * time.Second

// maxBackoffShift bounds RTO doubling; the clamp to MaxAttemptTimeout does the
// real limiting, this only keeps the shift from overflowing.
const maxBackoffShift = 16

// server is one member of a Group: its transport, its RTT estimate and its
// health. Counters are atomics so Servers can read them without the lock.
type server struct {
	// plain names the server (Address) and counts its mismatches; it is
	// the transport too unless tls is set (tls.go), and then it never
	// sends a packet: a TLS server is not asked in clear.
	plain *Plain
	tls   *tlsTransport
	clock clock.Clock // the group's

	mu       sync.Mutex
	srtt     time.Duration // smoothed RTT, RFC 6298 section 2
	rttvar   time.Duration // RTT variation, RFC 6298 section 2
	sampled  bool          // srtt and rttvar hold at least one sample
	tail     time.Duration // tail quantile of the latest replies' RTTs (latency.go)
	tailRing [tailWindow]time.Duration
	tailNext int           // where tailRing's next RTT goes
	tailHeld int           // RTTs in tailRing
	tailQ    time.Duration // tailRing's quantile, before tail's floor for few replies
	backoff  int           // RTO doublings since the last sample (RFC 6298 section 5.5)
	down     bool
	probing  bool   // a prober goroutine owns this server; at most one at a time
	watching bool   // a silence watcher owns this server (silence.go); at most one
	stateSeq uint64 // bumped on each up/down change so stale notifications are dropped

	// heardAt is when a reply last came from the server (the clock's
	// UnixNano): any reply its socket accepted, whatever its rcode, and
	// whether it parses or not. The silence watcher reads it.
	heardAt atomic.Int64

	// notifyMu serialises OnHealthChange calls for this server; it is never
	// held together with mu, so the callback may call Group.Servers.
	notifyMu    sync.Mutex
	notifiedSeq uint64

	queries       atomic.Uint64
	timeouts      atomic.Uint64
	networkErrors atomic.Uint64
	servFails     atomic.Uint64
	refused       atomic.Uint64
	superseded    atomic.Uint64
}

// attemptTimeoutLocked is the RFC 6298 retransmission timeout: srtt + 4·rttvar
// after the first sample, the initial value before it, doubled once per
// timeout since the last sample, clamped to the configured range. A timeout
// derived from the measured RTT resends a lost packet well inside the
// client's own timer instead of waiting a fixed second or two.
func (s *server) attemptTimeoutLocked(o *GroupOptions) time.Duration {
	rto := o.InitialAttemptTimeout
	if s.sampled {
		rto = s.srtt + 4*s.rttvar
	}
	for i := 0; i < s.backoff && rto < o.MaxAttemptTimeout; i++ {
		rto *= 2
	}
	return min(max(rto, o.MinAttemptTimeout), o.MaxAttemptTimeout)
}

// addSampleLocked folds one round trip into the estimate (RFC 6298 section
// 2.2 and 2.3, alpha 1/8, beta 1/4). Each attempt uses a fresh ID and socket,
// so a sample is never ambiguous and Karn's rule has nothing to exclude.
func (s *server) addSampleLocked(rtt time.Duration) {
	if !s.sampled {
		s.srtt, s.rttvar, s.sampled = rtt, rtt/2, true
	} else {
		delta := s.srtt - rtt
		if delta < 0 {
			delta = -delta
		}
		s.rttvar = (3*s.rttvar + delta) / 4
		s.srtt = (7*s.srtt + rtt) / 8
	}
	s.addTailLocked(rtt)
	s.backoff = 0
}

// addSample folds one round trip into s's estimate.
func (s *server) addSample(rtt time.Duration) {
	s.mu.Lock()
	s.addSampleLocked(rtt)
	s.mu.Unlock()
}

// backOff doubles s's next RTO after an attempt's RTO ran out (RFC 6298
// section 5.5); the next reply's sample resets it.
func (s *server) backOff() {
	s.mu.Lock()
	if s.backoff < maxBackoffShift {
		s.backoff++
	}
	s.mu.Unlock()
}

// count adds an attempt's outcome to s's counters.
func (s *server) count(kind string) {
	switch kind {
	case KindTimeout:
		s.timeouts.Add(1)
	case KindNetwork:
		s.networkErrors.Add(1)
	case KindServFail:
		s.servFails.Add(1)
	case KindRefused:
		s.refused.Add(1)
	case KindSuperseded:
		s.superseded.Add(1)
	}
}

// markUp records that s replied: whatever the rcode, it is reachable, so
// if it was down, it gets traffic again.
func (g *Group) markUp(s *server) {
	s.mu.Lock()
	changed := s.markUpLocked()
	up, seq := !s.down, s.stateSeq
	s.mu.Unlock()
	if changed {
		g.recoveredAt.Store(g.opts.Clock.Now().UnixNano())
		g.updateAllDown()
		g.notifyHealth(s, up, seq)
	}
}

// markUpLocked reports whether the server was down until now, and marks it
// up.
func (s *server) markUpLocked() bool {
	if !s.down {
		return false
	}
	s.down = false
	s.stateSeq++
	return true
}

// notifyHealth reports an up/down change. Two goroutines can change the same
// server's state at nearly the same time and reach this point in either
// order; dropping a change older than the last one reported keeps the log
// from ending on a state the server is no longer in.
func (g *Group) notifyHealth(s *server, up bool, seq uint64) {
	if g.opts.OnHealthChange == nil {
		return
	}
	s.notifyMu.Lock()
	defer s.notifyMu.Unlock()
	if seq <= s.notifiedSeq {
		return
	}
	s.notifiedSeq = seq
	g.opts.OnHealthChange(s.plain.Address(), up)
}

// startProber runs the probe loop for a server that was just marked down.
// The caller has set s.probing, which is what limits each server to one
// prober and so to one probe in flight (as CoreDNS's proxy health check).
func (g *Group) startProber(s *server) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return
	}
	g.wg.Add(1)
	go g.probeLoop(s)
}

// probeLoop probes s after ProbeInterval, then at doubling intervals, until a
// probe succeeds, live traffic brings the server back, or the group closes.
func (g *Group) probeLoop(s *server) {
	defer g.wg.Done()
	interval := g.opts.ProbeInterval
	timer, fired := g.opts.Clock.NewTimer(interval)
	defer timer.Stop()
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-fired:
		}
		s.mu.Lock()
		if !s.down {
			// An exchange succeeded meanwhile; nothing left to probe.
			s.probing = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		if g.probe(s) {
			return
		}
		interval = nextProbeInterval(interval)
		timer.Reset(interval)
	}
}

// probe asks s GroupOptions.ProbeName/ProbeType (". NS" by default) and
// marks it up on any well-formed reply, whatever its rcode: REFUSED from an
// authoritative-only server that serves no "." still proves it is there and
// talking DNS (CoreDNS's health check counts any reply the same way). It
// reports whether the server is up again.
func (g *Group) probe(s *server) bool {
	ctx, cancel := clock.WithTimeout(g.ctx, g.opts.Clock, g.opts.MaxAttemptTimeout)
	defer cancel()
	return g.ask(ctx, s, true)
}

// ask sends s one probe question and waits for its reply until ctx is
// done. A reply, whatever its rcode, is heard (silence.go), gives an RTT
// sample and marks s up, and for the prober (prober) ends its turn in the
// same step, so a server marked down again meanwhile gets a new prober;
// ask reports whether a reply came.
func (g *Group) ask(ctx context.Context, s *server, prober bool) bool {
	query := new(dns.Msg)
	query.SetQuestion(g.opts.ProbeName, g.opts.ProbeType) // sets RD

	start := g.opts.Clock.Now()
	reply, _ := s.transport().Exchange(ctx, query)
	rtt := g.opts.Clock.Since(start)
	if reply == nil {
		return false
	}
	s.heard()

	s.mu.Lock()
	// The probe's RTT is fresh evidence; without it a server that came back
	// slower than before would keep timing out on its old, short RTO.
	s.addSampleLocked(rtt)
	changed := s.markUpLocked()
	if prober {
		s.probing = false
	}
	seq := s.stateSeq
	s.mu.Unlock()
	if changed {
		g.recoveredAt.Store(g.opts.Clock.Now().UnixNano())
		g.updateAllDown()
		g.notifyHealth(s, true, seq)
	}
	return true
}

// nextProbeInterval doubles the wait between probes of a server that stays
// down, so a dead upstream costs one packet per 5 s rather than one per
// second, but never shrinks an interval configured above the cap.
func nextProbeInterval(d time.Duration) time.Duration {
	if d >= maxProbeInterval {
		return d
	}
	return min(2*d, maxProbeInterval)
}

// newServer makes the server of addr, a ParseServer form.
func newServer(addr string, opts *GroupOptions) (*server, error) {
	spec, err := ParseServer(addr)
	if err != nil {
		return nil, err
	}
	if spec.TLSName == "" {
		plain, err := NewPlain(spec.Addr)
		if err != nil {
			return nil, err
		}
		return &server{plain: plain, clock: opts.Clock}, nil
	}
	s := &server{plain: &Plain{addr: spec.String()}, tls: newTLSTransport(spec, opts.TLSRoots, opts.Clock), clock: opts.Clock}
	s.tls.heard, s.tls.mismatches, s.tls.onFailure = s.heard, &s.plain.mismatches, opts.OnTLSFailure
	return s, nil
}

// transport is what s is asked through: its TLS connection, or plain DNS.
func (s *server) transport() Upstream {
	if s.tls != nil {
		return s.tls
	}
	return s.plain
}
