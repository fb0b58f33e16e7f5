package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/towerd/towerd/cmd/towerd/internal/admin"
	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/upstream"
)

// errNoReload answers Reload when Options.Load is nil.
var errNoReload = errors.New("reload: this towerd has no configuration to re-read")

// Run serves until ctx ends, Shutdown is called or (with Options.Signals)
// SIGTERM or SIGINT arrives, then drains; SIGHUP and Reload reload. It
// returns nil after a clean shutdown and an error when serving stopped by
// itself. Call it once.
func (d *Daemon) Run(ctx context.Context) error {
	defer close(d.stopped)
	d.startAdmin()
	d.runConsul()
	d.runLocal()
	d.saver = d.startCacheSaver(d.cache, d.cfg) // state.go
	for _, z := range d.zones {
		d.log.Info("zone", "name", z.Name, "servers", strings.Join(z.Servers, ","))
	}
	if d.opts.ZonesSource != "" {
		d.log.Info("zone \".\" servers taken from the system", "file", d.opts.ZonesSource)
		d.startFollow(d.cfg) // resolvwatch.go
	}
	for _, w := range d.cfg.Warnings() {
		d.log.Warn(w)
	}

	signals := make(chan os.Signal, 1)
	if d.opts.Signals {
		signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
		defer signal.Stop(signals)
	}

	ready := make(chan struct{})
	served := make(chan error, 1)
	go func() { served <- d.server.Serve(func() { close(ready) }) }()

	for {
		select {
		case err := <-served:
			d.log.Error("serving stopped", "err", err)
			d.stopAdmin()
			d.stopFollow()
			d.saver.stop()
			d.handler.Close()
			d.stopConsul()
			d.stopLocal()
			closeGroups(d.groups)
			return fmt.Errorf("serving stopped: %w", err)
		case <-ready:
			ready = nil
			d.markReady()
			addrs := d.server.Addrs()
			d.log.Info("serving", "addrs", strings.Join(addrs, " "),
				"try", "dig @"+digTarget(strings.TrimPrefix(addrs[0], "udp/")))
			d.sdServing(addrs)
			close(d.ready)
		case ev := <-d.sd.events:
			d.sdHandle(ev)
		case <-d.resolvChanged:
			d.followResolvConf()
		case done := <-d.reloads:
			res, err := d.reload()
			done <- reloadOutcome{res, err}
		case sig := <-signals:
			if sig == syscall.SIGHUP {
				_, _ = d.reload() // logged and counted by reload
				continue
			}
			d.shutdown(sig.String())
			return nil
		case <-d.quit:
			d.shutdown("shutdown requested")
			return nil
		case <-ctx.Done():
			d.shutdown(context.Cause(ctx).Error())
			return nil
		}
	}
}

// Ready is closed once every listener serves.
func (d *Daemon) Ready() <-chan struct{} { return d.ready }

// Addrs are the served addresses as "udp/ip:port" and "tcp/ip:port", with
// port 0 resolved.
func (d *Daemon) Addrs() []string { return d.server.Addrs() }

// Reload does what SIGHUP does and returns its outcome. It waits for Run's
// loop, so it blocks until Run is called, and fails once Run has returned.
func (d *Daemon) Reload() error {
	_, err := d.ReloadResult()
	return err
}

// reloadOutcome is one reload's result, handed from Run's loop.
type reloadOutcome struct {
	res admin.ReloadResult
	err error
}

// ReloadResult is Reload that also says which keys took effect and which
// wait for a restart (`towerd reload`, POST /reload).
func (d *Daemon) ReloadResult() (admin.ReloadResult, error) {
	done := make(chan reloadOutcome, 1)
	select {
	case d.reloads <- done:
		o := <-done
		return o.res, o.err
	case <-d.quit:
		return admin.ReloadResult{}, errors.New("reload: shutting down")
	case <-d.stopped:
		return admin.ReloadResult{}, errors.New("reload: not running")
	}
}

