package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/upstream/consul"
)

// firstSyncWait bounds how long READY=1 waits for the watch's first sync.
// Without an agent the sync never comes, and systemd would kill a service
// that never reports ready; towerd answers fine without pushed records
// (queries then go to Consul's DNS), so it reports ready anyway.
const firstSyncWait = 10 * time.Second

// ConsulConfig is the [consul] table: the watch that pushes the catalog's
// healthy services into memory and answers <svc>.service.consul from there.
type ConsulConfig struct {
	// Enabled: run the watch. On by default: towerd starts whether or not
	// an agent runs, and the watch retries until one answers.
	Enabled bool `toml:"enabled"`
	// Address: the local agent's HTTP API (host:port, http(s)://host:port,
	// unix:///path); "" = CONSUL_HTTP_ADDR, else 127.0.0.1:8500.
	Address string `toml:"address"`
	// Scheme: "http" or "https"; "" = CONSUL_HTTP_SSL, else http.
	Scheme string `toml:"scheme"`
	// Token: the ACL token; "" = CONSUL_HTTP_TOKEN(_FILE), else none.
	Token string `toml:"token"`
	// TokenFile: file holding the ACL token (read at start).
	TokenFile string `toml:"token_file"`
	// TLSCAFile: CA bundle for an https agent; "" = CONSUL_CACERT, else
	// the system's.
	TLSCAFile string `toml:"tls_ca_file"`
	// Datacenter: names the <svc>.service.<dc>.consul form; "" = the
	// agent's.
	Datacenter string `toml:"datacenter"`
	// Domain: Consul's DNS domain; "" = the agent's, else "consul.".
	Domain string `toml:"domain"`
	// Services: services always watched (pinned), from the start; the
	// rest are watched once this node asks for them. ["*"] = follow the
	// whole catalog (small catalogs only; capped at max_watches).
	Services []string `toml:"services"`
	// Tags: answer from the watch only services carrying at least one of
	// these; empty = no tag filter.
	Tags []string `toml:"tags"`
	// MaxWatches: cap on watched services (each holds one HTTP connection
	// to the agent while it blocks).
	MaxWatches int `toml:"max_watches"`
	// IdleTimeout: a watch ends after this long without a question.
	IdleTimeout Duration `toml:"idle_timeout"`
	// AnswerTTL: TTL of the answers served from the watch.
	AnswerTTL Duration `toml:"answer_ttl"`
}

func defaultConsulConfig() ConsulConfig {
	return ConsulConfig{Enabled: true, AnswerTTL: dur(0), MaxWatches: consul.DefaultMaxWatches,
		IdleTimeout: dur(consul.DefaultIdleTimeout)}
}

func (c ConsulConfig) validate() error {
	if !c.Enabled {
		return nil
	}
	switch c.Scheme {
	case "", "http", "https":
	default:
		return keyErr("consul.scheme", "%q is not one of http, https", c.Scheme)
	}
	if c.Token != "" && c.TokenFile != "" {
		return keyErr("consul.token_file", "set consul.token or consul.token_file, not both")
	}
	for key, path := range map[string]string{"consul.token_file": c.TokenFile, "consul.tls_ca_file": c.TLSCAFile} {
		if path == "" {
			continue
		}
		if _, err := os.ReadFile(path); err != nil {
			return keyErr(key, "cannot be read: %v", err)
		}
	}
	if c.Domain != "" {
		if _, ok := dns.IsDomainName(c.Domain); !ok {
			return keyErr("consul.domain", "%q is not a domain name", c.Domain)
		}
	}
	for i, s := range c.Services {
		if strings.TrimSpace(s) == "" {
			return keyErr(fmt.Sprintf("consul.services[%d]", i), "empty service name")
		}
		if s == consul.WatchAll && len(c.Services) > 1 {
			return keyErr(fmt.Sprintf("consul.services[%d]", i), `"*" (watch the whole catalog) must be the only entry`)
		}
	}
	// 150 leaves room under Consul's default http_max_conns_per_client
	// (200) for the node's other Consul clients.
	if c.MaxWatches < 1 || c.MaxWatches > 150 {
		return keyErr("consul.max_watches", "must be between 1 and 150 (got %d)", c.MaxWatches)
	}
	if pinned := len(c.Services); pinned > c.MaxWatches && !(pinned == 1 && c.Services[0] == consul.WatchAll) {
		return keyErr("consul.services", "%d pinned services exceed consul.max_watches = %d", pinned, c.MaxWatches)
	}
	if c.IdleTimeout.Duration < time.Second {
		return keyErr("consul.idle_timeout", "must be at least 1s (got %v)", c.IdleTimeout)
	}
	if c.AnswerTTL.Duration < 0 || c.AnswerTTL.Duration > 24*time.Hour {
		return keyErr("consul.answer_ttl", "must be between 0s and 24h (got %v)", c.AnswerTTL)
	}
	if c.AnswerTTL.Duration%time.Second != 0 {
		return keyErr("consul.answer_ttl", "DNS TTLs are whole seconds (got %v)", c.AnswerTTL)
	}
	return nil
}

