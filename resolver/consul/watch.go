// Package consul keeps the node's view of healthy Consul services in memory,
// pushed by blocking queries to the local agent, and answers
// <svc>.service.consul from it with the records Consul's own DNS would give.
//
// A Watcher follows the services this node asks for (DESIGN.md, "Consul
// pre-warm"): questions for an unwatched service are not answered from
// memory (they go the normal way, to the agent's DNS); from its second
// question the service is read once, and watched if it has instances and
// the set has room for it — or, with the set at Config.MaxWatches, if it is
// asked clearly more often than the watched service asked least (admit.go).
// A watch ends after Config.IdleTimeout without a question, and
// Config.EmptyGrace after its service lost its last instance.
// Config.Services pins services that are always watched; ["*"] keeps the
// old mode that follows the catalog's whole service list (for small
// catalogs, still capped). The set can be saved and restored across
// restarts (WriteSet, ReadSet). It implements resolver.RecordSource and,
// for the fast path's A and AAAA answers, resolver.RecordAppender (and
// lives beside the resolver, as resolver/local does, without importing
// it: the resolver reads it through that interface). When the agent stops
// answering, the last known records are served as stale for up to
// Config.MaxStale, and every watch reads its service again the moment the
// agent answers (gate.go). Every reply body is bounded (body.go).
package consul

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/towerd/towerd/resolver/clock"
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

// AgentTTL as Config.AnswerTTL gives each service's records the TTL the
// agent's DNS gives them (dns_config.service_ttl).
const AgentTTL time.Duration = -1

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
	// EmptyGrace is how long a watch whose service has no instance left
	// keeps running (pinned ones never end); 0 = DefaultEmptyGrace.
	EmptyGrace time.Duration
	// Window is the half-life of the question counts admission compares;
	// 0 = DefaultWindow.
	Window time.Duration
	// MaxBody bounds one reply body from the agent, in bytes; 0 =
	// DefaultMaxBody.
	MaxBody int64
	// AnswerTTL is the TTL of every record served, whole seconds; AgentTTL
	// = the agent's dns_config.service_ttl for the service (0 s unless it
	// sets one, Consul's default), so that the watch's records carry the
	// TTL the agent's DNS gives them.
	AnswerTTL time.Duration
	// MaxStale is how long records stay served after contact with the agent
	// is lost; zero = not at all.
	MaxStale time.Duration
	// Timing of the loops; zero fields mean the defaults.
	Timing Timing
	// Log receives the watch's own log lines; nil = none.
	Log *slog.Logger
	// Clock is what the watch reads the time from and waits on (issue
	// 33): the loops' spacing and backoff, the agent gate, idle and empty
	// timers, MaxStale; nil = the wall clock. The loops sleep on its
	// timers.
	Clock clock.Clock
	// IntN draws every answer's shuffle (Consul shuffles its answers, and
	// so does the watch); nil = math/rand/v2's IntN. A test that holds the
	// fast path's bytes to the general path's fixes it.
	IntN func(n int) int
}

// watchAll reports whether the configuration asks for the catalog mode.
func (c Config) watchAll() bool { return len(c.Services) == 1 && c.Services[0] == WatchAll }