// Shutdown makes Run drain and return; it does not wait for it.
func (d *Daemon) Shutdown() {
	d.quitOnce.Do(func() { close(d.quit) })
}

// shutdown drains: the listeners stop taking queries, the ones being answered
// finish (a client waits at most query_timeout), then upstream work stops.
func (d *Daemon) shutdown(why string) {
	d.log.Info("shutting down", "signal", why, "inflight", d.handler.Inflight())
	d.sdStopping()
	d.stopFollow()
	d.stopAdmin()
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.QueryTimeout.Duration+time.Second)
	defer cancel()
	err := d.server.Shutdown(ctx)
	d.handler.Close()
	d.stopDnstap() // after the last answer and the last resolution
	// After the drain and with upstream work stopped, so the snapshot holds
	// every answer towerd got; and after the last periodic save, so this one
	// is renamed into place last.
	d.saver.stop()
	d.saveCache(d.cache, d.cfg) // state.go
	d.stopConsul()
	d.stopLocal()
	closeGroups(d.groups)
	if err != nil {
		d.log.Warn("queries still running at shutdown were dropped", "err", err)
	}
	d.log.Info("stopped")
}

// reload re-reads the configuration and swaps in zones, upstreams,
// timeouts, serve-stale timers, the allow-list and the cache's TTL policy.
// The cache and queries in flight survive; a bad file leaves the running
// config alone. Either way the outcome is counted and logged.
func (d *Daemon) reload() (admin.ReloadResult, error) {
	d.sdReloading()
	defer d.sdReloaded()
	cfg, zones, groups, err := d.prepareReload()
	if err != nil {
		// Counted before it is said: whoever reads the line (an operator,
		// a test) then finds /stats and the metrics saying the same.
		d.tel.RecordReload(time.Now(), err)
		d.log.Error("reload rejected; the running configuration stays", "err", err)
		return admin.ReloadResult{}, err
	}
	res := reloadResult(d.cfg, cfg, d.started)
	if !slices.Contains(res.Applied, "zone") && !slices.EqualFunc(d.zones, zones, sameZone) {
		// The file did not change them: resolv.conf, read for zone ".", did.
		res.Applied = append(res.Applied, "zone servers (from resolv.conf)")
	}
	d.zones = zones
	d.applyReload(cfg, groups)
	d.restartFollow(cfg) // resolvwatch.go: SIGHUP re-reads the file and may name another
	d.tel.RecordReload(time.Now(), nil)
	d.log.Info("reloaded", "config", d.opts.ConfigFile, "applied", strings.Join(res.Applied, " "),
		"restart_needed", strings.Join(res.RestartNeeded, " "))
	return res, nil
}

// restartOnly says a key takes effect only on restart: the sockets
// (listen, udp_receive_buffer) and their [tcp] limits, the cache's size, the admin server and
// the control channel, the Consul watch, and the logger's level and format
// (main builds the logger once, before the daemon). running keeps the same
// keys.
func restartOnly(key string) bool {
	return key == "listen" || key == "udp_receive_buffer" || key == "cache.size" || key == "log_level" || key == "log_format" ||
		strings.HasPrefix(key, "admin.") || strings.HasPrefix(key, "control.") || strings.HasPrefix(key, "consul.") ||
		strings.HasPrefix(key, "tcp.") // the TCP listeners' limits are set when they start
}

// running is cfg once a reload applied it: what restartOnly names keeps
// the value the daemon started with.
func running(cfg, started config.Config) config.Config {
	cfg.Listen, cfg.UDPReceiveBuffer, cfg.Cache.Size, cfg.TCP = started.Listen, started.UDPReceiveBuffer, started.Cache.Size, started.TCP
	cfg.Admin, cfg.Control, cfg.Consul = started.Admin, started.Control, started.Consul
	cfg.LogLevel, cfg.LogFormat = started.LogLevel, started.LogFormat
	return cfg
}

