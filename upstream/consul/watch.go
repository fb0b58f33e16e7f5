// Package consul keeps the node's view of healthy Consul services in memory,
// pushed by blocking queries to the local agent, and answers
// <svc>.service.consul from it with the records Consul's own DNS would give.
//
// A Watcher follows the services this node asks for (DESIGN.md, "Consul
// pre-warm"): the first question for an unwatched service is not answered
// from memory (it goes the normal way, to the agent's DNS) and starts that
// service's blocking health loop, so the next one is. A watch ends after
// Config.IdleTimeout without a question, and the set is capped at
// Config.MaxWatches: past the cap the least recently asked service loses
// its watch. Config.Services pins services that are always watched; ["*"]
// keeps the old mode that follows the catalog's whole service list (for
// small catalogs, still capped). The set can be saved and restored across
// restarts (WriteSet, ReadSet). It implements resolver.RecordSource. When
// the agent stops answering, the last known records are served as stale
// for up to Config.MaxStale.
package consul

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
)

// Defaults of the watch set's bounds.
const (
	// DefaultMaxWatches is well under Consul's default
	// limits.http_max_conns_per_client (200): every watch holds one HTTP
	// connection to the agent while its query blocks.
	DefaultMaxWatches = 64
	// DefaultIdleTimeout ends a watch nobody asked about for this long.
	DefaultIdleTimeout = 30 * time.Minute
)

// WatchAll as the only entry of Config.Services selects the catalog mode:
// follow /v1/catalog/services and watch every service in it, up to
// MaxWatches.
const WatchAll = "*"

// Config says where the agent is and what to watch. Empty strings fall back
// to Consul's environment variables, then to Consul's defaults.
type Config struct {
	// Address of the agent's HTTP API: host:port, http(s)://host:port or
	// unix:///path. "" = CONSUL_HTTP_ADDR, else 127.0.0.1:8500.
	Address string
	// Scheme is "http" or "https"; "" = CONSUL_HTTP_SSL, else http.
	Scheme string
	// Token is the ACL token; "" = TokenFile, CONSUL_HTTP_TOKEN(_FILE), none.
	Token string
	// TokenFile holds the ACL token; it wins over Token.
	TokenFile string
	// TLSCAFile verifies the agent's certificate; "" = CONSUL_CACERT, system.
	TLSCAFile string
	// Datacenter names the dc form of records; "" = the agent's.
	Datacenter string
	// Domain is Consul's DNS domain; "" = the agent's, else "consul.".
	Domain string
	// Services pins services that are always watched (any letter case),
	// from the start, whether asked for or not. ["*"] (WatchAll) follows the
	// catalog's service list instead and watches every service in it, up to
	// MaxWatches. Empty: only what this node asks for.
	Services []string
	// Tags, if set, keeps only services that carry at least one of them.
	Tags []string
	// MaxWatches caps the watched services; 0 = DefaultMaxWatches.
	MaxWatches int
	// IdleTimeout ends a watch after this long without a question for its
	// service (pinned ones never end); 0 = DefaultIdleTimeout.
	IdleTimeout time.Duration
	// AnswerTTL is the TTL of every record served; zero = 0 s, as Consul.
	AnswerTTL time.Duration
	// MaxStale is how long records stay served after contact with the agent
	// is lost; zero = not at all.
	MaxStale time.Duration
	// Timing of the loops; zero fields mean the defaults.
	Timing Timing
	// Log receives the watch's own log lines; nil = none.
	Log *slog.Logger
}

// watchAll reports whether the configuration asks for the catalog mode.
func (c Config) watchAll() bool { return len(c.Services) == 1 && c.Services[0] == WatchAll }

// Watcher is the watch. Create it with New, run it with Run, and hand it to
// the resolver as its RecordSource.
type Watcher struct {
	cfg     Config
	address string
	client  *api.Client
	log     *slog.Logger
	clock   clock
	jitter  func(time.Duration) time.Duration
	store   *store
	info    atomic.Pointer[agentInfo]
	// rereadAgent asks for /v1/agent/self again before the next query: set
	// at start and after every failure (the agent may be a new one).
	// agentMu lets one loop read it while the others wait for the result.
	rereadAgent atomic.Bool
	agentMu     sync.Mutex

	synced   chan struct{}
	syncOnce sync.Once

	// demand carries the services asked for but not watched from Lookup to
	// the loop that starts watches; a full channel drops the signal (the
	// next question sends it again).
	demand chan string

	// view is a read-only copy of watches for Lookup, replaced (under mu)
	// on every change: questions read it without a lock, and the set
	// changes rarely (a start, an end).
	view atomic.Pointer[map[string]*serviceLoop]

	mu       sync.Mutex
	watches  map[string]*serviceLoop // lower-case name → its loop
	pending  map[string]bool         // services of the first sync not fetched yet
	restored []SavedService          // read by ReadSet, watched when Run starts
	started  time.Time               // when Run started: the idle clock of restored watches
	limit    int                     // the cap in force: MaxWatches, lowered by the agent's 429s
	throttle bool                    // a 429 since the last idle check
	listed   bool                    // catalog mode: the first list was applied
	// probation is a watch started past the cap, waiting for its first
	// reply: only a service that exists (has instances) takes the least
	// recently asked one's place, so questions for names that are no
	// service cannot empty the set. One at a time: it is the one
	// connection over max_watches that the missing list loop leaves free.
	probation string
	runCtx    context.Context
	wg        *sync.WaitGroup
	state     State
}

