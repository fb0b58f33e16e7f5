package consul

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

// One service's watch: starting and stopping its blocking health loop, the
// loop itself, and the queries it sends to the agent.

// startWatch starts the loop of one service; seed, if set, is its first
// read, done already (a probe). Callers hold w.mu.
func (w *Watcher) startWatch(key, name string, pinned bool, asked time.Time, seed *probeResult) {
	lctx, cancel := context.WithCancel(w.runCtx)
	sl := &serviceLoop{name: name, ctx: lctx, cancel: cancel, pinned: pinned}
	if !asked.IsZero() {
		sl.asked.Store(asked.UnixNano())
	}
	sl.hits.Store(w.cands.take(key))
	w.watches[key] = sl
	delete(w.recent, key) // its lingering view, if any, serves the new watch
	w.publish()
	w.state.Starts++
	w.state.Watched = len(w.watches)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.runService(sl, key, name, seed)
	}()
}

// publish makes the current set what Answer sees. Callers hold w.mu.
func (w *Watcher) publish() {
	view := make(map[string]*serviceLoop, len(w.watches))
	for k, sl := range w.watches {
		view[k] = sl
	}
	w.view.Store(&view)
}

// Reasons a watch ends, as counted in State and the metrics ("" = not
// counted: the catalog mode's list dropped the service).
const (
	endCap   = "cap"   // made room for a service asked more often
	endIdle  = "idle"  // no question for IdleTimeout
	end429   = "429"   // the agent refused its query
	endEmpty = "empty" // no instance left for EmptyGrace, or none at its first read
)

// stopWatch ends the loop of one service and forgets its records, so its
// questions go the normal way. Its count goes back to the candidates, and a
// watch that blocked leaves the agent a view for a while (recent).
// Callers hold w.mu.
func (w *Watcher) stopWatch(key, reason string) {
	sl := w.watches[key]
	if sl == nil {
		return
	}
	sl.cancel()
	delete(w.watches, key)
	w.publish()
	now := w.clock.Now()
	if sl.viewed.Load() {
		w.recent[key] = now
	}
	if !sl.pinned && !w.cfg.watchAll() {
		w.cands.put(key, sl.hits.Load(), time.Unix(0, w.lastAsked(sl)))
		if reason == endEmpty {
			w.cands.keepOut(key, now, w.cfg.IdleTimeout)
		}
	}
	w.store.remove(key)
	delete(w.pending, key)
	w.state.Watched = len(w.watches)
	switch reason {
	case endCap:
		w.state.EvictedCap++
	case endIdle:
		w.state.EvictedIdle++
	case end429:
		w.state.Evicted429++
	case endEmpty:
		w.state.EvictedEmpty++
	}
	if reason != "" {
		w.log.Debug("consul watch: watch ended", "service", key, "reason", reason)
	}
	w.checkSynced()
}

