package consul

import (
	"context"
	"errors"
	"slices"
	"time"
)

// Which services are watched, in the demand mode: questions count in
// Answer (noteAsked), a name past the doorkeeper is read once (a probe) and
// admitted by use (admit.go); watches end after IdleTimeout without a
// question, EmptyGrace without an instance, or on the agent's 429, which
// also shrinks the cap until it grows back. The catalog mode is in
// catalog.go.

// maxToProbe bounds the names waiting for their first read; past it a
// name waits for its next question.
const maxToProbe = 64

// probeResult is a first read of a name, before it may be watched.
type probeResult struct {
	key       string
	instances []instance
	index     uint64
	err       error
	sent      uint64 // the gate's generation when the read was sent
}

// checkEvery is how often idle and empty watches are looked for (and the
// counts decayed): a quarter of the shortest of IdleTimeout and EmptyGrace,
// within [10 ms, 1 min].
func (w *Watcher) checkEvery() time.Duration {
	return min(max(min(w.cfg.IdleTimeout, w.cfg.EmptyGrace)/4, 10*time.Millisecond), time.Minute)
}

// manage runs the demand mode: it reads the agent once (the domain and
// datacenter name every record), then starts the watches questions ask for
// and ends the idle ones, until ctx ends.
func (w *Watcher) manage(ctx context.Context) {
	for failures := 0; ; {
		err := w.ensureAgent(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			w.listContact(0)
			break
		}
		failures++
		w.listFailure(err, failures)
		d := (&loop[int]{timing: w.cfg.Timing, jitter: w.jitter}).backoff(failures)
		if w.clock.Sleep(ctx, d) != nil {
			return
		}
	}
	w.mu.Lock()
	w.checkSynced()
	w.mu.Unlock()
	tick, ticks := w.clock.NewTicker(w.checkEvery())
	defer tick.Stop()
	pingFailures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case key := <-w.demand:
			w.consider(key)
		case r := <-w.probed:
			w.probeDone(r)
		case <-ticks:
			w.expire()
			pingFailures = w.pingIfIdle(ctx, pingFailures)
		}
	}
}

// pingIfIdle reads /v1/agent/self (local to the agent, no RPC to the
// servers) when no watch runs, so that State and the metrics still say
// whether the agent answers: without it an idle node's last success would
// age until TowerdConsulWatchStale fired. It returns the consecutive
// failures so far.
func (w *Watcher) pingIfIdle(ctx context.Context, failures int) int {
	w.mu.Lock()
	idle := len(w.watches) == 0
	w.mu.Unlock()
	if !idle {
		return 0
	}
	w.rereadAgent.Store(true)
	if err := w.ensureAgent(ctx); err != nil {
		if ctx.Err() == nil {
			failures++
			w.listFailure(err, failures)
		}
		return failures
	}
	w.listContact(0)
	return 0
}

// noteAsked counts a question for the service key. It reports whether the
// service is watched; if not, and the name is past the doorkeeper, the
// demand loop is told to consider it.
func (w *Watcher) noteAsked(key string) bool {
	if w.noteWatched(key) {
		return true
	}
	if !w.cfg.watchAll() && w.known(key) && w.cands.ask(key, w.clock.Now(), w.cfg.IdleTimeout) {
		select {
		case w.demand <- key:
		default:
		}
	}
	return false
}

// noteWatched is noteAsked for a watched service: it counts the question
// and reports true, or reports false for a service not watched, having
// done nothing.
func (w *Watcher) noteWatched(key string) bool {
	sl := w.watchedLoop(key)
	if sl != nil {
		w.countAsked(sl)
	}
	return sl != nil
}

// watchedLoop is the loop watching the service key, nil when none does.
// key is only read during the call (AppendAnswer's aliases a packet).
func (w *Watcher) watchedLoop(key string) *serviceLoop {
	if view := w.view.Load(); view != nil {
		return (*view)[key]
	}
	return nil
}

// countAsked counts a question for the service sl watches.
func (w *Watcher) countAsked(sl *serviceLoop) {
	sl.hits.Add(hitUnit)
	now := w.clock.Now().UnixNano()
	// Stored at most once a second: a hot service's questions do not all
	// write the same cache line twice.
	if now-sl.asked.Load() > int64(time.Second) {
		sl.asked.Store(now)
	}
}

// consider queues a name asked for (past the doorkeeper) for its first
// read, if it may be watched at all now.
func (w *Watcher) consider(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.watches[key]; ok || w.runCtx == nil || w.runCtx.Err() != nil || w.probing == key ||
		slices.Contains(w.toProbe, key) || len(w.toProbe) >= maxToProbe {
		return
	}
	if !w.mayProbe(key) {
		return
	}
	w.toProbe = append(w.toProbe, key)
	w.nextProbe()
}

