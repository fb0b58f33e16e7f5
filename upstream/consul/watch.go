// Package consul keeps the node's view of healthy Consul services in memory,
// pushed by blocking queries to the local agent, and answers
// <svc>.service.consul from it with the records Consul's own DNS would give.
//
// A Watcher follows the catalog's service list and, for each watched
// service, its healthy instances. It implements resolver.RecordSource:
// questions it covers are answered from memory without asking Consul's DNS,
// everything else goes the normal way. When the agent stops answering, the
// last known records are served as stale for up to Config.MaxStale.
package consul

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
)

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
	// Services lists the services to watch (any letter case); empty = all.
	Services []string
	// Tags, if set, keeps only services that carry at least one of them.
	Tags []string
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
	// rereadAgent asks for /v1/agent/self again before the next list query:
	// set at start and after every failure (the agent may be a new one).
	rereadAgent atomic.Bool

	synced   chan struct{}
	syncOnce sync.Once

	mu      sync.Mutex
	loops   map[string]*serviceLoop // lower-case name → its loop
	pending map[string]bool         // services of the first list not fetched yet
	state   State
}

type serviceLoop struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// New checks cfg and builds the API client; it does not talk to the agent,
// so towerd starts whether or not an agent runs.
func New(cfg Config) (*Watcher, error) {
	if cfg.AnswerTTL < 0 || cfg.MaxStale < 0 {
		return nil, errors.New("consul: negative answer TTL or maximum stale age")
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
		loops:   map[string]*serviceLoop{},
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	w.state.Address = w.address
	w.rereadAgent.Store(true)
	return w, nil
}

// Synced is closed once the first full sync is done: the service list and
// every listed service's instances have been read once. Readiness gates
// (sd_notify READY, the admin health check) may wait on it.
func (w *Watcher) Synced() <-chan struct{} { return w.synced }

// Run follows the catalog until ctx ends, then stops every loop and returns.
// A query that fails is retried with backoff for as long as Run runs.
func (w *Watcher) Run(ctx context.Context) {
	var wg sync.WaitGroup
	l := &loop[map[string]string]{
		timing:  w.cfg.Timing,
		clock:   w.clock,
		jitter:  w.jitter,
		fetch:   w.fetchServiceList,
		equal:   equalMaps,
		deliver: func(list map[string]string) { w.applyServiceList(ctx, &wg, list) },
		contact: w.listContact,
		failure: w.listFailure,
	}
	l.run(ctx)
	w.mu.Lock()
	for _, sl := range w.loops {
		sl.cancel()
	}
	w.mu.Unlock()
	wg.Wait()
}

// queryOptions asks for a blocking read that any server may answer
// (AllowStale). The agent serves blocking health queries from its streaming
// backend on its own (Consul ≥ 1.10 default), so the servers see O(changes).
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

func (w *Watcher) fetchServiceList(ctx context.Context, index uint64) (map[string]string, uint64, error) {
	if w.rereadAgent.Load() {
		info, err := readAgent(ctx, w.client, w.cfg)
		if info == nil {
			return nil, 0, err
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
	}
	q, cancel := w.queryOptions(ctx, index)
	defer cancel()
	services, meta, err := w.client.Catalog().Services(q)
	if err != nil {
		return nil, 0, classify(err)
	}
	return w.filter(services), meta.LastIndex, nil
}

// filter keeps the services configured for watching: lower-case name →
// catalog name.
func (w *Watcher) filter(services map[string][]string) map[string]string {
	out := make(map[string]string, len(services))
	for name, tags := range services {
		if len(w.cfg.Services) > 0 && !containsFold(w.cfg.Services, name) {
			continue
		}
		if len(w.cfg.Tags) > 0 && !anyFold(w.cfg.Tags, tags) {
			continue
		}
		out[strings.ToLower(name)] = name
	}
	return out
}

// applyServiceList starts loops for new services and stops those of
// services that left the list (their queries then go to Consul's DNS).
func (w *Watcher) applyServiceList(ctx context.Context, wg *sync.WaitGroup, list map[string]string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for key, sl := range w.loops {
		if _, ok := list[key]; !ok {
			sl.cancel()
			delete(w.loops, key)
			w.store.remove(key)
			delete(w.pending, key)
			w.log.Debug("consul watch: service left the catalog", "service", key)
		}
	}
	first := w.pending == nil && !w.state.Synced
	if first {
		w.pending = map[string]bool{}
	}
	for key, name := range list {
		if _, ok := w.loops[key]; ok {
			continue
		}
		lctx, cancel := context.WithCancel(ctx)
		sl := &serviceLoop{ctx: lctx, cancel: cancel}
		w.loops[key] = sl
		if first {
			w.pending[key] = true
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.runService(sl, key, name)
		}()
	}
	w.state.Watched = len(w.loops)
	w.checkSynced()
}

// checkSynced closes Synced once nothing of the first list is pending.
// Callers hold w.mu.
func (w *Watcher) checkSynced() {
	if w.pending != nil && len(w.pending) == 0 && !w.state.Synced {
		w.state.Synced = true
		w.pending = nil
		w.syncOnce.Do(func() { close(w.synced) })
		services, instances := w.store.counts()
		w.log.Info("consul watch: first sync done", "services", services, "instances", instances)
	}
}

func (w *Watcher) listContact(index uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := w.state.ConsecutiveErrors; n > 0 {
		w.log.Info("consul watch: the agent answers again", "address", w.address, "failed_queries", n)
	}
	w.state.Connected = true
	w.state.ConsecutiveErrors = 0
	w.state.LastIndex = index
	w.state.LastSuccess = w.clock.Now()
}

func (w *Watcher) listFailure(err error, consecutive int) {
	w.rereadAgent.Store(true)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.recordError(err)
	w.state.Connected = false
	w.state.ConsecutiveErrors = consecutive
	switch {
	case consecutive == 1 && errors.Is(err, ErrACL):
		w.log.Error("consul watch: the agent refused the watch's queries; serving the last known records "+
			"while they last", "address", w.address, "err", err)
	case consecutive == 1:
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
				return // the service left the list meanwhile; keep it removed
			}
			w.store.set(key, instances)
			if w.pending != nil {
				delete(w.pending, key)
				w.checkSynced()
			}
			w.log.Debug("consul watch: service changed", "service", name, "instances", len(instances))
		},
		contact: func(uint64) { w.store.contact(key, false, w.clock.Now()) },
		failure: func(err error, consecutive int) {
			w.store.contact(key, true, w.clock.Now())
			w.mu.Lock()
			w.recordError(err)
			w.mu.Unlock()
			w.log.Debug("consul watch: service query failed", "service", name, "err", err, "consecutive", consecutive)
		},
	}
	l.run(sl.ctx)
}

func (w *Watcher) fetchService(ctx context.Context, name string, index uint64) ([]instance, uint64, error) {
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