type serviceLoop struct {
	name   string // as queried
	ctx    context.Context
	cancel context.CancelFunc
	pinned bool
	asked  atomic.Int64 // Unix ns of the last question; 0 = none yet
}

// New checks cfg and builds the API client; it does not talk to the agent,
// so towerd starts whether or not an agent runs.
func New(cfg Config) (*Watcher, error) {
	if cfg.AnswerTTL < 0 || cfg.MaxStale < 0 || cfg.MaxWatches < 0 || cfg.IdleTimeout < 0 {
		return nil, errors.New("consul: negative answer TTL, maximum stale age, max_watches or idle timeout")
	}
	if cfg.MaxWatches == 0 {
		cfg.MaxWatches = DefaultMaxWatches
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if !cfg.watchAll() {
		if slices.Contains(cfg.Services, WatchAll) {
			return nil, errors.New(`consul: "*" in services must be the only entry`)
		}
		if n := len(uniqueFold(cfg.Services)); n > cfg.MaxWatches {
			return nil, fmt.Errorf("consul: %d pinned services exceed max_watches %d", n, cfg.MaxWatches)
		}
	}
	cfg.Timing = cfg.Timing.withDefaults()
	client, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	w := &Watcher{
		cfg:     cfg,
		address: displayAddress(cfg),
		client:  client,
		log:     cfg.Log,
		clock:   realClock{},
		jitter:  randomJitter,
		store:   newStore(),
		synced:  make(chan struct{}),
		demand:  make(chan string, 64),
		watches: map[string]*serviceLoop{},
		limit:   cfg.MaxWatches,
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	w.state.Address = w.address
	w.state.MaxWatches = cfg.MaxWatches
	w.state.Limit = cfg.MaxWatches
	w.state.Mode = "demand"
	if cfg.watchAll() {
		w.state.Mode = "catalog"
	} else {
		w.state.Pinned = len(uniqueFold(cfg.Services))
	}
	w.rereadAgent.Store(true)
	return w, nil
}

func uniqueFold(list []string) map[string]string {
	out := map[string]string{}
	for _, s := range list {
		out[strings.ToLower(s)] = s
	}
	return out
}

// Synced is closed once the first sync is done: the agent was read and every
// service watched from the start (pinned, restored by ReadSet, or in the
// catalog mode the whole list) has been read once. Readiness gates
// (sd_notify READY, the admin health check) may wait on it.
func (w *Watcher) Synced() <-chan struct{} { return w.synced }

// Run watches until ctx ends, then stops every loop and returns. A query
// that fails is retried with backoff for as long as Run runs, except one the
// agent refused with 429 (see throttled).
func (w *Watcher) Run(ctx context.Context) {
	var wg sync.WaitGroup
	w.mu.Lock()
	w.runCtx, w.wg = ctx, &wg
	w.started = w.clock.Now()
	w.pending = map[string]bool{}
	w.mu.Unlock()
	if w.cfg.watchAll() {
		l := &loop[map[string]string]{
			timing:  w.cfg.Timing,
			clock:   w.clock,
			jitter:  w.jitter,
			fetch:   w.fetchServiceList,
			equal:   equalMaps,
			deliver: func(list map[string]string) { w.applyServiceList(list) },
			contact: w.listContact,
			failure: w.listFailure,
		}
		l.run(ctx)
	} else {
		w.startInitial()
		w.manage(ctx)
	}
	w.mu.Lock()
	for _, sl := range w.watches {
		sl.cancel()
	}
	w.mu.Unlock()
	wg.Wait()
}

// startInitial watches the pinned services and those ReadSet restored.
func (w *Watcher) startInitial() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for key, name := range uniqueFold(w.cfg.Services) {
		w.startWatch(key, name, true, time.Time{})
		w.pending[key] = true
	}
	for _, s := range w.restored {
		key := strings.ToLower(s.Name)
		if _, ok := w.watches[key]; ok || len(w.watches) >= w.limit {
			continue
		}
		w.startWatch(key, key, false, s.LastAsked)
		w.pending[key] = true
	}
	w.restored = nil
}

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

func (w *Watcher) fetchServiceList(ctx context.Context, index uint64) (map[string]string, uint64, error) {
	if err := w.ensureAgent(ctx); err != nil {
		return nil, 0, err
	}
	q, cancel := w.queryOptions(ctx, index)
	defer cancel()
	services, meta, err := w.client.Catalog().Services(q)
	if err != nil {
		return nil, 0, classify(err)
	}
	return w.filter(services), meta.LastIndex, nil
}

// filter keeps the services the catalog mode watches: lower-case name →
// catalog name.
func (w *Watcher) filter(services map[string][]string) map[string]string {
	out := make(map[string]string, len(services))
	for name, tags := range services {
		if len(w.cfg.Tags) > 0 && !anyFold(w.cfg.Tags, tags) {
			continue
		}
		out[strings.ToLower(name)] = name
	}
	return out
}

// applyServiceList (catalog mode) starts loops for new services and stops
// those of services that left the list (their queries then go to Consul's
// DNS). Past MaxWatches it watches the first services by name and says so.
func (w *Watcher) applyServiceList(list map[string]string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for key := range w.watches {
		if _, ok := list[key]; !ok {
			w.stopWatch(key, "")
			w.log.Debug("consul watch: service left the catalog", "service", key)
		}
	}
	first := !w.state.Synced
	keys := make([]string, 0, len(list))
	for key := range list {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	capped := len(keys) > w.limit
	if capped != w.state.CatalogCapped {
		w.state.CatalogCapped = capped
		if capped {
			w.log.Warn(`consul watch: the catalog has more services than consul.max_watches; `+
				`consul.services = ["*"] watches only the first ones by name, the rest are answered by `+
				`Consul's DNS. Leave consul.services empty to watch what this node asks for`,
				"catalog_services", len(keys), "max_watches", w.limit)
		}
	}
	for _, key := range keys {
		if _, ok := w.watches[key]; ok {
			continue
		}
		if len(w.watches) >= w.limit {
			break
		}
		w.startWatch(key, list[key], false, time.Time{})
		if first {
			w.pending[key] = true
		}
	}
	if first {
		w.listed = true
	}
	w.checkSynced()
}

// checkSynced closes Synced once the agent was read and nothing of the first
// sync is pending. Callers hold w.mu.
func (w *Watcher) checkSynced() {
	if w.state.Synced || w.pending == nil || len(w.pending) > 0 || w.info.Load() == nil {
		return
	}
	if w.cfg.watchAll() && !w.listed {
		return
	}
	w.state.Synced = true
	w.syncOnce.Do(func() { close(w.synced) })
	services, instances := w.store.counts()
	w.log.Info("consul watch: first sync done", "mode", w.state.Mode, "watched", len(w.watches),
		"services", services, "instances", instances)
}

// listContact records a query that reached the agent.
func (w *Watcher) listContact(index uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.contactLocked(index)
}

func (w *Watcher) contactLocked(index uint64) {
	if n := w.state.ConsecutiveErrors; n > 0 {
		w.log.Info("consul watch: the agent answers again", "address", w.address, "failed_queries", n)
	}
	w.state.Connected = true
	w.state.ConsecutiveErrors = 0
	if w.cfg.watchAll() || index > w.state.LastIndex {
		w.state.LastIndex = index
	}
	w.state.LastSuccess = w.clock.Now()
}

// listFailure records a failed query; consecutive counts the failures of
// the loop that failed.
func (w *Watcher) listFailure(err error, consecutive int) {
	w.rereadAgent.Store(true)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failureLocked(err, consecutive)
}

func (w *Watcher) failureLocked(err error, consecutive int) {
	w.recordError(err)
	if errors.Is(err, ErrThrottled) {
		w.state.Agent429s++
	}
	w.state.Connected = false
	w.state.ConsecutiveErrors = max(consecutive, w.state.ConsecutiveErrors+1)
	switch {
	case w.state.ConsecutiveErrors == 1 && errors.Is(err, ErrACL):
		w.log.Error("consul watch: the agent refused the watch's queries; serving the last known records "+
			"while they last", "address", w.address, "err", err)
	case w.state.ConsecutiveErrors == 1:
		w.log.Warn("consul watch: cannot query the agent; serving the last known records while they last, "+
			"retrying with backoff", "address", w.address, "err", err)
	default:
		w.log.Debug("consul watch: query failed again", "address", w.address, "err", err, "consecutive", consecutive)
	}
}

// recordError counts a failed query. Callers hold w.mu.
func (w *Watcher) recordError(err error) {
	w.state.Errors++
	w.state.LastErr = err
	w.state.LastError = err.Error()
	w.state.LastErrorAt = w.clock.Now()
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