// mayProbe reports whether key may be read now with a view to watching it,
// counting a refusal. Callers hold w.mu.
func (w *Watcher) mayProbe(key string) bool {
	if w.gate.isClosed() && (len(w.watches) > 0 || w.knownList.Load() != nil) {
		// The agent is failing and a watch or the service list waits for
		// it at the gate: its DNS answers meanwhile, and a name asked for
		// costs no attempt to reach it. (With neither, nobody probes: a
		// first read is then the probe, and opens the gate.)
		return false
	}
	now := w.clock.Now()
	if now.Before(w.readAfter) {
		// The last first read failed because of the agent, and nothing
		// waits at the gate: the next one waits the agent's backoff, so a
		// name asked for while the agent is away costs an attempt per
		// backoff, not per question.
		return false
	}
	hits, keptOut := w.cands.hits(key, now)
	if keptOut || !w.known(key) {
		return false
	}
	if _, reason := w.admission(key, hits); reason != "" {
		w.refuse(key, reason)
		return false
	}
	return true
}

// nextProbe starts the first read of the next name waiting, if none runs.
// Callers hold w.mu.
func (w *Watcher) nextProbe() {
	for w.probing == "" && len(w.toProbe) > 0 {
		key := w.toProbe[0]
		w.toProbe = w.toProbe[1:]
		if _, ok := w.watches[key]; ok || !w.mayProbe(key) {
			continue
		}
		w.probing = key
		ctx := w.runCtx
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			r := probeResult{key: key, sent: w.gate.generation()}
			release, err := w.acquireRead(ctx)
			if err == nil {
				r.instances, r.index, r.err = w.fetchService(ctx, w.probe, key, 0)
				release()
			}
			select {
			case w.probed <- r:
			case <-ctx.Done():
			}
		}()
	}
}

// probeDone takes a first read: a name with instances is watched (from
// that read on) if it may still be; one without is kept out.
func (w *Watcher) probeDone(r probeResult) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.probing = ""
	defer w.nextProbe()
	now := w.clock.Now()
	switch {
	case r.err != nil && (ofService(r.err) || errors.Is(r.err, ErrThrottled)):
		// Its reply broke a bound, or the agent has no connection left for
		// it (the cap then shrinks, as for a watch's 429): the agent's DNS
		// answers it, for a while.
		if errors.Is(r.err, ErrBodyTooLarge) {
			w.state.OversizeBodies++
		}
		w.recordError(r.err)
		if errors.Is(r.err, ErrThrottled) {
			w.throttled(r.key)
		}
		w.cands.keepOut(r.key, now, w.cfg.IdleTimeout)
		return
	case r.err != nil:
		w.recordError(r.err) // asked again at its next question, after the agent's backoff
		w.cands.readDone(r.key)
		w.readFailures++
		w.readAfter = now.Add(w.agentBackoff(w.readFailures))
		return
	}
	w.answeredLocked(r.index, r.sent)
	r.instances = w.tagged(r.instances)
	if len(r.instances) == 0 {
		w.state.EmptyReads++
		w.cands.keepOut(r.key, now, w.cfg.IdleTimeout)
		w.followList(now)
		w.log.Debug("consul watch: no instance of a service asked for; not watched", "service", r.key)
		return
	}
	if _, ok := w.watches[r.key]; ok {
		return
	}
	hits, _ := w.cands.hits(r.key, now)
	victim, reason := w.admission(r.key, hits)
	if reason != "" {
		w.refuse(r.key, reason) // the set changed during the read
		return
	}
	if victim != "" {
		w.stopWatch(victim, endCap)
	}
	w.startWatch(r.key, r.key, false, now, &r)
	w.log.Debug("consul watch: watching a service asked for", "service", r.key, "watched", len(w.watches),
		"made_room", victim)
}

// lastAsked is when sl's service was last asked for, counting a watch that
// started without a question (restored, pinned) as asked when Run started.
func (w *Watcher) lastAsked(sl *serviceLoop) int64 {
	return max(sl.asked.Load(), w.started.UnixNano())
}

// expire ends the watches nobody asked about for IdleTimeout and those
// without an instance for EmptyGrace, decays the counts, and lets the cap
// grow back by one if the agent sent no 429 since the last check.
func (w *Watcher) expire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.clock.Now()
	for key, sl := range w.watches {
		switch {
		case sl.pinned:
		case now.UnixNano()-w.lastAsked(sl) >= int64(w.cfg.IdleTimeout):
			w.stopWatch(key, endIdle)
		case !sl.emptySince.IsZero() && now.Sub(sl.emptySince) >= w.cfg.EmptyGrace:
			w.stopWatch(key, endEmpty)
		}
	}
	w.decay(now)
	if !w.throttle && w.limit < w.cfg.MaxWatches {
		w.limit++
	}
	w.throttle = false
	w.state.Limit = w.limit
}

// throttled handles a 429 from the agent (too many connections from this
// client): the watch that got it ends instead of retrying, and the cap
// shrinks to the set's size, growing back one per check without a 429. A
// pinned watch keeps retrying with backoff. Callers hold w.mu.
func (w *Watcher) throttled(key string) {
	w.state.Agent429s++
	w.throttle = true
	if sl := w.watches[key]; sl != nil && !sl.pinned {
		w.stopWatch(key, end429)
	}
	w.limit = max(len(w.watches), w.state.Pinned, 1)
	w.state.Limit = w.limit
	w.log.Warn("consul watch: the agent refused a query with 429 (too many connections from this client); "+
		"watching fewer services", "service", key, "watched", len(w.watches), "limit", w.limit)
}
