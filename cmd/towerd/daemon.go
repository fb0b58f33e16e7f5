package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/resolver"
	"github.com/towerd/towerd/upstream"
	"github.com/towerd/towerd/upstream/consul"
)

// daemon is a running towerd: the sockets, the handler and what a reload
// replaces.
type daemon struct {
	log     *slog.Logger
	opts    *options
	cfg     Config
	handler *resolver.Handler
	groups  []*upstream.Group
	ops     *operations // metrics, admin server, cache tuning (operations.go)
	saver   *cacheSaver // periodic cache saves (state.go)

	// systemd (daemon_systemd.go): the sockets it passed, the notifications
	// sent, and what READY=1 waits for after the sockets serve.
	sd        *sdSession
	readiness []readinessCheck

	// The Consul watch (consul.go): pushed records for Config.Records.
	consul          *consul.Watcher
	stopConsulWatch func()
}

func (d *daemon) serve(cfg Config, zones []ZoneConfig, source string) int {
	cfg, zones, err := d.adoptSockets(cfg, zones)
	if err != nil {
		d.log.Error("cannot use the sockets systemd passed", "err", err)
		return exitFail
	}
	c, err := cache.New(cacheConfig(cfg))
	if err != nil {
		d.log.Error("cache", "err", err)
		return exitConfig
	}
	d.ops = newOperations(c)
	d.loadCache(c, cfg) // state.go
	if err := d.prepareConsul(cfg); err != nil {
		d.log.Error("consul watch", "err", err)
		return exitConfig
	}
	rcfg, groups, err := d.resolverConfig(cfg, zones)
	if err != nil {
		d.log.Error("upstreams", "err", err)
		return exitConfig
	}
	h, err := resolver.NewHandler(rcfg, c, d.log, d.ops.observer())
	if err != nil {
		closeGroups(groups)
		d.log.Error("resolver", "err", err)
		return exitConfig
	}
	d.cfg, d.handler, d.groups = cfg, h, groups

	srv := &resolver.Server{
		Handler: h,
		OnInvalid: func(err error) {
			d.log.Debug("dropped unparsable packet", "err", err)
		},
		OnPanic: func(v any, stack []byte) {
			d.log.Error("BUG: panic while answering a query; answered SERVFAIL", "panic", v, "stack", string(stack))
		},
	}
	if err := d.listen(srv, cfg.Listen); err != nil {
		d.log.Error("cannot listen", "err", err, "hint", bindHint(err))
		closeGroups(groups)
		return exitFail
	}
	d.startAdmin(cfg, h, srv)
	d.runConsul()
	d.saver = d.startCacheSaver(c, cfg) // state.go
	for _, z := range zones {
		d.log.Info("zone", "name", z.Name, "servers", strings.Join(z.Servers, ","))
	}
	if source != "" {
		d.log.Info("zone \".\" servers taken from the system", "file", source)
	}

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(signals)

	ready := make(chan struct{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(func() { close(ready) }) }()

	for {
		select {
		case err := <-served:
			d.log.Error("serving stopped", "err", err)
			d.saver.stop()
			h.Close()
			closeGroups(d.groups)
			return exitFail
		case <-ready:
			ready = nil
			d.markReady()
			addrs := srv.Addrs()
			d.log.Info("serving", "addrs", strings.Join(addrs, " "),
				"try", "dig @"+digTarget(strings.TrimPrefix(addrs[0], "udp/")))
			d.sdServing(addrs, c)
		case ev := <-d.sd.events:
			d.sdHandle(ev)
		case sig := <-signals:
			if sig == syscall.SIGHUP {
				d.reload()
				continue
			}
			return d.shutdown(srv, sig)
		}
	}
}

// shutdown drains: the listeners stop taking queries, the ones being answered
// finish (a client waits at most query_timeout), then upstream work stops.
func (d *daemon) shutdown(srv *resolver.Server, sig os.Signal) int {
	d.log.Info("shutting down", "signal", sig.String(), "inflight", d.handler.Inflight())
	d.sdStopping()
	d.stopAdmin()
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.QueryTimeout.Duration+time.Second)
	defer cancel()
	err := srv.Shutdown(ctx)
	d.handler.Close()
	// After the drain and with upstream work stopped, so the snapshot holds
	// every answer towerd got; and after the last periodic save, so this one
	// is renamed into place last.
	d.saver.stop()
	d.saveCache(d.ops.cache, d.cfg) // state.go
	d.stopConsul()
	closeGroups(d.groups)
	if err != nil {
		d.log.Warn("queries still running at shutdown were dropped", "err", err)
	}
	d.log.Info("stopped")
	return exitOK
}