// reloadResult sorts the keys of the new configuration that differ from
// the running one into those a reload applies and those that wait for a
// restart. It compares with what runs, not with the file read last: an
// edit reverted before a restart needs none (issue 25). The Consul watch
// also keeps the stale age it started with.
func reloadResult(current, cfg, started config.Config) admin.ReloadResult {
	res := admin.ReloadResult{Applied: []string{}, RestartNeeded: []string{}}
	for _, key := range config.Changed(current, cfg) {
		if restartOnly(key) {
			res.RestartNeeded = append(res.RestartNeeded, key)
		} else {
			res.Applied = append(res.Applied, key)
		}
	}
	if started.Consul.Enabled {
		for _, key := range config.Changed(watchStale(started), watchStale(cfg)) {
			// The cache follows at once; the watch's records only on restart.
			res.RestartNeeded = append(res.RestartNeeded, key+" (for Consul watch records)")
		}
	}
	return res
}

// watchStale is the part of serve_stale the Consul watch takes when it
// starts (consulChanged).
func watchStale(cfg config.Config) config.Config {
	var w config.Config
	w.ServeStale.Enabled, w.ServeStale.MaxAge = cfg.ServeStale.Enabled, cfg.ServeStale.MaxAge
	return w
}

// prepareReload reads the new configuration and hands the handler its new
// zones; nothing else has changed when it fails.
func (d *Daemon) prepareReload() (config.Config, []config.ZoneConfig, []*upstream.Group, error) {
	cfg, err := d.reloadConfig()
	if err != nil {
		return cfg, nil, nil, err
	}
	zones, _, err := cfg.ForwardZones("/")
	if err != nil {
		return cfg, nil, nil, err
	}
	zones = d.keepFollowedServers(zones) // resolvwatch.go
	rcfg, groups, err := d.resolverConfig(cfg, zones)
	if err != nil {
		d.discardDnstap()
		return cfg, nil, nil, err
	}
	if err := d.handler.Reconfigure(rcfg); err != nil {
		d.discardDnstap()
		closeGroups(groups)
		return cfg, nil, nil, err
	}
	return cfg, zones, groups, nil
}

// sameZone compares two forwarded zones, servers in order.
func sameZone(a, b config.ZoneConfig) bool {
	return a.Name == b.Name && slices.Equal(a.Servers, b.Servers)
}

// applyReload makes the rest of the daemon follow a configuration the
// handler has taken: groups, cache TTL policy, saver, metrics, admin view.
func (d *Daemon) applyReload(cfg config.Config, groups []*upstream.Group) {
	old := d.groups
	d.groups = groups
	d.local.Store(d.localNext) // the handler answers from it already
	d.search.running = d.search.next
	d.applyDnstap(cfg) // dnstap.go: the handler writes to its writer already
	// Resolutions started before the swap may still use the old groups;
	// close them once those are surely done.
	d.opts.Clock.AfterFunc(cfg.Upstream.Timeout.Duration, func() { closeGroups(old) })
	if !slices.Equal(cfg.Listen, d.started.Listen) || cfg.Cache.Size != d.started.Cache.Size || cfg.TCP != d.started.TCP {
		d.log.Warn("listen addresses, cache.size and [tcp] change only on restart")
	}
	if cfg.LogLevel != d.started.LogLevel || cfg.LogFormat != d.started.LogFormat {
		d.log.Warn("log_level and log_format change only on restart", "running", d.started.LogLevel+" "+d.started.LogFormat)
	}
	if consulChanged(d.started, cfg) {
		d.log.Warn("[consul] settings and the stale age of watched records change only on restart")
	}
	if cfg.LogQueries != d.cfg.LogQueries {
		// Only a change in the file: a log switched on at runtime to chase
		// a problem survives an unrelated reload.
		d.handler.SetLogQueries(cfg.LogQueries)
	}
	d.cfg = running(cfg, d.started)
	d.saver.reconfigure(cfg) // state.go
	cc := cacheConfig(cfg)
	if err := d.cache.SetTTLPolicy(cc); err != nil {
		// Unreachable: the config was validated with the same rules.
		d.log.Error("BUG: cache TTL policy rejected after validation; the old one stays", "err", err)
	}
	if err := d.cache.SetMaxBytes(cc.MaxBytes); err != nil {
		d.log.Error("BUG: cache.max_bytes rejected after validation; the old bound stays", "err", err)
	}
	// The old groups finish their attempts within the upstream timeout, as
	// the closing above assumes.
	d.tel.Upstreams.SetGroups(groups, cfg.Upstream.Timeout.Duration)
	if cfg.Admin != d.started.Admin {
		d.log.Warn("[admin] settings change only on restart", "running", d.started.Admin.Listen)
	}
	if cfg.Control != d.started.Control {
		d.log.Warn("[control] settings change only on restart", "running", d.started.Control.Socket)
	}
	if d.admin != nil {
		d.admin.SetView(d.adminView())
	}
}

