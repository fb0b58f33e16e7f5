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
	// Watched counts services followed; Services those with healthy
	// instances held (and answered from memory); Instances those instances.
	Watched   int
	Services  int
	Instances int
	// LastIndex is the service list's last X-Consul-Index.
	LastIndex uint64
	// LastSuccess is when a service-list query last reached the agent.
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
	w.mu.Unlock()
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
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.synced, c.connected, c.aclDenied, c.watched, c.services,
		c.instances, c.index, c.lastSuccess, c.errorsTotal} {
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
	ch <- prometheus.MustNewConstMetric(c.errorsTotal, prometheus.CounterValue, float64(s.Errors))
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
