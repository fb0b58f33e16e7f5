package consul

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

// One service's watch: starting and stopping its blocking health loop, the
// loop itself, and the queries it sends to the agent.

// startWatch starts the loop of one service. Callers hold w.mu.
func (w *Watcher) startWatch(key, name string, pinned bool, asked time.Time) {
	lctx, cancel := context.WithCancel(w.runCtx)
	sl := &serviceLoop{name: name, ctx: lctx, cancel: cancel, pinned: pinned}
	if !asked.IsZero() {
		sl.asked.Store(asked.UnixNano())
	}
	w.watches[key] = sl
	w.publish()
	w.state.Starts++
	w.state.Watched = len(w.watches)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.runService(sl, key, name)
	}()
}

// publish makes the current set what Lookup sees. Callers hold w.mu.
func (w *Watcher) publish() {
	view := make(map[string]*serviceLoop, len(w.watches))
	for k, sl := range w.watches {
		view[k] = sl
	}
	w.view.Store(&view)
}

// stopWatch ends the loop of one service and forgets its records, so its
// questions go the normal way; reason is counted ("" = not an eviction).
// Callers hold w.mu.
func (w *Watcher) stopWatch(key, reason string) {
	sl := w.watches[key]
	if sl == nil {
		return
	}
	sl.cancel()
	delete(w.watches, key)
	w.publish()
	if w.probation == key {
		w.probation = ""
	}
	w.store.remove(key)
	delete(w.pending, key)
	w.state.Watched = len(w.watches)
	switch reason {
	case "cap":
		w.state.EvictedCap++
	case "idle":
		w.state.EvictedIdle++
	case "429":
		w.state.Evicted429++
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
	// that plus a margin, a silent agent counts as lost.
	ctx, cancel := context.WithTimeout(ctx, wait+wait/16+10*time.Second)
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
func (w *Watcher) runService(sl *serviceLoop, key, name string) {
	l := &loop[[]instance]{
		timing: w.cfg.Timing,
		clock:  w.clock,
		jitter: w.jitter,
		fetch: func(ctx context.Context, index uint64) ([]instance, uint64, error) {
			return w.fetchService(ctx, name, index)
		},
		equal: equalInstances,
		deliver: func(instances []instance) {
			w.mu.Lock()
			defer w.mu.Unlock()
			if sl.ctx.Err() != nil {
				return // the watch ended meanwhile; keep it removed
			}
			if len(w.cfg.Tags) > 0 && !w.cfg.watchAll() && !slices.ContainsFunc(instances,
				func(in instance) bool { return anyFold(w.cfg.Tags, in.Tags) }) {
				instances = nil // filtered out by consul.tags: Consul's DNS answers it
			}
			if w.probation == key {
				w.admit(key, instances)
				if sl.ctx.Err() != nil {
					return
				}
			}
			w.store.set(key, instances)
			if w.pending != nil {
				delete(w.pending, key)
				w.checkSynced()
			}
			w.log.Debug("consul watch: service changed", "service", name, "instances", len(instances))
		},
		contact: func(index uint64) {
			w.store.contact(key, false, w.clock.Now())
			if !w.cfg.watchAll() {
				w.listContact(index)
			}
		},
		failure: func(err error, consecutive int) {
			w.store.contact(key, true, w.clock.Now())
			w.rereadAgent.Store(true)
			w.mu.Lock()
			defer w.mu.Unlock()
			if errors.Is(err, ErrThrottled) {
				w.recordError(err)
				w.throttled(key)
				return
			}
			if w.cfg.watchAll() {
				w.recordError(err)
			} else {
				w.failureLocked(err, consecutive)
			}
			w.log.Debug("consul watch: service query failed", "service", name, "err", err, "consecutive", consecutive)
		},
	}
	l.run(sl.ctx)
}

func (w *Watcher) fetchService(ctx context.Context, name string, index uint64) ([]instance, uint64, error) {
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
	entries, meta, err := w.client.Health().Service(name, "", info.onlyPassing, q)
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