// digTarget turns "127.0.0.1:1053" into "127.0.0.1 -p 1053 example.org".
func digTarget(listen string) string {
	ap, err := netip.ParseAddrPort(listen)
	if err != nil {
		return listen
	}
	return fmt.Sprintf("%s -p %d example.org", ap.Addr(), ap.Port())
}

// adminStopTimeout bounds how long shutdown waits for admin requests (a
// scrape, a /stats) being served.
const adminStopTimeout = 2 * time.Second

// startAdmin wires the metrics read at scrape time to the handler, server
// and upstream groups, then starts the admin server when admin.listen is
// set, and the control channel (control.go). A port that cannot be bound is
// logged, not fatal: a node's DNS must not go down over its monitoring
// port, and a failing scrape is the very thing monitoring notices.
func (d *Daemon) startAdmin() {
	if err := d.tel.Resolver.Instrument(d.handler, d.server); err != nil {
		d.log.Error("BUG: registering metrics", "err", err)
	}
	d.tel.Upstreams.SetGroups(d.groups, 0)
	a := admin.NewServer(d.log, d.tel, d.cache, d.handler, d.opts.Version)
	a.SetView(d.adminView())
	if d.opts.Load != nil {
		a.SetReloader(d.ReloadResult)
	}
	d.admin = a
	d.startControl(a)
	if d.cfg.Admin.Listen == "" {
		d.log.Info("admin server off (admin.listen is empty)")
		return
	}
	if err := a.Start(d.cfg.Admin.Listen, d.cfg.Admin.MaxConnections); err != nil {
		d.log.Error("admin server cannot listen; DNS is served without /metrics and /stats",
			"err", err, "hint", "set [admin] listen, or -admin, to a free port; \"\" turns the admin server off")
		return
	}
	d.log.Info("admin server listening", "addr", a.Addr(), "endpoints", "/metrics /stats /healthz /readyz",
		"max_connections", d.cfg.Admin.MaxConnections)
}

// adminView captures the running configuration for the admin server
// (with the [admin] table that actually runs: d.cfg keeps the started one).
func (d *Daemon) adminView() *admin.View {
	v := &admin.View{Config: d.cfg, File: d.opts.ConfigFile, Groups: d.groups, LoadedAt: time.Now(), StaleUntil: staleAge(d.cfg)}
	return v
}

// markReady is called once every listener serves: /readyz turns 200.
func (d *Daemon) markReady() {
	if d.admin != nil {
		d.admin.SetReady(true)
	}
}

// stopAdmin turns /readyz to 503 and stops the admin server and the
// control channel, removing the control socket towerd made.
func (d *Daemon) stopAdmin() {
	if d.admin == nil {
		return
	}
	d.admin.SetReady(false)
	ctx, cancel := context.WithTimeout(context.Background(), adminStopTimeout)
	defer cancel()
	d.admin.Stop(ctx)
	d.ctlSocket.remove()
}
