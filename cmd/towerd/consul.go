package main

import (
	"context"
	"errors"
	"fmt"
	"os"
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
	// Services: the services to watch; empty = all.
	Services []string `toml:"services"`
	// Tags: watch only services carrying at least one of these; empty =
	// no tag filter.
	Tags []string `toml:"tags"`
	// AnswerTTL: TTL of the answers served from the watch.
	AnswerTTL Duration `toml:"answer_ttl"`
}

func defaultConsulConfig() ConsulConfig {
	return ConsulConfig{Enabled: true, AnswerTTL: dur(0)}
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
		return &ConfigError{Key: "consul", Msg: err.Error()}
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
	d.log.Info("consul watch started", "address", st.Address, "services", watchedList(c.Services),
		"answer_ttl", c.AnswerTTL.Duration)
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
			LastSuccess: s.LastSuccess, Errors: s.Errors, LastError: s.LastError}
	})
}

func watchedList(services []string) string {
	if len(services) == 0 {
		return "all"
	}
	return strings.Join(services, ",")
}