// prepareConsul builds the watch when [consul] enables it; runConsul starts
// it once towerd serves. The watch only adds answers: while it has none for
// a question, the question goes to Consul's DNS as before, so no agent (or a
// broken one) can keep towerd from starting.
func (d *daemon) prepareConsul(cfg Config) error {
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
		AnswerTTL:   c.AnswerTTL.Duration,
		MaxStale:    maxStale,
		Log:         d.log,
	})
	if err != nil {
		return &ConfigError{Key: "consul", Msg: err.Error()}
	}
	d.consul = w
	d.loadWatchSet(w, cfg)
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
func (d *daemon) runConsul() {
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
	d.log.Info("consul watch started", "address", st.Address, "mode", st.Mode, "pinned", watchedList(c.Services),
		"max_watches", c.MaxWatches, "idle_timeout", c.IdleTimeout.Duration, "answer_ttl", c.AnswerTTL.Duration)
}

// stopConsul ends the watch and waits for its queries to stop.
func (d *daemon) stopConsul() {
	if d.stopConsulWatch != nil {
		d.stopConsulWatch()
		d.stopConsulWatch = nil
	}
}

// consulChanged reports a reload that changes [consul] or the stale age the
// watch was started with: those take effect on restart only.
func consulChanged(old, cfg Config) bool {
	return !reflect.DeepEqual(old.Consul, cfg.Consul) || old.ServeStale.MaxAge != cfg.ServeStale.MaxAge ||
		old.ServeStale.Enabled != cfg.ServeStale.Enabled
}

// reportConsul hands the watch's state to /stats and its metrics to
// /metrics.
func (d *daemon) reportConsul(w *consul.Watcher) {
	if d.ops == nil || d.ops.tel == nil {
		return
	}
	if err := d.ops.tel.reg.Register(consul.NewCollector(w)); err != nil {
		d.log.Error("BUG: registering the consul watch's metrics", "err", err)
	}
	d.ops.tel.setWatchStatus(func() *watchStatus {
		s := w.State()
		state := "syncing"
		switch {
		case !s.Connected && s.ConsecutiveErrors > 0:
			state = "erroring"
		case s.Synced:
			state = "watching"
		}
		return &watchStatus{State: state, Services: s.Services, LastIndex: s.LastIndex,
			LastSuccess: s.LastSuccess, Errors: s.Errors, LastError: s.LastError,
			Mode: s.Mode, Watched: s.Watched, Pinned: s.Pinned, MaxWatches: s.MaxWatches, Limit: s.Limit,
			CatalogCapped: s.CatalogCapped, Evictions: map[string]uint64{"cap": s.EvictedCap,
				"idle": s.EvictedIdle, "429": s.Evicted429}, Agent429s: s.Agent429s}
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
func (d *daemon) loadWatchSet(w *consul.Watcher, cfg Config) {
	_, dir := statePath(cfg)
	if dir == "" {
		return
	}
	path := filepath.Join(dir, consul.SetFileName)
	f, err := os.Open(path)
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
func (d *daemon) saveWatchSet(cachePath string, level slog.Level) {
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
