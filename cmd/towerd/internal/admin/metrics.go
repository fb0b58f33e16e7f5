package admin

import (
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
	dto "github.com/prometheus/client_model/go"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/resolver"
	"github.com/towerd/towerd/upstream"
)

// Telemetry is towerd's own Prometheus registry and the metrics on it. Its
// own, not the global one, so that nothing a library registers behind our
// back shows up on /metrics, and tests can build as many as they like.
type Telemetry struct {
	reg *prometheus.Registry
	// Resolver is the handler's query observer and instrumentation.
	Resolver *resolver.Metrics
	// Upstreams observes every upstream attempt and reads the groups' state.
	Upstreams *upstream.Metrics
	started   time.Time

	reloads      *prometheus.CounterVec
	reloadOK     prometheus.Gauge
	reloadOKTime prometheus.Gauge

	cacheSaves      *prometheus.CounterVec
	cacheSaveOKTime prometheus.Gauge

	controlRefused prometheus.Counter // refused.go

	mu         sync.Mutex
	lastReload ReloadStatus
	watch      func() *WatchStatus // nil until a Consul watch reports to us
}

// ReloadStatus is the outcome of the last SIGHUP, for /stats.
type ReloadStatus struct {
	At    time.Time `json:"at"`
	OK    bool      `json:"ok"`
	Error string    `json:"error,omitempty"`
}

// NewTelemetry builds the registry: Go and process collectors, build info,
// the resolver's, the upstreams' and c's metrics, and reload outcomes.
// Registration only fails on a programming error (two metrics with one
// name), so it panics.
func NewTelemetry(c *cache.Cache, now time.Time, version string) *Telemetry {
	reg := prometheus.NewRegistry()
	rm, err := resolver.NewMetrics(reg)
	if err != nil {
		panic(err)
	}
	// Telemetry's own metrics are registered on reg as they are made.
	auto := promauto.With(reg)
	t := &Telemetry{
		reg:       reg,
		Resolver:  rm,
		Upstreams: upstream.NewMetrics(resolver.DurationBuckets),
		started:   now,
		reloads: resultCounter(auto, "towerd_config_reloads_total",
			"Configuration reloads (SIGHUP) by result: success, or failure (the running configuration stayed)."),
		reloadOK: gauge(auto, "towerd_config_last_reload_successful",
			"1 if the last configuration reload succeeded (or none was tried), 0 if it was rejected."),
		reloadOKTime: gauge(auto, "towerd_config_last_reload_success_timestamp_seconds",
			"Unix time of the last successful configuration load, start-up included."),
		cacheSaves: resultCounter(auto, "towerd_cache_saves_total",
			"Cache snapshots written to the state directory (every state_save_interval and on stop) by result: success, or failure."),
		cacheSaveOKTime: gauge(auto, "towerd_cache_last_save_success_timestamp_seconds",
			"Unix time of the last cache snapshot written; 0 before the first."),
		controlRefused: auto.NewCounter(prometheus.CounterOpts{
			Name: "towerd_control_refused_total",
			Help: "Control socket connections refused by the peer check: not root, towerd's user or a member of the operators' group, or credentials the kernel could not give.",
		}),
	}
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
		t.Upstreams,
	)
	return t
}

func gauge(auto promauto.Factory, name, help string) prometheus.Gauge {
	return auto.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

// resultCounter makes a counter of outcomes by result, success or failure.
// Both results exist from the start, so rate() sees the first failure.
func resultCounter(auto promauto.Factory, name, help string) *prometheus.CounterVec {
	v := auto.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"result"})
	v.WithLabelValues("success")
	v.WithLabelValues("failure")
	return v
}

// RecordCacheSave counts one cache snapshot's outcome.
func (t *Telemetry) RecordCacheSave(at time.Time, err error) {
	if err != nil {
		t.cacheSaves.WithLabelValues("failure").Inc()
		return
	}
	t.cacheSaves.WithLabelValues("success").Inc()
	t.cacheSaveOKTime.Set(float64(at.UnixNano()) / 1e9)
}

// RecordReload counts one reload's outcome.
func (t *Telemetry) RecordReload(at time.Time, err error) {
	st := ReloadStatus{At: at, OK: err == nil}
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
func (t *Telemetry) reloadState() (ReloadStatus, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastReload, !t.lastReload.At.IsZero()
}

// SetWatchStatus tells /stats how to read the Consul watch's state.
func (t *Telemetry) SetWatchStatus(f func() *WatchStatus) {
	t.mu.Lock()
	t.watch = f
	t.mu.Unlock()
}

// watchState returns the Consul watch's state, or nil when none runs.
func (t *Telemetry) watchState() *WatchStatus {
	t.mu.Lock()
	f := t.watch
	t.mu.Unlock()
	if f == nil {
		return nil
	}
	return f()
}

// Gather reads the registry /metrics serves; /stats and tests use it.
func (t *Telemetry) Gather() ([]*dto.MetricFamily, error) { return t.reg.Gather() }

// Register adds a collector of another part of towerd, such as the Consul
// watch's, to the registry /metrics serves.
func (t *Telemetry) Register(c prometheus.Collector) error { return t.reg.Register(c) }