// reload re-reads the config file and swaps in zones, upstreams, timeouts,
// serve-stale timers, the allow-list and the cache's TTL policy (reloadDone).
// The cache and queries in flight survive; a bad file leaves the running
// config alone.
func (d *daemon) reload() {
	d.sdReloading()
	defer d.sdReloaded()
	cfg, err := d.reloadConfig()
	if err == nil {
		var zones []ZoneConfig
		zones, _, err = cfg.zones("/")
		if err == nil {
			var rcfg resolver.Config
			var groups []*upstream.Group
			rcfg, groups, err = d.resolverConfig(cfg, zones)
			if err == nil {
				if err = d.handler.Reconfigure(rcfg); err != nil {
					closeGroups(groups)
				} else {
					old := d.groups
					d.groups = groups
					// Resolutions started before the swap may still use the old
					// groups; close them once those are surely done.
					time.AfterFunc(cfg.Upstream.Timeout.Duration, func() { closeGroups(old) })
				}
			}
		}
	}
	if err != nil {
		d.log.Error("reload rejected; the running configuration stays", "err", err)
		d.reloadDone(err)
		return
	}
	if !slices.Equal(cfg.Listen, d.cfg.Listen) || cfg.Cache.Size != d.cfg.Cache.Size {
		d.log.Warn("listen addresses and cache.size change only on restart")
	}
	if consulChanged(d.cfg, cfg) {
		d.log.Warn("[consul] settings and the stale age of watched records change only on restart")
	}
	d.cfg = cfg
	d.saver.reconfigure(cfg) // state.go
	d.reloadDone(nil)
	d.log.Info("reloaded", "config", d.opts.configPath)
}

func (d *daemon) resolverConfig(cfg Config, zones []ZoneConfig) (resolver.Config, []*upstream.Group, error) {
	var groups []*upstream.Group
	rcfg := resolver.Config{
		QueryTimeout:       cfg.QueryTimeout.Duration,
		UpstreamTimeout:    cfg.Upstream.Timeout.Duration,
		MaxInflight:        cfg.Upstream.MaxInflight,
		Prefetch:           cfg.Cache.Prefetch,
		ServeStale:         cfg.ServeStale.Enabled,
		StaleClientTimeout: cfg.ServeStale.ClientTimeout.Duration,
		StaleAnswerTTL:     cfg.ServeStale.AnswerTTL.Duration,
		FailureRecheck:     cfg.ServeStale.FailureRecheck.Duration,
	}
	if d.consul != nil {
		rcfg.Records = d.consul // a nil *Watcher must not become a non-nil interface
	}
	for _, a := range cfg.Allow {
		rcfg.Allow = append(rcfg.Allow, netip.MustParsePrefix(a)) // validated
	}
	for _, z := range zones {
		g, err := upstream.NewGroup(z.Name, z.Servers, upstream.GroupOptions{
			MaxAttempts:   cfg.Upstream.MaxAttempts,
			FailThreshold: cfg.Upstream.FailThreshold,
			// The ceiling follows the floor so a high floor stays meaningful.
			MinAttemptTimeout:     cfg.Upstream.MinAttemptTimeout.Duration,
			MaxAttemptTimeout:     max(cfg.Upstream.MinAttemptTimeout.Duration, 1500*time.Millisecond),
			InitialAttemptTimeout: max(cfg.Upstream.MinAttemptTimeout.Duration, 500*time.Millisecond),
			Observe:               d.ops.upstreamObserver(z.Name),
			OnHealthChange: func(server string, up bool) {
				if up {
					d.log.Info("upstream is back up", "zone", z.Name, "server", server)
				} else {
					d.log.Warn("upstream marked down", "zone", z.Name, "server", server)
				}
			},
		})
		if err != nil {
			closeGroups(groups)
			return rcfg, nil, fmt.Errorf("zone %q: %w", z.Name, err)
		}
		groups = append(groups, g)
		rcfg.Zones = append(rcfg.Zones, resolver.Zone{Name: z.Name, Upstream: g})
	}
	return rcfg, groups, nil
}

func cacheConfig(cfg Config) cache.Config {
	maxStale := cfg.ServeStale.MaxAge.Duration
	if !cfg.ServeStale.Enabled {
		maxStale = 0
	}
	return cache.Config{
		Capacity:    cfg.Cache.Size,
		MinTTL:      cfg.Cache.MinTTL.Duration,
		MaxTTL:      cfg.Cache.MaxTTL.Duration,
		MaxStaleAge: maxStale,
	}
}

func closeGroups(groups []*upstream.Group) {
	for _, g := range groups {
		g.Close()
	}
}

// bindHint says what usually holds a DNS port and how to find out.
func bindHint(err error) string {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return "another process serves DNS on this address, often systemd-resolved or dnsmasq; " +
			"find it with: sudo ss -lunp 'sport = :53' (and ss -ltnp for TCP); " +
			"`towerd install` turns off resolved's stub listener"
	case errors.Is(err, syscall.EACCES):
		return "ports below 1024 need root, CAP_NET_BIND_SERVICE or socket activation (towerd.socket); " +
			"to try towerd without root use -listen 127.0.0.1:1053"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "no interface of this machine has that address"
	}
	return ""
}

// digTarget turns "127.0.0.1:1053" into "127.0.0.1 -p 1053 example.org".
func digTarget(listen string) string {
	ap, err := netip.ParseAddrPort(listen)
	if err != nil {
		return listen
	}
	return fmt.Sprintf("%s -p %d example.org", ap.Addr(), ap.Port())
}
