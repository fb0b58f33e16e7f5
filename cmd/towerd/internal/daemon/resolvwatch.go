package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/cmd/towerd/internal/resolvconf"
	"github.com/towerd/towerd/resolver"
	"github.com/towerd/towerd/resolver/boundedfile"
	"github.com/towerd/towerd/upstream"
)

// Zone "." without configured servers follows its resolv.conf live (issue
// 14): DHCP clients, resolved and NetworkManager rewrite that file whenever
// a lease brings other servers, and a towerd that read it only at start
// would keep asking servers the node no longer has. A change is applied like
// the zone part of a reload: a new group for ".", the other zones' groups
// (and their health) and the cache untouched. It is not a reload: it is not
// counted in towerd_config_reloads_total nor told to systemd as RELOADING=1,
// because the configuration did not change; it has its own counter.

// resolvFollow is the running watch of zone "."'s resolv.conf source. It
// belongs to Run's loop, like the rest of the Daemon.
type resolvFollow struct {
	// paths are the candidate files, first readable non-empty one wins:
	// resolv_conf, or resolved's file then /etc/resolv.conf when it is
	// unset. Following both re-makes the default choice on every change,
	// so resolved's file appearing after towerd started (resolved started
	// later) is taken as a restart would take it.
	paths []string
	// servers are zone "."'s servers in force, nil while it has none.
	servers []string
	// warned is the last "keeps its servers" warning logged, so a state
	// that lasts is logged once; "" after a usable file was read.
	warned string

	cancel   context.CancelFunc
	watchers []*resolvconf.Watcher
}

// followPaths are the files zone "." follows under cfg, nil when cfg lists
// servers for it (-upstream or [[zone]] servers pin them).
func followPaths(cfg config.Config) []string {
	for _, z := range cfg.Zones {
		if dns.CanonicalName(z.Name) == "." && len(z.Servers) > 0 {
			return nil
		}
	}
	if cfg.ResolvConf != "" {
		return []string{cfg.ResolvConf}
	}
	paths, _ := config.SystemResolvConfs("/")
	return paths
}

// initFollow creates what outlives one watch: the wake-up channel and the
// counter. Called once from New.
func (d *Daemon) initFollow() {
	d.resolvChanged = make(chan struct{}, 1)
	d.resolvChanges = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "towerd_upstream_resolvconf_changes_total",
		Help: "Times zone \".\"'s servers were replaced because its followed resolv.conf changed.",
	})
	if err := d.tel.Register(d.resolvChanges); err != nil {
		d.log.Error("BUG: registering metrics", "err", err)
	}
}

// startFollow starts watching zone "."'s resolv.conf when cfg leaves the
// zone without servers, then reads the files once more: a change between
// the configuration's read and the watch being armed is applied now.
func (d *Daemon) startFollow(cfg config.Config) {
	paths := followPaths(cfg)
	if paths == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &resolvFollow{paths: paths, servers: d.rootServers(), cancel: cancel}
	wake := func([]byte) {
		// Never blocks: Run's loop may be busy stopping this very watch,
		// and one pending wake-up re-reads whatever changed since.
		select {
		case d.resolvChanged <- struct{}{}:
		default:
		}
	}
	opts := d.opts.ResolvConfWatch
	if opts.Clock == nil {
		opts.Clock = d.opts.Clock // the poll on the daemon's one clock
	}
	opts.Refused = func(error) { wake(nil) } // followResolvConf logs why
	for _, p := range paths {
		f.watchers = append(f.watchers, resolvconf.StartWatch(ctx, p, opts, wake))
	}
	d.follow = f
	d.log.Info("zone \".\" follows its resolv.conf", "files", strings.Join(paths, " "))
	if cfg.ResolvConf == "" {
		if _, note := config.SystemResolvConfs("/"); note != "" {
			d.log.Warn(note)
		}
	}
	d.followResolvConf()
}

// stopFollow stops the watch and waits for its goroutines.
func (d *Daemon) stopFollow() {
	if d.follow == nil {
		return
	}
	d.follow.cancel()
	for _, w := range d.follow.watchers {
		<-w.Done()
	}
	d.follow = nil
}

// restartFollow follows what a reloaded configuration names (another
// file, or none once servers are pinned). Its first read logs again what
// the file lacks: a reload is when an operator looks.
func (d *Daemon) restartFollow(cfg config.Config) {
	d.stopFollow()
	d.startFollow(cfg)
}

// keepFollowedServers is the reload's share of "a missing file keeps the
// last servers": a reload that finds zone "."'s file gone keeps the servers
// the watch is using instead of dropping to none.
func (d *Daemon) keepFollowedServers(zones []config.ZoneConfig) []config.ZoneConfig {
	if d.follow == nil || d.follow.servers == nil {
		return zones
	}
	out := slices.Clone(zones)
	for i, z := range out {
		if z.Name == "." && len(z.Servers) == 0 {
			out[i].Servers = d.follow.servers
		}
	}
	return out
}

