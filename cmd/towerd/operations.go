package main

import (
	"context"
	"time"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/resolver"
)

// adminStopTimeout bounds how long shutdown waits for admin requests (a
// scrape, a /stats) being served.
const adminStopTimeout = 2 * time.Second

// operations is the operators' side of a running daemon: the cache (which a
// reload re-tunes and the admin API inspects), the metrics, and the admin
// server. The daemon's main loop calls the methods below at start-up,
// readiness, reload and shutdown.
type operations struct {
	cache *cache.Cache
	tel   *telemetry
	admin *adminServer // nil when admin.listen is "" or the port was taken
	// adminCfg is the [admin] table read at start: the admin server is not
	// moved by a reload.
	adminCfg AdminConfig
}

func newOperations(c *cache.Cache) *operations {
	return &operations{cache: c, tel: newTelemetry(c, time.Now())}
}

// upstreamObserver is the GroupOptions.Observe hook for zone's group.
func (o *operations) upstreamObserver(zone string) func(string, time.Duration, string) {
	if o == nil {
		return nil
	}
	return o.tel.upstreamObserver(zone)
}

// observer is the handler's query observer.
func (o *operations) observer() resolver.Observer {
	if o == nil {
		return nil
	}
	return o.tel.resolver
}

// startAdmin wires the metrics read at scrape time to the handler, server
// and upstream groups, then starts the admin server when admin.listen is
// set. A port that cannot be bound is logged, not fatal: a node's DNS must
// not go down over its monitoring port, and a failing scrape is the very
// thing monitoring notices.
func (d *daemon) startAdmin(cfg Config, h *resolver.Handler, srv *resolver.Server) {
	o := d.ops
	if err := o.tel.resolver.Instrument(h, srv); err != nil {
		d.log.Error("BUG: registering metrics", "err", err)
	}
	o.tel.upstreams.SetGroups(d.groups, 0)
	o.adminCfg = cfg.Admin
	if cfg.Admin.Listen == "" {
		d.log.Info("admin server off (admin.listen is empty)")
		return
	}
	a := &adminServer{log: d.log, tel: o.tel, cache: o.cache, handler: h, now: time.Now}
	a.view.Store(d.adminView(cfg))
	if err := a.start(cfg.Admin.Listen); err != nil {
		d.log.Error("admin server cannot listen; DNS is served without /metrics and /stats",
			"err", err, "hint", "set [admin] listen, or -admin, to a free port; \"\" turns the admin server off")
		return
	}
	o.admin = a
	d.log.Info("admin server listening", "addr", a.addr, "endpoints", "/metrics /stats /healthz /readyz /cache /cache/flush")
}

// adminView captures the running configuration for the admin server.
func (d *daemon) adminView(cfg Config) *adminView {
	v := &adminView{cfg: cfg, groups: d.groups, loadedAt: time.Now()}
	if d.opts != nil {
		v.file = d.opts.configPath
	}
	if cfg.ServeStale.Enabled {
		v.staleUntil = cfg.ServeStale.MaxAge.Duration
	}
	return v
}

// markReady is called once every listener serves: /readyz turns 200.
func (d *daemon) markReady() {
	if d.ops != nil && d.ops.admin != nil {
		d.ops.admin.ready.Store(true)
	}
}

// stopAdmin turns /readyz to 503 and stops the admin server.
func (d *daemon) stopAdmin() {
	if d.ops == nil || d.ops.admin == nil {
		return
	}
	d.ops.admin.ready.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), adminStopTimeout)
	defer cancel()
	d.ops.admin.stop(ctx)
}

// reloadDone finishes a SIGHUP: on success (d.cfg and d.groups are the new
// ones) the cache takes the new TTL policy and the metrics and admin server
// follow the new upstream groups; either way the outcome is counted.
func (d *daemon) reloadDone(err error) {
	if d.ops == nil {
		return
	}
	o := d.ops
	if err == nil {
		cfg := cacheConfig(d.cfg)
		if perr := o.cache.SetTTLPolicy(cfg.MinTTL, cfg.MaxTTL, cfg.MaxStaleAge); perr != nil {
			// Unreachable: the config was validated with the same rules.
			d.log.Error("BUG: cache TTL policy rejected after validation; the old one stays", "err", perr)
		}
		// The old groups finish their attempts within the upstream timeout,
		// as the daemon's own closing of them assumes.
		o.tel.upstreams.SetGroups(d.groups, d.cfg.Upstream.Timeout.Duration)
		if d.cfg.Admin != o.adminCfg {
			d.log.Warn("[admin] settings change only on restart", "running", o.adminCfg.Listen)
		}
		if o.admin != nil {
			v := d.adminView(d.cfg)
			v.cfg.Admin = o.adminCfg // what actually runs
			o.admin.view.Store(v)
		}
	}
	o.tel.recordReload(time.Now(), err)
}
