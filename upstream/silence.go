package upstream

import (
	"sync"
	"time"

	"github.com/towerd/towerd/resolver/clock"
)

// A server is marked down by its silence, not by a count of failed
// resolutions (issue 23). Counting resolutions made the time to "down"
// depend on how many clients asked: serve-stale's failure recheck stops
// new attempts for 30 s after a failed refresh, so on an outage a sole
// server was marked down only 41 s in, and three names that one server
// happened not to answer marked a healthy server down.
//
// So: when an attempt's RTO runs out (or it meets a network error) with
// no reply from its server since it was sent, the server is suspect, and
// a watcher of its own asks it the probe question at each further RTO,
// each twice the one before (RFC 6298 section 5.5), whatever the clients
// do. Any reply from the server, to anything, whatever its rcode and
// whether it parses or not, ends the suspicion. FailThreshold RTOs in a
// row without one, and at least MinSilence since the first unanswered
// packet, mark it down (at the defaults, a 200 ms RTO: 1.4 s); MaxSilence
// (5 s) of silence marks it down whatever the RTOs. The prober then takes
// over (health.go) and the resolver gives its stale answers at once.

// Defaults of GroupOptions.MinSilence and MaxSilence.
const (
	defaultMinSilence = time.Second
	defaultMaxSilence = 5 * time.Second
)

// heard records that a reply came from s now.
func (s *server) heard() { s.heardAt.Store(s.clock.Now().UnixNano()) }

// heardSince reports whether a reply came from s at or after t.
func (s *server) heardSince(t time.Time) bool { return s.heardAt.Load() >= t.UnixNano() }

// suspect is told that an attempt sent to s at sent has had its RTO run
// out, or met a network error, without a reply. Unless s replied since,
// is down already (its prober is at work) or is being watched, it starts
// s's silence watcher.
func (g *Group) suspect(s *server, sent time.Time) { g.suspectAt(s, sent, time.Time{}) }

// suspectAt is suspect for an attempt whose RTO runs out at due, after
// its resolution ended (an answer to a sibling overtook it): the watcher
// waits until then, and only a server still not heard from since sent is
// suspect and probed.
func (g *Group) suspectAt(s *server, sent, due time.Time) {
	if s.heardSince(sent) {
		return
	}
	s.mu.Lock()
	if s.down || s.watching {
		s.mu.Unlock()
		return
	}
	s.watching = true
	s.mu.Unlock()

	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		s.mu.Lock()
		s.watching = false
		s.mu.Unlock()
		return
	}
	g.wg.Add(1)
	go g.watchSilence(s, sent, due)
}

// watchSilence asks s the probe question at each RTO from silentSince,
// the send time of the first packet s left unanswered (from due, when
// that is later: suspectAt), until s is heard
// from (the suspicion ends) or it has been silent long enough to be
// marked down (see above). It sends at most FailThreshold probes, each
// waited for until the watch ends, so a slow reply to the first still
// counts.
func (g *Group) watchSilence(s *server, silentSince, due time.Time) {
	defer g.wg.Done()
	latest := silentSince.Add(g.opts.MaxSilence)
	ctx, cancel := clock.WithDeadline(g.ctx, g.opts.Clock, latest)
	var probes sync.WaitGroup
	defer func() {
		cancel()
		probes.Wait()
	}()
	// Armed only while the watcher waits, so a test on the fake clock
	// that sees it armed (WaitTimers) knows the watcher is waiting.
	timer, fired := g.opts.Clock.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	if wait := due.Sub(g.opts.Clock.Now()); wait > 0 {
		timer.Reset(wait)
		select {
		case <-fired:
		case <-g.ctx.Done():
			g.endWatch(s)
			return
		}
	}
	// The RTO that raised the suspicion is the first that ran out.
	for unanswered := 1; ; unanswered++ {
		if s.heardSince(silentSince) {
			g.endWatch(s)
			return
		}
		now := g.opts.Clock.Now()
		if !now.Before(latest) ||
			(unanswered >= g.opts.FailThreshold && now.Sub(silentSince) >= g.opts.MinSilence) {
			break
		}
		probes.Add(1)
		go func() {
			defer probes.Done()
			g.ask(ctx, s, false)
		}()
		s.mu.Lock()
		wait := s.attemptTimeoutLocked(&g.opts)
		s.mu.Unlock()
		if unanswered+1 >= g.opts.FailThreshold {
			// The last RTO stretches to the floor, so a tiny RTO on a
			// loaded machine cannot mark a server down in milliseconds.
			wait = max(wait, silentSince.Add(g.opts.MinSilence).Sub(now))
		}
		timer.Reset(min(wait, latest.Sub(now)))
		select {
		case <-fired:
		case <-g.ctx.Done():
			g.endWatch(s)
			return
		}
		s.backOff()
	}
	g.markDown(s, silentSince)
}

// endWatch gives up s's watcher's turn: s was heard from, or the group is
// closing.
func (g *Group) endWatch(s *server) {
	s.mu.Lock()
	s.watching = false
	s.mu.Unlock()
}

// markDown marks s down after its silence since silentSince, unless a
// reply came in the meantime, and starts its prober.
func (g *Group) markDown(s *server, silentSince time.Time) {
	var changed, startProbe bool
	s.mu.Lock()
	s.watching = false
	if !s.down && !s.heardSince(silentSince) {
		s.down, changed = true, true
		s.stateSeq++
		if !s.probing {
			s.probing, startProbe = true, true
		}
	}
	up, seq := !s.down, s.stateSeq
	s.mu.Unlock()

	if changed {
		g.updateAllDown()
		g.notifyHealth(s, up, seq)
	}
	if startProbe {
		g.startProber(s)
	}
}
