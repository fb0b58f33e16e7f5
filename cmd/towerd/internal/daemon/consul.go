package daemon

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/cmd/towerd/internal/admin"
	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/resolver/consul"
)

// firstSyncWait is how long after towerd serves the log waits to say the
// watch's first sync has not come. READY=1 does not wait for it (issue 32):
// towerd answers fine without pushed records (queries then go to Consul's
// DNS), and a node without an agent would otherwise start, and restart,
// this much slower. /readyz and `towerd stats` show the watch's state.
const firstSyncWait = 10 * time.Second

// prepareConsul builds the watch when [consul] enables it; runConsul starts
// it once towerd serves. The watch only adds answers: while it has none for
// a question, the question goes to Consul's DNS as before, so no agent (or a
// broken one) can keep towerd from starting.
func (d *Daemon) prepareConsul(cfg config.Config) error {
	c := cfg.Consul
	if !c.Enabled {
		d.log.Info("consul watch off (consul.enabled = false)")
		return nil
	}
	w, err := consul.New(consul.Config{
		Address:     c.Address,
		Scheme:      c.Scheme,
		Token:       c.Token,
		TokenFile:   c.TokenFile,
		TLSCAFile:   c.TLSCAFile,
		Datacenter:  c.Datacenter,
		Domain:      c.Domain,
		Services:    c.Services,
		Tags:        c.Tags,
		MaxWatches:  c.MaxWatches,
		IdleTimeout: c.IdleTimeout.Duration,
		AnswerTTL:   answerTTL(c.AnswerTTL),
		MaxStale:    staleAge(cfg),
		Log:         d.log,
		Clock:       d.opts.Clock,
	})
	if err != nil {
		return &config.Error{Key: "consul", Msg: err.Error()}
	}
	d.consul = w
	d.loadWatchSet(w, cfg)
	d.reportConsul(w)
	return nil
}

// runConsul starts the watch's queries, if there is a watch.
func (d *Daemon) runConsul() {
	w := d.consul
	if w == nil {
		return
	}
	st := w.State()
	if !consul.IsLocalAddress(st.Address) {
		d.log.Warn("consul.address is not on this machine: the watch is meant for the node's own agent, "+
			"whose cache and streaming spare the servers", "address", st.Address)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	go func() {
		t, fired := d.opts.Clock.NewTimer(firstSyncWait)
		defer t.Stop()
		select {
		case <-w.Synced():
		case <-ctx.Done():
		case <-fired:
			d.log.Warn("consul watch: first sync not done within "+firstSyncWait.String()+
				"; Consul names are answered by Consul's DNS until it is", "address", st.Address)
		}
	}()
	d.stopConsulWatch = func() {
		cancel()
		<-done
	}
	c := d.cfg.Consul
	d.log.Info("consul watch started", "address", st.Address, "mode", st.Mode, "pinned", watchedList(c.Services),
		"max_watches", c.MaxWatches, "idle_timeout", c.IdleTimeout.Duration, "answer_ttl", answerTTLText(c.AnswerTTL))
}

// stopConsul ends the watch and waits for its queries to stop.
func (d *Daemon) stopConsul() {
	if d.stopConsulWatch != nil {
		d.stopConsulWatch()
		d.stopConsulWatch = nil
	}
}

// consulChanged reports a reload that changes [consul] or the stale age the
// watch was started with: those take effect on restart only.
func consulChanged(old, cfg config.Config) bool {
	return !reflect.DeepEqual(old.Consul, cfg.Consul) || old.ServeStale.MaxAge != cfg.ServeStale.MaxAge ||
		old.ServeStale.Enabled != cfg.ServeStale.Enabled
}

// reportConsul hands the watch's state to /stats and its metrics to
// /metrics.
func (d *Daemon) reportConsul(w *consul.Watcher) {
	if err := d.tel.Register(consul.NewCollector(w)); err != nil {
		d.log.Error("BUG: registering the consul watch's metrics", "err", err)
	}
	d.tel.SetWatchStatus(func() *admin.WatchStatus {
		s := w.State()
		state := "syncing"
		switch {
		case !s.Connected && s.ConsecutiveErrors > 0:
			state = "erroring"
		case s.Synced:
			state = "watching"
		}
		return &admin.WatchStatus{State: state, Services: s.Services, LastIndex: s.LastIndex,
			LastSuccess: s.LastSuccess, Errors: s.Errors, LastError: s.LastError,
			Mode: s.Mode, Watched: s.Watched, Pinned: s.Pinned, MaxWatches: s.MaxWatches, Limit: s.Limit,
			CatalogCapped: s.CatalogCapped, Evictions: map[string]uint64{"cap": s.EvictedCap,
				"idle": s.EvictedIdle, "429": s.Evicted429, "empty": s.EvictedEmpty}, Agent429s: s.Agent429s,
			Refused: map[string]uint64{"frequency": s.RefusedFrequency, "streams": s.RefusedStreams,
				"pinned": s.RefusedPinned},
			EmptyReads: s.EmptyReads, KeptOut: s.KeptOut, AgentViews: s.AgentViews, AgentViewsLimit: s.ViewLimit,
			Resyncs: s.Resyncs, OversizeBodies: s.OversizeBodies}
	})
}

func watchedList(services []string) string {
	if len(services) == 0 {
		return "none"
	}
	return strings.Join(services, ",")
}

// loadWatchSet restores the watch set saved next to the cache, so the
// services this node asked for before a restart are watched (and answered
// from memory) from the start. A missing or bad file only means starting
// with the pinned services.
func (d *Daemon) loadWatchSet(w *consul.Watcher, cfg config.Config) {
	_, dir := statePath(cfg)
	if dir == "" {
		return
	}
	path := filepath.Join(dir, consul.SetFileName)
	// Checked like the cache snapshot (issue 13): a FIFO, a link or a file
	// someone else could write is set aside, never read.
	f, err := cache.OpenSnapshot(path)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		d.log.Warn("saved consul watch set ignored", "file", path, "err", err)
		return
	}
	defer f.Close()
	n, err := w.ReadSet(f)
	if err != nil {
		d.log.Warn("saved consul watch set ignored", "file", path, "err", err)
		return
	}
	d.log.Info("loaded saved consul watch set", "file", path, "services", n)
}

// saveWatchSet writes the watch set next to the cache snapshot at path.
func (d *Daemon) saveWatchSet(cachePath string, level slog.Level) {
	if d.consul == nil || cachePath == "" {
		return
	}
	path := filepath.Join(filepath.Dir(cachePath), consul.SetFileName)
	n, err := writeAtomic(path, d.consul.WriteSet)
	if err != nil {
		d.log.Warn("consul watch set not saved", "file", path, "err", err)
		return
	}
	d.log.Log(context.Background(), level, "saved consul watch set", "file", path, "services", n)
}

// answerTTL is consul.answer_ttl for the watch: unset, the agent's.
func answerTTL(d config.OptionalDuration) time.Duration {
	if !d.Set {
		return consul.AgentTTL
	}
	return d.Duration
}

// answerTTLText is consul.answer_ttl for the log.
func answerTTLText(d config.OptionalDuration) string {
	if !d.Set {
		return "the agent's service_ttl"
	}
	return d.String()
}