// Watcher is the watch. Create it with New, run it with Run, and hand it to
// the resolver as its RecordSource.
type Watcher struct {
	cfg     Config
	address string
	client  *api.Client // the watches' (pooled connections)
	probe   *api.Client // first reads of names not watched (a connection each)
	log     *slog.Logger
	clock   sleepClock
	jitter  func(time.Duration) time.Duration
	// intN draws the shuffles of every answer (Answer's and the bytes'
	// alike, shuffle): rand.IntN; tests draw the same for both.
	intN  func(n int) int
	store *store
	info  atomic.Pointer[agentInfo]
	// fallbackDomain is the domain TrimsUDP knows before the agent is
	// read: the configured one, else consul.
	fallbackDomain string
	// rereadAgent asks for /v1/agent/self again before the next query: set
	// at start and after every failure (the agent may be a new one).
	// agentMu lets one loop read it while the others wait for the result.
	rereadAgent atomic.Bool
	agentMu     sync.Mutex

	synced   chan struct{}
	syncOnce sync.Once

	// demand carries the services asked for but not watched from Answer to
	// the loop that starts watches, once past the doorkeeper; a full
	// channel drops the signal (the next question sends it again).
	demand chan string
	// cands counts the questions for names not watched (admit.go).
	cands *candidates
	// gate is the agent's backoff; reads bounds the reads at index 0.
	gate  *agentGate
	reads chan struct{}
	// probed carries the result of a first read to the demand loop.
	probed chan probeResult

	// view is a read-only copy of watches for Answer and AppendAnswer, replaced (under mu)
	// on every change: questions read it without a lock, and the set
	// changes rarely (a start, an end).
	view atomic.Pointer[map[string]*serviceLoop]
	// knownList is the catalog's service list once the watch follows it
	// (known.go), nil before: questions read it without a lock.
	knownList atomic.Pointer[knownServices]

	mu        sync.Mutex
	watches   map[string]*serviceLoop // lower-case name → its loop
	pending   map[string]bool         // services of the first sync not fetched yet
	restored  []SavedService          // read by ReadSet, watched when Run starts
	started   time.Time               // when Run started: the idle clock of restored watches
	limit     int                     // the cap in force: MaxWatches, lowered by the agent's 429s
	throttle  bool                    // a 429 since the last idle check
	listed    bool                    // catalog mode: the first list was applied
	following bool                    // demand mode: the service list is followed (known.go)
	// probing is the name being read before it may be watched ("" =
	// none): one at a time, on the spare connection; toProbe those waiting.
	probing string
	toProbe []string
	// readFailures counts the first reads in a row that failed because of
	// the agent; no first read starts before readAfter (mayProbe).
	readFailures int
	readAfter    time.Time
	// recent holds the services whose watch ended while the agent had a
	// streaming view for them, and when: the agent keeps the view (and its
	// stream at a server) for agentViewTTL, so they still count against
	// the bound on views (admission).
	recent    map[string]time.Time
	nextDecay time.Time
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
	hits   atomic.Int64 // questions, decayed (admit.go), in hitUnit
	// viewed: a blocking query was sent, so the agent holds a streaming
	// view for the service (until agentViewTTL after the watch ends).
	viewed atomic.Bool
	// Under Watcher.mu: confirmed once a reply had instances; emptySince
	// is when the last one went (zero while there are some).
	confirmed  bool
	emptySince time.Time
}

// New checks cfg and builds the API client; it does not talk to the agent,
// so towerd starts whether or not an agent runs.
func New(cfg Config) (*Watcher, error) {
	if (cfg.AnswerTTL < 0 && cfg.AnswerTTL != AgentTTL) || cfg.MaxStale < 0 || cfg.MaxWatches < 0 || cfg.IdleTimeout < 0 ||
		cfg.EmptyGrace < 0 || cfg.Window < 0 || cfg.MaxBody < 0 {
		return nil, errors.New("consul: negative answer TTL, maximum stale age, max_watches, idle timeout, " +
			"empty grace, window or body bound")
	}
	orDefault(&cfg.MaxWatches, DefaultMaxWatches)
	orDefault(&cfg.IdleTimeout, DefaultIdleTimeout)
	orDefault(&cfg.EmptyGrace, DefaultEmptyGrace)
	orDefault(&cfg.Window, DefaultWindow)
	orDefault(&cfg.MaxBody, DefaultMaxBody)
	if !cfg.watchAll() {
		if slices.Contains(cfg.Services, WatchAll) {
			return nil, errors.New(`consul: "*" in services must be the only entry`)
		}
		if n := len(uniqueFold(cfg.Services)); n > cfg.MaxWatches {
			return nil, fmt.Errorf("consul: %d pinned services exceed max_watches %d", n, cfg.MaxWatches)
		}
	}
	cfg.Timing = cfg.Timing.withDefaults()
	clients, err := newClients(cfg)
	if err != nil {
		return nil, err
	}
	w := &Watcher{
		cfg:            cfg,
		fallbackDomain: configuredDomain(cfg.Domain),
		address:        displayAddress(cfg),
		client:         clients.pooled,
		probe:          clients.probe,
		log:            cfg.Log,
		clock:          timerClock{clock.Or(cfg.Clock)},
		jitter:         randomJitter,
		intN:           rand.IntN,
		store:          newStore(),
		synced:         make(chan struct{}),
		demand:         make(chan string, 64),
		cands:          newCandidates(),
		gate:           newAgentGate(),
		reads:          make(chan struct{}, resyncReads),
		probed:         make(chan probeResult, 1),
		watches:        map[string]*serviceLoop{},
		recent:         map[string]time.Time{},
		limit:          cfg.MaxWatches,
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	if cfg.IntN != nil {
		w.intN = cfg.IntN
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

// orDefault sets *v to d when it is zero (the documented "0 = default").
func orDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
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
	w.nextDecay = w.started.Add(w.cfg.Window)
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
		w.startWatch(key, name, true, time.Time{}, nil)
		w.pending[key] = true
	}
	for _, s := range w.restored {
		key := strings.ToLower(s.Name)
		if _, ok := w.watches[key]; ok || len(w.watches) >= w.limit {
			continue
		}
		w.startWatch(key, key, false, s.LastAsked, nil)
		w.pending[key] = true
	}
	w.restored = nil
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
