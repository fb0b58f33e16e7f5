package consul

import (
	"context"
	"time"
)

// Which services are watched. In the demand mode a question for an
// unwatched service starts its watch (on probation past the cap), watches
// nobody asks about end after IdleTimeout, and the agent's 429s shrink the
// cap until it grows back. In the catalog mode (Config.Services = ["*"]) the
// catalog's service list is followed, up to the cap.

// idleCheckEvery is how often idle watches are looked for.
func (w *Watcher) idleCheckEvery() time.Duration {
	return min(max(w.cfg.IdleTimeout/4, 10*time.Millisecond), time.Minute)
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
	tick := time.NewTicker(w.idleCheckEvery())
	defer tick.Stop()
	pingFailures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case key := <-w.demand:
			w.startDemanded(key)
		case <-tick.C:
			w.expireIdle()
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

// noteAsked records a question for the service key. It reports whether the
// service is watched; if not, the demand mode is told to start a watch.
func (w *Watcher) noteAsked(key string) bool {
	var sl *serviceLoop
	if view := w.view.Load(); view != nil {
		sl = (*view)[key]
	}
	if sl != nil {
		now := w.clock.Now().UnixNano()
		// Stored at most once a second: a hot service's questions do not all
		// write the same cache line.
		if now-sl.asked.Load() > int64(time.Second) {
			sl.asked.Store(now)
		}
		return true
	}
	if !w.cfg.watchAll() {
		select {
		case w.demand <- key:
		default:
		}
	}
	return false
}

// startDemanded starts the watch of a service a question asked for. When
// the set is full the new watch starts on probation (see Watcher.probation)
// and its first reply decides whether the least recently asked watch makes
// room for it (admit).
func (w *Watcher) startDemanded(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.watches[key]; ok || w.runCtx == nil || w.runCtx.Err() != nil {
		return
	}
	if len(w.watches) >= w.limit {
		if _, ok := w.leastRecentlyAsked(""); !ok {
			w.state.Refused++
			w.log.Debug("consul watch: set full of pinned services; not watching", "service", key)
			return
		}
		if w.probation != "" {
			return // one at a time; the next question asks again
		}
		w.probation = key
	}
	w.startWatch(key, key, false, w.clock.Now())
	w.log.Debug("consul watch: watching a service asked for", "service", key, "watched", len(w.watches),
		"probation", w.probation == key)
}

// leastRecentlyAsked returns the unpinned watch asked for longest ago,
// other than except. Callers hold w.mu.
func (w *Watcher) leastRecentlyAsked(except string) (string, bool) {
	var victim *serviceLoop
	var vkey string
	for k, sl := range w.watches {
		if sl.pinned || k == except {
			continue
		}
		if victim == nil || w.lastAsked(sl) < w.lastAsked(victim) {
			victim, vkey = sl, k
		}
	}
	return vkey, victim != nil
}

// admit ends a watch's probation with its first reply: a service with
// instances stays and the least recently asked watch makes room (if the
// set is still over the cap); one without ends again, leaving the set as
// it was. Callers hold w.mu.
func (w *Watcher) admit(key string, instances []instance) {
	w.probation = ""
	if len(instances) == 0 {
		w.stopWatch(key, "")
		w.log.Debug("consul watch: no instance of a service asked for while the set is full; not kept", "service", key)
		return
	}
	if len(w.watches) > w.limit {
		if victim, ok := w.leastRecentlyAsked(key); ok {
			w.stopWatch(victim, "cap")
		}
	}
}

// lastAsked is when sl's service was last asked for, counting a watch that
// started without a question (restored, pinned) as asked when Run started.
func (w *Watcher) lastAsked(sl *serviceLoop) int64 {
	return max(sl.asked.Load(), w.started.UnixNano())
}

// expireIdle ends the watches nobody asked about for IdleTimeout, and lets
// the cap grow back by one if the agent sent no 429 since the last check.
func (w *Watcher) expireIdle() {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.clock.Now().UnixNano()
	for key, sl := range w.watches {
		if !sl.pinned && now-w.lastAsked(sl) >= int64(w.cfg.IdleTimeout) {
			w.stopWatch(key, "idle")
		}
	}
	if !w.throttle && w.limit < w.cfg.MaxWatches {
		w.limit++
	}
	w.throttle = false
	w.state.Limit = w.limit
}

// throttled handles a 429 from the agent (too many connections from this
// client): the watch that got it ends instead of retrying, and the cap
// shrinks to the set's size, growing back one per idle check without a 429.
// A pinned watch keeps retrying with backoff. Callers hold w.mu.
func (w *Watcher) throttled(key string) {
	w.state.Agent429s++
	w.throttle = true
	if sl := w.watches[key]; sl != nil && !sl.pinned {
		w.stopWatch(key, "429")
	}
	w.limit = max(len(w.watches), w.state.Pinned, 1)
	w.state.Limit = w.limit
	w.log.Warn("consul watch: the agent refused a query with 429 (too many connections from this client); "+
		"watching fewer services", "service", key, "watched", len(w.watches), "limit", w.limit)
}