// queryOptions asks for a blocking read that any server may answer
// (AllowStale). The agent serves blocking health queries from its streaming
// backend on its own (Consul ≥ 1.10 default): one subscription per watched
// service at the servers, and nothing for changes of other services.
//
// UseCache (?cached) is deliberately not set: a real v1.14 agent answers a
// cached blocking query whose token was revoked at once, forever, with the
// last value, the same index and 200 (X-Cache: HIT) — the ACL error never
// shows and the query never blocks. A plain blocking query surfaces the 403.
func (w *Watcher) queryOptions(ctx context.Context, index uint64) (*api.QueryOptions, context.CancelFunc) {
	wait := w.cfg.Timing.Wait
	// The agent holds the query for up to wait plus wait/16 of jitter; past
	// that plus a margin, a silent agent counts as lost. A read at index 0
	// does not block: it gets the margin only.
	timeout := wait + wait/16 + agentReadTimeout
	if index == 0 {
		timeout = agentReadTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	q := &api.QueryOptions{WaitIndex: index, WaitTime: wait, AllowStale: true}
	return q.WithContext(ctx), cancel
}

// ensureAgent reads /v1/agent/self when it is due (at start, after a
// failure). One loop reads; the others wait for its result.
func (w *Watcher) ensureAgent(ctx context.Context) error {
	if !w.rereadAgent.Load() {
		return nil
	}
	w.agentMu.Lock()
	defer w.agentMu.Unlock()
	if !w.rereadAgent.Load() {
		return nil
	}
	info, err := readAgent(ctx, w.client, w.cfg)
	if info == nil {
		return err
	}
	old := w.info.Load()
	switch {
	case err != nil && (old == nil || old.fromAgent):
		// Said once per change, not on every retry of a refused token.
		w.log.Warn("consul watch: cannot read the agent's configuration; using consul.datacenter, "+
			"consul.domain and Consul's DNS defaults", "err", err)
	case err != nil:
		w.log.Debug("consul watch: still cannot read the agent's configuration", "err", err)
	}
	if info.datacenter == "" && old != nil {
		info.datacenter = old.datacenter
	}
	w.info.Store(info)
	w.rereadAgent.Store(false)
	return nil
}

// runService follows one service's healthy instances until its loop ends.
func (w *Watcher) runService(sl *serviceLoop, key, name string, seed *probeResult) {
	probed := false // this loop holds the gate's probe turn (gate.go)
	var sent uint64 // the gate's generation when the loop's query was sent
	if seed != nil {
		sent = seed.sent
	}
	l := &loop[[]instance]{
		timing: w.cfg.Timing,
		clock:  w.clock,
		jitter: w.jitter,
		fetch: func(ctx context.Context, index uint64) ([]instance, uint64, error) {
			sent = w.gate.generation()
			if index > 0 {
				sl.viewed.Store(true) // the agent answers it from a streaming view
				return w.fetchService(ctx, w.client, name, index)
			}
			release, err := w.acquireRead(ctx)
			if err != nil {
				return nil, 0, err
			}
			defer release()
			return w.fetchService(ctx, w.client, name, index)
		},
		equal: equalInstances,
		deliver: func(instances []instance) {
			w.mu.Lock()
			defer w.mu.Unlock()
			if sl.ctx.Err() == nil { // else the watch ended meanwhile; keep it removed
				w.deliverService(sl, key, instances)
			}
		},
		contact: func(index uint64) {
			probed = false
			w.store.contact(key, false, w.clock.Now())
			w.answered(index, sent)
		},
		failure: func(err error, consecutive int) {
			w.serviceFailed(sl, key, err, consecutive)
		},
		retry: w.retryAfter(&probed, &sent),
	}
	if seed != nil {
		l.seed, l.seedIndex, l.seeded = seed.instances, seed.index, true
	}
	l.run(sl.ctx)
	if probed {
		// The watch ended during its probe (evicted, or towerd stops):
		// another waiting loop takes the turn.
		w.gate.giveBack()
	}
}

// deliverService takes a service's new instances. A service without any
// (or none with the wanted tags) is answered by Consul's DNS; in the demand
// mode its watch ends now if it never had any (a restored one), after
// EmptyGrace if it had. Callers hold w.mu.
func (w *Watcher) deliverService(sl *serviceLoop, key string, instances []instance) {
	instances = w.tagged(instances)
	switch {
	case len(instances) > 0:
		sl.confirmed, sl.emptySince = true, time.Time{}
	case sl.pinned || w.cfg.watchAll(): // watched whatever it holds
	case !sl.confirmed:
		w.state.EmptyReads++
		w.stopWatch(key, endEmpty)
		w.log.Debug("consul watch: no instance of a restored service; not watched", "service", key)
		return
	case sl.emptySince.IsZero():
		sl.emptySince = w.clock.Now()
	}
	// Encoded now, when the set changes, not at a question (issue 34).
	w.store.set(key, instances, w.encodeService(w.info.Load(), key, instances))
	if w.pending != nil {
		delete(w.pending, key)
		w.checkSynced()
	}
	w.log.Debug("consul watch: service changed", "service", sl.name, "instances", len(instances))
}

// tagged drops every instance when consul.tags is set and none carries one
// of them: the service is then answered by Consul's DNS.
func (w *Watcher) tagged(instances []instance) []instance {
	if len(w.cfg.Tags) > 0 && !w.cfg.watchAll() && !slices.ContainsFunc(instances,
		func(in instance) bool { return anyFold(w.cfg.Tags, in.Tags) }) {
		return nil
	}
	return instances
}

// answered records a query that reached the agent, sent at the gate's
// generation sent: the gate opens if it was closed (and has not closed
// since), and State says the agent answers.
func (w *Watcher) answered(index, sent uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.answeredLocked(index, sent)
}

func (w *Watcher) answeredLocked(index, sent uint64) {
	w.readFailures, w.readAfter = 0, time.Time{} // the agent answers: first reads go on at once
	resync := w.gate.answered(sent, w.clock.Now())
	if resync {
		w.log.Debug("consul watch: every watch reads its service again (resync)", "address", w.address)
	}
	if !w.cfg.watchAll() {
		if resync {
			// Every watch that failed reads again from index 0: the
			// highest index is rebuilt from their answers. A restarted
			// agent's are lower than the old ones, which would otherwise
			// stay on the gauge until a watch passed them.
			w.state.LastIndex = 0
		}
		w.contactLocked(index)
	}
}

// serviceFailed records a failed query of sl's loop. A 429 ends the watch
// (throttled); a reply that broke its bound drops the service's records,
// so its names go to the agent's DNS, and otherwise the records stay
// served, marked stale, until MaxStale.
func (w *Watcher) serviceFailed(sl *serviceLoop, key string, err error, consecutive int) {
	if ofService(err) {
		w.store.remove(key)
	} else {
		w.store.contact(key, true, w.clock.Now())
		w.rereadAgent.Store(true)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if errors.Is(err, ErrBodyTooLarge) {
		w.state.OversizeBodies++
	}
	switch {
	case errors.Is(err, ErrThrottled):
		w.recordError(err)
		w.throttled(key)
		return
	case ofService(err):
		w.recordError(err)
		level := slog.LevelDebug
		if consecutive == 1 {
			level = slog.LevelWarn
		}
		w.log.Log(context.Background(), level, "consul watch: the agent's reply for a service broke its "+
			"bound; its names go to the agent's DNS, retrying with backoff", "service", sl.name, "err", err,
			"consecutive", consecutive)
		return
	case w.cfg.watchAll():
		w.recordError(err)
	default:
		w.failureLocked(err, consecutive)
	}
	w.log.Debug("consul watch: service query failed", "service", sl.name, "err", err, "consecutive", consecutive)
}

// acquireRead takes one of the resyncReads slots for a read at index 0.
func (w *Watcher) acquireRead(ctx context.Context) (func(), error) {
	select {
	case w.reads <- struct{}{}:
		return func() { <-w.reads }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// fetchService reads a service's instances through client (w.client, or
// w.probe for a first read before a watch).
func (w *Watcher) fetchService(ctx context.Context, client *api.Client, name string, index uint64) ([]instance, uint64, error) {
	if err := w.ensureAgent(ctx); err != nil {
		return nil, 0, err
	}
	info := w.info.Load()
	if info == nil {
		return nil, 0, errors.New("consul: agent configuration not read yet")
	}
	q, cancel := w.queryOptions(ctx, index)
	defer cancel()
	// With only_passing the agent filters; otherwise warning instances stay
	// and instancesFrom drops the critical ones, as Consul's DNS does.
	entries, meta, err := client.Health().Service(name, "", info.onlyPassing, q)
	if err != nil {
		return nil, 0, classify(fmt.Errorf("health of service %q: %w", name, err))
	}
	if info.datacenter == "" {
		w.learnDatacenter(entries)
	}
	return instancesFrom(name, entries, info.onlyPassing), meta.LastIndex, nil
}

// learnDatacenter takes the datacenter from the catalog's entries when
// neither the configuration nor the agent named it (an ACL token without
// agent:read).
func (w *Watcher) learnDatacenter(entries []*api.ServiceEntry) {
	for _, e := range entries {
		if e.Node != nil && e.Node.Datacenter != "" {
			info := *w.info.Load()
			info.datacenter = strings.ToLower(e.Node.Datacenter)
			w.info.Store(&info)
			return
		}
	}
}
