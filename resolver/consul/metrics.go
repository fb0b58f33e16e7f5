package consul

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// This file is what the watch tells the outside: State for /stats, logs and
// readiness, and the same figures as Prometheus metrics.

// State is a snapshot of the watch for metrics, the admin API and logs.
type State struct {
	// Address is the agent's HTTP API the watch talks to.
	Address string
	// Datacenter and Domain name the records ("" until the agent was read).
	Datacenter string
	Domain     string
	// Synced: the first full sync is done (see Watcher.Synced).
	Synced bool
	// Connected: the last service-list query reached the agent.
	Connected bool
	// Mode is "demand" (watch what this node asks for) or "catalog"
	// (consul.services = ["*"]: follow the whole service list).
	Mode string
	// Watched counts services followed; Services those with healthy
	// instances held (and answered from memory); Instances those instances.
	Watched   int
	Services  int
	Instances int
	// Pinned counts the configured services that are always watched.
	Pinned int
	// MaxWatches is the configured cap of the set; Limit the cap in force,
	// lower than MaxWatches for a while after the agent's 429s.
	MaxWatches int
	Limit      int
	// CatalogCapped: in the catalog mode the catalog has more services than
	// the cap, and only the first MaxWatches by name are watched.
	CatalogCapped bool
	// Starts counts watches started; EvictedCap those ended to make room
	// for a service asked more often, EvictedIdle those ended after
	// IdleTimeout without a question, Evicted429 those ended by the agent's
	// 429, EvictedEmpty those ended EmptyGrace after their last instance
	// went (or at a restored watch's first read, without any).
	Starts       uint64
	EvictedCap   uint64
	EvictedIdle  uint64
	Evicted429   uint64
	EvictedEmpty uint64
	// Agent429s counts queries the agent refused with HTTP 429.
	Agent429s uint64
	// Refused* count admissions refused to names asked for: the set full of
	// pinned services; not asked more often than the least asked watch;
	// the agent would hold more streaming views than ViewLimit.
	RefusedPinned    uint64
	RefusedFrequency uint64
	RefusedStreams   uint64
	// EmptyReads counts first reads that found no instance: each keeps its
	// name out of the set for a while; KeptOut is how many names are out
	// now.
	EmptyReads uint64
	KeptOut    int
	// AgentViews is how many streaming views (one stream each at a
	// server) the agent holds for this node by the watch's count: its
	// blocking watches and those ended within the agent's view idle time
	// (20 min). ViewLimit is the bound on it: MaxWatches + a quarter.
	AgentViews int
	ViewLimit  int
	// Resyncs counts the times the agent answered again after failing,
	// and every watch read its service again at once.
	Resyncs uint64
	// OversizeBodies counts replies refused for a body past its bound.
	OversizeBodies uint64
	// LastIndex is the service list's last X-Consul-Index (catalog mode),
	// else the highest index of the watched services since the agent last
	// answered again after failing (the resync's reads rebuild it).
	LastIndex uint64
	// LastSuccess is when a query last reached the agent.
	LastSuccess time.Time
	// Errors counts failed queries since start, of every loop;
	// ConsecutiveErrors those of the service list since its last success.
	Errors            uint64
	ConsecutiveErrors int
	// LastErr is the last failure (errors.Is ErrACL or ErrUnreachable tell
	// the common causes apart); LastError its text, LastErrorAt its time.
	LastErr     error
	LastError   string
	LastErrorAt time.Time
}

// State returns a snapshot of the watch.
func (w *Watcher) State() State {
	w.mu.Lock()
	s := w.state
	s.AgentViews = len(w.recent)
	for _, sl := range w.watches {
		if sl.viewed.Load() {
			s.AgentViews++
		}
	}
	w.mu.Unlock()
	s.ViewLimit = w.cfg.MaxWatches + viewMargin(w.cfg.MaxWatches)
	s.KeptOut = w.cands.keptOut(w.clock.Now())
	s.Resyncs = w.gate.resyncs()
	if info := w.info.Load(); info != nil {
		s.Datacenter, s.Domain = info.datacenter, info.domain
	}
	s.Services, s.Instances = w.store.counts()
	return s
}

func equalMaps(a, b map[string]string) bool { return reflect.DeepEqual(a, b) }

func equalInstances(a, b []instance) bool { return reflect.DeepEqual(a, b) }

func containsFold(list []string, s string) bool {
	return slices.ContainsFunc(list, func(x string) bool { return strings.EqualFold(x, s) })
}

func anyFold(want, have []string) bool {
	return slices.ContainsFunc(have, func(h string) bool { return containsFold(want, h) })
}

