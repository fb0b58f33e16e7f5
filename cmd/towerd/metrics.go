package main

import (
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/resolver"
	"github.com/towerd/towerd/upstream"
)

// telemetry is towerd's own Prometheus registry and the metrics on it. Its
// own, not the global one, so that nothing a library registers behind our
// back shows up on /metrics, and tests can build as many as they like.
type telemetry struct {
	reg       *prometheus.Registry
	resolver  *resolver.Metrics
	upstreams *upstream.Metrics
	started   time.Time

	reloads      *prometheus.CounterVec
	reloadOK     prometheus.Gauge
	reloadOKTime prometheus.Gauge

	cacheSaves      *prometheus.CounterVec
	cacheSaveOKTime prometheus.Gauge

	mu         sync.Mutex
	lastReload reloadStatus
	watch      func() *watchStatus // nil until a Consul watch reports to us
}

// reloadStatus is the outcome of the last SIGHUP, for /stats.
type reloadStatus struct {
	At    time.Time `json:"at"`
	OK    bool      `json:"ok"`
	Error string    `json:"error,omitempty"`
}

// newTelemetry builds the registry: Go and process collectors, build info,
// the resolver's, the upstreams' and c's metrics, and reload outcomes.
// Registration only fails on a programming error (two metrics with one
// name), so it panics.
func newTelemetry(c *cache.Cache, now time.Time) *telemetry {
	reg := prometheus.NewRegistry()
	rm, err := resolver.NewMetrics(reg)
	if err != nil {
		panic(err)
	}
	t := &telemetry{
		reg:       reg,
		resolver:  rm,
		upstreams: upstream.NewMetrics(resolver.DurationBuckets),
		started:   now,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "towerd_config_reloads_total",
			Help: "Configuration reloads (SIGHUP) by result: success, or failure (the running configuration stayed).",
		}, []string{"result"}),
		reloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "towerd_config_last_reload_successful",
			Help: "1 if the last configuration reload succeeded (or none was tried), 0 if it was rejected.",
		}),
		reloadOKTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "towerd_config_last_reload_success_timestamp_seconds",
			Help: "Unix time of the last successful configuration load, start-up included.",
		}),
		cacheSaves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "towerd_cache_saves_total",
			Help: "Cache snapshots written to the state directory (every state_save_interval and on stop) by result: success, or failure.",
		}, []string{"result"}),
		cacheSaveOKTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "towerd_cache_last_save_success_timestamp_seconds",
			Help: "Unix time of the last cache snapshot written; 0 before the first.",
		}),
	}
	// Both results exist from the start, so rate() sees the first failure.
	t.reloads.WithLabelValues("success")
	t.reloads.WithLabelValues("failure")
	t.cacheSaves.WithLabelValues("success")
	t.cacheSaves.WithLabelValues("failure")
	t.reloadOK.Set(1)
	t.reloadOKTime.Set(float64(now.UnixNano()) / 1e9)
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "towerd_build_info",
			Help:        "Always 1; the labels say which towerd is running.",
			ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()},
		}, func() float64 { return 1 }),
		cache.NewCollector(c),
		t.upstreams,
		t.reloads, t.reloadOK, t.reloadOKTime,
		t.cacheSaves, t.cacheSaveOKTime,
	)
	return t
}

// recordCacheSave counts one cache snapshot's outcome.
func (t *telemetry) recordCacheSave(at time.Time, err error) {
	if err != nil {
		t.cacheSaves.WithLabelValues("failure").Inc()
		return
	}
	t.cacheSaves.WithLabelValues("success").Inc()
	t.cacheSaveOKTime.Set(float64(at.UnixNano()) / 1e9)
}

// recordReload counts one reload's outcome.
func (t *telemetry) recordReload(at time.Time, err error) {
	st := reloadStatus{At: at, OK: err == nil}
	if err != nil {
		st.Error = err.Error()
		t.reloads.WithLabelValues("failure").Inc()
		t.reloadOK.Set(0)
	} else {
		t.reloads.WithLabelValues("success").Inc()
		t.reloadOK.Set(1)
		t.reloadOKTime.Set(float64(at.UnixNano()) / 1e9)
	}
	t.mu.Lock()
	t.lastReload = st
	t.mu.Unlock()
}

// reloadState returns the last reload's outcome; ok is false before any.
func (t *telemetry) reloadState() (reloadStatus, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastReload, !t.lastReload.At.IsZero()
}

// setWatchStatus tells /stats how to read the Consul watch's state. The
// watch registers its own metrics on t.reg.
func (t *telemetry) setWatchStatus(f func() *watchStatus) {
	t.mu.Lock()
	t.watch = f
	t.mu.Unlock()
}

// watchState returns the Consul watch's state, or nil when none runs.
func (t *telemetry) watchState() *watchStatus {
	t.mu.Lock()
	f := t.watch
	t.mu.Unlock()
	if f == nil {
		return nil
	}
	return f()
}

// upstreamObserver returns the attempt hook of zone's group; nil before
// telemetry exists (a daemon under construction in tests).
func (t *telemetry) upstreamObserver(zone string) func(string, time.Duration, string) {
	if t == nil {
		return nil
	}
	return t.upstreams.Observer(zone)
}
