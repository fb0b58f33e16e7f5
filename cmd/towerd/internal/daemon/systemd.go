package daemon

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/systemd"
)

// statusInterval is how often STATUS= is refreshed when there is no
// watchdog to piggyback on: often enough for `systemctl status` to look
// alive, rarely enough to cost nothing.
const statusInterval = 10 * time.Second

// readinessCheck is something READY=1 waits for after the sockets serve,
// such as the first Consul sync. wait returns once it is done, or early
// when ctx ends (shutdown); an error is logged and READY=1 goes out anyway,
// because a node whose DNS answers without one extra is better off than one
// systemd keeps restarting.
type readinessCheck struct {
	what string
	wait func(ctx context.Context) error
}

// addReadiness makes READY=1 wait for one more thing. Call it before the
// sockets serve.
func (d *Daemon) addReadiness(what string, wait func(ctx context.Context) error) {
	d.readiness = append(d.readiness, readinessCheck{what: what, wait: wait})
}

// sdSession is the daemon's side of systemd's protocols: the sockets it was
// handed and the state messages it sends. Its fields belong to the main
// loop; the two goroutines it starts only send events to it, so a wedged
// main loop also stops the watchdog pings, which is what the watchdog is for.
type sdSession struct {
	notifier  *systemd.Notifier
	inherited *systemd.Sockets // nil: towerd binds its own
	events    chan sdEvent
	cancel    context.CancelFunc
	ready     bool // READY=1 was sent
	lastErr   string
	addrs     []string
}

type sdEvent int

const (
	sdAllReady sdEvent = iota // every readiness check returned
	sdTick                    // time for WATCHDOG=1 and STATUS=
)

// adoptSockets takes the sockets systemd passed, if any, before anything is
// built from cfg: they replace the listen addresses, also for the loop
// check that keeps towerd's own addresses out of its upstreams.
func (d *Daemon) adoptSockets(cfg config.Config, zones []config.ZoneConfig) (config.Config, []config.ZoneConfig, error) {
	if !d.opts.Systemd {
		return cfg, zones, nil
	}
	var err error
	if d.sd.notifier, err = systemd.NewNotifier(); err != nil {
		d.log.Warn("watchdog off", "err", err)
	}
	if d.sd.inherited, err = systemd.InheritedSockets(); err != nil {
		return cfg, zones, fmt.Errorf("sockets passed by systemd: %w", err)
	}
	if d.sd.inherited == nil {
		return cfg, zones, nil
	}
	for name, files := range d.sd.inherited.Other {
		d.log.Warn("closing sockets systemd passed that towerd does not serve", "name", name, "count", len(files))
		for _, f := range files {
			f.Close()
		}
	}
	d.sd.inherited.Other = nil
	addrs := d.sd.inherited.Addrs()
	d.log.Info("using the sockets systemd passed instead of listen", "addrs", strings.Join(addrs, " "),
		"listen", strings.Join(cfg.Listen, " "))
	if slices.Equal(addrs, cfg.Listen) {
		return cfg, zones, nil
	}
	cfg.Listen = addrs
	if zones, _, err = cfg.ForwardZones("/"); err != nil {
		d.sd.inherited.Close()
	}
	return cfg, zones, err
}

// reloadConfig is Options.Load for a reload, with the inherited sockets'
// addresses kept as the listen addresses.
func (d *Daemon) reloadConfig() (config.Config, error) {
	if d.opts.Load == nil {
		return d.cfg, errNoReload
	}
	cfg, err := d.opts.Load()
	if err == nil && d.sd.inherited != nil {
		cfg.Listen = d.sd.inherited.Addrs()
	}
	return cfg, err
}

// listen gives the server the inherited sockets, or binds addrs without them.
func (d *Daemon) listen(addrs []string) error {
	srv := d.server
	if d.sd.inherited == nil {
		return srv.Listen(addrs)
	}
	for _, pc := range d.sd.inherited.Packet {
		srv.AddPacketConn(pc)
	}
	for _, l := range d.sd.inherited.Stream {
		srv.AddListener(l)
	}
	return nil
}

// receiveBufferSet is the server's OnReceiveBuffer: one log line per UDP
// socket, saying when the kernel gave less than udp_receive_buffer
// (queries that arrive while towerd's reader waits for a CPU are dropped
// past it, as the kernel's counters show: `ss -uamn`, d in skmem). At the
// default that is an info line: towerd.service has no CAP_NET_ADMIN and a
// stock net.core.rmem_max caps it, which must not warn at every start; a
// size the operator chose warns.
func (d *Daemon) receiveBufferSet(want int) func(addr string, got int, err error) {
	logf := d.log.Warn
	if want == int(config.DefaultConfig().UDPReceiveBuffer) {
		logf = d.log.Info
	}
	return func(addr string, got int, err error) {
		switch {
		case err != nil:
			logf("cannot set udp_receive_buffer", "addr", addr, "err", err)
		case got < want:
			logf("udp_receive_buffer capped by the kernel", "addr", addr, "bytes", got, "configured", want,
				"hint", "raise net.core.rmem_max (sysctl), or set ReceiveBuffer= in a towerd.socket drop-in")
		default:
			d.log.Debug("udp receive buffer", "addr", addr, "bytes", got)
		}
	}
}