// Collector exposes a Watcher's State to Prometheus, read at scrape time so
// the figures and State never disagree. Register it on the registry that
// serves /metrics.
type Collector struct {
	w *Watcher

	synced, connected, aclDenied    *prometheus.Desc
	watched, services, instances    *prometheus.Desc
	index, lastSuccess, errorsTotal *prometheus.Desc
	pinned, maxWatches, limit       *prometheus.Desc
	catalogCapped, starts           *prometheus.Desc
	evictions, agent429s, refused   *prometheus.Desc
	emptyReads, keptOut             *prometheus.Desc
	agentViews, viewLimit           *prometheus.Desc
	resyncs, oversize               *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns the collector of w's state.
func NewCollector(w *Watcher) *Collector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("towerd_consul_watch_"+name, help, nil, nil)
	}
	return &Collector{
		w:         w,
		synced:    d("synced", "1 once the first full sync of the Consul watch is done."),
		connected: d("connected", "1 while the last service-list query reached the Consul agent."),
		aclDenied: d("acl_denied", "1 while the agent refuses the watch's ACL token (the last query failed that way)."),
		watched:   d("watched_services", "Services the watch follows."),
		services:  d("services", "Services answered from memory (with at least one healthy instance)."),
		instances: d("instances", "Healthy service instances held in memory."),
		index:     d("index", "X-Consul-Index of the last service-list reply."),
		lastSuccess: d("last_success_timestamp_seconds",
			"Unix time of the last service-list query that reached the agent; 0 before the first."),
		errorsTotal: d("errors_total", "Failed Consul watch queries, of every loop."),
		pinned:      d("pinned_services", "Services always watched (consul.services)."),
		maxWatches:  d("max_watches", "The cap on watched services (consul.max_watches)."),
		limit: d("limit",
			"The cap in force: max_watches, lowered after the agent's 429s and growing back while none come."),
		catalogCapped: d("catalog_capped",
			`1 while consul.services = ["*"] finds more services in the catalog than max_watches and watches only the first.`),
		starts: d("starts_total", "Service watches started (a question for an unwatched service, a pin, a restore)."),
		evictions: prometheus.NewDesc("towerd_consul_watch_evictions_total",
			"Service watches ended: reason cap (room for a service asked more often), idle (no question for "+
				"idle_timeout), 429 (the agent refused the query), empty (no instance left for a minute).",
			[]string{"reason"}, nil),
		agent429s: d("agent_429s_total", "Queries the Consul agent refused with HTTP 429 (too many connections or requests)."),
		refused: prometheus.NewDesc("towerd_consul_watch_refused_total",
			"Names asked for again but not watched: reason frequency (not asked more often than the least asked "+
				"watch), streams (the agent would hold more streaming views than the bound), pinned (the set is "+
				"full of pinned services).", []string{"reason"}, nil),
		emptyReads: d("empty_reads_total", "First reads of a name asked for that found no instance (the name is kept out of the set)."),
		keptOut:    d("kept_out_names", "Names kept out of the watch set now because their last read found no instance."),
		agentViews: d("agent_views",
			"Streaming views the agent holds for this node, by the watch's count (one server stream each): blocking watches, "+
				"and watches ended within the agent's 20-minute view idle time."),
		viewLimit: d("agent_views_limit", "The bound on agent_views: max_watches plus a quarter."),
		resyncs:   d("resyncs_total", "Times the agent answered again after failing and every watch read its service again."),
		oversize:  d("oversize_bodies_total", "Replies from the agent refused because their body passed its size bound."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.synced, c.connected, c.aclDenied, c.watched, c.services,
		c.instances, c.index, c.lastSuccess, c.errorsTotal, c.pinned, c.maxWatches, c.limit, c.catalogCapped,
		c.starts, c.evictions, c.agent429s, c.refused, c.emptyReads, c.keptOut, c.agentViews, c.viewLimit,
		c.resyncs, c.oversize} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.w.State()
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	gauge(c.synced, boolValue(s.Synced))
	gauge(c.connected, boolValue(s.Connected))
	gauge(c.aclDenied, boolValue(!s.Connected && errors.Is(s.LastErr, ErrACL)))
	gauge(c.watched, float64(s.Watched))
	gauge(c.services, float64(s.Services))
	gauge(c.instances, float64(s.Instances))
	gauge(c.index, float64(s.LastIndex))
	last := 0.0
	if !s.LastSuccess.IsZero() {
		last = float64(s.LastSuccess.UnixNano()) / 1e9
	}
	gauge(c.lastSuccess, last)
	gauge(c.pinned, float64(s.Pinned))
	gauge(c.maxWatches, float64(s.MaxWatches))
	gauge(c.limit, float64(s.Limit))
	gauge(c.catalogCapped, boolValue(s.CatalogCapped))
	gauge(c.keptOut, float64(s.KeptOut))
	gauge(c.agentViews, float64(s.AgentViews))
	gauge(c.viewLimit, float64(s.ViewLimit))
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(c.errorsTotal, s.Errors)
	counter(c.starts, s.Starts)
	counter(c.evictions, s.EvictedCap, "cap")
	counter(c.evictions, s.EvictedIdle, "idle")
	counter(c.evictions, s.Evicted429, "429")
	counter(c.evictions, s.EvictedEmpty, "empty")
	counter(c.agent429s, s.Agent429s)
	counter(c.refused, s.RefusedFrequency, refusedFrequency)
	counter(c.refused, s.RefusedStreams, refusedStreams)
	counter(c.refused, s.RefusedPinned, refusedPinned)
	counter(c.emptyReads, s.EmptyReads)
	counter(c.resyncs, s.Resyncs)
	counter(c.oversize, s.OversizeBodies)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