// followResolvConf re-reads the followed files and, when the servers they
// name (less towerd's own addresses) differ from those in force, swaps
// zone "."'s group. A missing or empty file, or one that names only
// towerd, keeps the servers in force; each such state is logged once.
func (d *Daemon) followResolvConf() {
	f := d.follow
	if f == nil {
		return // a wake-up from a watch stopped since
	}
	path, data, refused := readFollowed(f.paths)
	switch {
	case data == nil && refused != nil:
		// A FIFO, a device or a huge file in its place (issue 21): the
		// servers read last stay, as for a missing file.
		d.followKept(refused.Why, refused.Path)
		return
	case data == nil:
		d.followKept("missing or empty", strings.Join(f.paths, " "))
		return
	}
	rc, err := resolvconf.Parse(bytes.NewReader(data))
	if err != nil {
		d.followKept(err.Error(), path) // unreachable for bytes in memory
		return
	}
	servers := resolvconf.WithoutAddresses(rc.Nameservers, d.cfg.Listen)
	if len(servers) == 0 {
		// Forwarding to itself would loop; a DHCP client that momentarily
		// lists only 127.0.0.1 must not take "." down.
		d.followKept("it names no server but towerd's own addresses", path)
		return
	}
	f.warned = ""
	if slices.Equal(servers, f.servers) {
		if d.followEvent != nil {
			d.followEvent("unchanged", servers)
		}
		return
	}
	if err := d.setRootServers(servers); err != nil {
		d.log.Error("zone \".\" servers from resolv.conf rejected; the running ones stay", "file", path, "err", err)
		return
	}
	old := f.servers
	f.servers = servers
	d.resolvChanges.Inc()
	// Said once it is counted: the line's reader finds the metric agreeing.
	d.log.Info("zone \".\" servers changed: its resolv.conf changed", "file", path,
		"old", strings.Join(old, ","), "new", strings.Join(servers, ","))
	if d.followEvent != nil {
		d.followEvent("changed", servers)
	}
}

// followKept logs once that zone "." keeps its servers, and why.
func (d *Daemon) followKept(why, path string) {
	f := d.follow
	if f.warned != why {
		f.warned = why
		if f.servers == nil {
			d.log.Warn("zone \".\" has no servers until its resolv.conf names some: answering SERVFAIL, or stale from the cache",
				"why", why, "file", path)
		} else {
			d.log.Warn("zone \".\" keeps its servers: its resolv.conf gives none", "why", why, "file", path,
				"servers", strings.Join(f.servers, ","))
		}
	}
	if d.followEvent != nil {
		d.followEvent("kept", f.servers)
	}
}

// readFollowed returns the first of paths that reads as a non-empty file,
// under resolvconf.FileRule: nothing here can block on the file, and Run's
// loop calls it. An empty file is one caught between truncate and write,
// as in resolvconf.StartWatch. When none reads, refused is the first
// file the rule refused, if any.
func readFollowed(paths []string) (path string, data []byte, refused *boundedfile.RefusedError) {
	for _, p := range paths {
		data, err := resolvconf.ReadFile(p)
		if err == nil && len(data) > 0 {
			return p, data, nil
		}
		var r *boundedfile.RefusedError
		if refused == nil && errors.As(err, &r) {
			refused = r
		}
	}
	return "", nil, refused
}

// rootServers are the addresses of zone "."'s running group, nil without one.
func (d *Daemon) rootServers() []string {
	for _, g := range d.groups {
		if g.Address() == "." {
			var out []string
			for _, s := range g.Servers() {
				out = append(out, s.Address)
			}
			return out
		}
	}
	return nil
}

// setRootServers gives zone "." a new group over servers as a reload would
// (the handler reconfigured, the old group closed once its attempts are
// surely over, metrics and the admin view told), keeping every other zone's
// group, with its health state, as it is.
func (d *Daemon) setRootServers(servers []string) error {
	g, err := d.newGroup(d.cfg, ".", servers)
	if err != nil {
		return err
	}
	// Only zone "."'s servers change: the local data in force stays.
	rcfg := d.handlerConfig(d.cfg, d.records(d.local.Load()), d.search.running)
	groups := slices.Clone(d.groups)
	var old *upstream.Group
	if i := slices.IndexFunc(groups, func(g *upstream.Group) bool { return g.Address() == "." }); i >= 0 {
		old, groups[i] = groups[i], g
	} else {
		groups = append(groups, g)
	}
	for _, g := range groups {
		rcfg.Zones = append(rcfg.Zones, resolver.Zone{Name: g.Address(), Upstream: g})
	}
	if err := d.handler.Reconfigure(rcfg); err != nil {
		g.Close()
		return err
	}
	d.groups = groups
	if old != nil {
		// As in applyReload: resolutions that picked the old group finish
		// within the upstream timeout.
		d.opts.Clock.AfterFunc(d.cfg.Upstream.Timeout.Duration, func() { old.Close() })
	}
	for i, z := range d.zones {
		if z.Name == "." {
			d.zones[i].Servers = servers
		}
	}
	d.tel.Upstreams.SetGroups(groups, d.cfg.Upstream.Timeout.Duration)
	if d.admin != nil {
		d.admin.SetView(d.adminView())
	}
	return nil
}

// errNoServersYet is what zone "." answers with while it has no servers.
var errNoServersYet = fmt.Errorf("zone \".\": %w until its resolv.conf names some", upstream.ErrNoServers)

// noServers is zone "."'s upstream while its followed resolv.conf does not
// exist yet: every query fails at once. It reports all servers down, so a
// client with a stale answer in the cache gets it without waiting for the
// client timer (RFC 8767 §5).
type noServers struct{}

var _ resolver.Upstream = noServers{}

// StartWire fails the resolution at once, on a goroutine of its own as a
// Group's early failures are delivered.
func (noServers) StartWire(_ *upstream.WireCall, _ upstream.WireQuery, recv upstream.WireReceiver) {
	go recv.ReceiveWire(upstream.WireReply{}, errNoServersYet)
}
func (noServers) Address() string                { return "." }
func (noServers) AllDown() bool                  { return true }
func (noServers) AllDownSignal() <-chan struct{} { return closedSignal }

// RecoveredSince: no server, none back.
func (noServers) RecoveredSince(time.Time) bool { return false }

// closedSignal is an AllDownSignal that has always fired.
var closedSignal = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()