// sdServing starts what follows the sockets serving: the readiness checks
// (then READY=1) and the periodic WATCHDOG=1/STATUS= ticks.
func (d *Daemon) sdServing(addrs []string) {
	sd := d.sd
	sd.addrs = addrs
	ctx, cancel := context.WithCancel(context.Background())
	sd.cancel = cancel
	checks := append([]readinessCheck(nil), d.readiness...)
	go func() {
		for _, check := range checks {
			d.log.Info("waiting before reporting ready", "for", check.what)
			if err := check.wait(ctx); err != nil && ctx.Err() == nil {
				d.log.Warn("readiness check failed; reporting ready anyway", "for", check.what, "err", err)
			}
		}
		sd.send(ctx, sdAllReady)
	}()
	period := sd.notifier.WatchdogInterval()
	if period == 0 && sd.notifier.Enabled() {
		period = statusInterval
	}
	if period == 0 {
		return // not under systemd: nothing to tell
	}
	go func() {
		// The wall clock's, not Options.Clock: systemd's watchdog counts
		// real time, and a test's stepped clock must not starve it.
		ticker := time.NewTicker(period)
		defer ticker.Stop()
		for {
			select {
			case <-ticker.C:
				sd.send(ctx, sdTick)
			case <-ctx.Done():
				return
			}
		}
	}()
}

// send hands ev to the main loop unless the daemon is stopping.
func (sd *sdSession) send(ctx context.Context, ev sdEvent) {
	select {
	case sd.events <- ev:
	case <-ctx.Done():
	}
}

// sdHandle runs on the main loop for each event.
func (d *Daemon) sdHandle(ev sdEvent) {
	sd := d.sd
	switch ev {
	case sdAllReady:
		sd.ready = true
		d.log.Debug("ready", "systemd", sd.notifier.Enabled())
		d.sdResult(sd.notifier.Ready(d.sdStatus()))
	case sdTick:
		if sd.notifier.WatchdogInterval() > 0 {
			d.sdResult(sd.notifier.Watchdog(d.sdStatus()))
		} else if sd.ready {
			d.sdResult(sd.notifier.Status(d.sdStatus()))
		}
	}
}

// sdReloading and sdReloaded bracket a SIGHUP reload. Before the first
// READY=1 they say nothing: that READY=1 is still to come and covers it.
func (d *Daemon) sdReloading() {
	if d.sd.ready {
		d.sdResult(d.sd.notifier.Reloading("reloading " + d.opts.ConfigFile))
	}
}

func (d *Daemon) sdReloaded() {
	if d.sd.ready {
		d.sdResult(d.sd.notifier.Ready(d.sdStatus()))
	}
}

// sdStopping says STOPPING=1 and ends the goroutines of sdServing.
func (d *Daemon) sdStopping() {
	d.sdResult(d.sd.notifier.Stopping(fmt.Sprintf("stopping: draining %d queries in flight", d.handler.Inflight())))
	if d.sd.cancel != nil {
		d.sd.cancel()
	}
}

// sdResult logs a failed notification once, not at every tick, and says so
// when notifications work again.
func (d *Daemon) sdResult(err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	switch {
	case msg == d.sd.lastErr:
	case err != nil:
		d.log.Warn("cannot notify systemd", "err", err)
	default:
		d.log.Info("notifying systemd works again")
	}
	d.sd.lastErr = msg
}

// sdStatus is the one line `systemctl status towerd` shows.
func (d *Daemon) sdStatus() string {
	var b strings.Builder
	fmt.Fprintf(&b, "serving %s", strings.Join(d.sd.addrs, " "))
	if d.sd.inherited != nil {
		b.WriteString(" (from systemd)")
	}
	c := d.cache
	s := c.Stats()
	lookups := s.Hits + s.Misses + s.StaleHits
	hitRate := 0.0
	if lookups > 0 {
		hitRate = 100 * float64(s.Hits+s.StaleHits) / float64(lookups)
	}
	fmt.Fprintf(&b, "; cache %d/%d, %d lookups, %.0f%% answered from it, %d stale",
		c.Len(), c.Capacity(), lookups, hitRate, s.StaleHits)
	fmt.Fprintf(&b, "; %d in flight", d.handler.Inflight())
	up, total := 0, 0
	for _, g := range d.groups {
		for _, s := range g.Servers() {
			total++
			if s.Up {
				up++
			}
		}
	}
	fmt.Fprintf(&b, "; upstreams %d/%d up", up, total)
	return b.String()
}
