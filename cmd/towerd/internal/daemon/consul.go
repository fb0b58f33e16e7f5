package daemon

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"time"

	"github.com/towerd/towerd/cmd/towerd/internal/admin"
	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/upstream/consul"
)

// firstSyncWait bounds how long READY=1 waits for the watch's first sync.
// Without an agent the sync never comes, and systemd would kill a service
// that never reports ready; towerd answers fine without pushed records
// (queries then go to Consul's DNS), so it reports ready anyway.
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
	maxStale := cfg.ServeStale.MaxAge.Duration
	if !cfg.ServeStale.Enabled {
		maxStale = 0
	}
	w, err := consul.New(consul.Config{
		Address:    c.Address,
		Scheme:     c.Scheme,
		Token:      c.Token,
		TokenFile:  c.TokenFile,
		TLSCAFile:  c.TLSCAFile,
		Datacenter: c.Datacenter,
		Domain:     c.Domain,
		Services:   c.Services,
		Tags:       c.Tags,
		AnswerTTL:  c.AnswerTTL.Duration,
		MaxStale:   maxStale,
		Log:        d.log,
	})
	if err != nil {
		return &config.Error{Key: "consul", Msg: err.Error()}
	}
	d.consul = w
	d.addReadiness("the first Consul sync", func(ctx context.Context) error {
		t := time.NewTimer(firstSyncWait)
		defer t.Stop()
		select {
		case <-w.Synced():
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return errors.New("not done within " + firstSyncWait.String() +
				"; Consul names are answered by Consul's DNS until it is")
		}
	})
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
	d.stopConsulWatch = func() {
		cancel()
		<-done
	}
	c := d.cfg.Consul
	d.log.Info("consul watch started", "address", st.Address, "services", watchedList(c.Services),
		"answer_ttl", c.AnswerTTL.Duration)
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
			LastSuccess: s.LastSuccess, Errors: s.Errors, LastError: s.LastError}
	})
}

func watchedList(services []string) string {
	if len(services) == 0 {
		return "all"
	}
	return strings.Join(services, ",")
}
