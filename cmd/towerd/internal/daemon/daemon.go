// Package daemon is a running towerd: New builds the cache, the Consul
// watch, the upstream groups and the handler from a config.Config and binds
// the sockets (systemd's when it passed some); Run serves until Shutdown or
// a signal, answers systemd's notify protocol, saves the cache, and reloads
// on SIGHUP or Reload. `towerd serve` and `towerd drill` both start their
// towerd here, so there is one wiring (issue 16).
package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/cmd/towerd/internal/admin"
	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/cmd/towerd/internal/dnstap"
	"github.com/towerd/towerd/cmd/towerd/internal/resolvconf"
	"github.com/towerd/towerd/resolver"
	"github.com/towerd/towerd/resolver/clock"
	"github.com/towerd/towerd/resolver/consul"
	"github.com/towerd/towerd/resolver/local"
	"github.com/towerd/towerd/upstream"
)

// ErrConfig marks a New failure that the configuration caused (towerd exits
// 2), as opposed to the system refusing a socket (exit 1).
var ErrConfig = errors.New("configuration rejected")

// Options say what New builds.
type Options struct {
	// Config is the validated configuration to run.
	Config config.Config
	// Zones and ZonesSource are Config.ForwardZones's result, computed by
	// the caller so that `towerd check` and start-up report the same errors.
	Zones       []config.ZoneConfig
	ZonesSource string
	// Log receives every log line; required.
	Log *slog.Logger
	// ConfigFile names the config file in logs, STATUS= and /stats.
	ConfigFile string
	// Load re-reads the configuration for a reload (file and flags); nil
	// refuses reloads.
	Load func() (config.Config, error)
	// Version is reported by /stats and the towerd_build_info metric.
	Version string
	// Systemd: take the sockets systemd passed and speak its notify
	// protocol. Off for an in-process towerd such as the drill's, which
	// must not take its parent's sockets.
	Systemd bool
	// Signals: SIGHUP reloads, SIGTERM and SIGINT shut down.
	Signals bool
	// LogMetrics are the metrics of what Log writes to (the log sink's
	// dropped lines), registered with towerd's own; nil = none.
	LogMetrics prometheus.Collector
	// ResolvConfWatch tunes the watch of zone "."'s resolv.conf when the
	// zone has no configured servers (resolvwatch.go); the zero value is
	// what `towerd serve` uses.
	ResolvConfWatch resolvconf.WatchOptions
	// Clock is what the cache, the handler's timers, the upstream groups,
	// the cache saver, the Consul watch, the local-data and resolv.conf
	// polls and the delayed close of replaced groups run on (issue 33);
	// nil is the wall clock, what `towerd serve` uses. An in-process
	// towerd under test may step it. systemd's watchdog pings stay on the
	// wall clock (systemd.go).
	Clock clock.Clock
}

// Daemon is a running towerd: the sockets, the handler and what a reload
// replaces. Its fields belong to Run's loop once Run is called; other
// goroutines reach it through Reload and Shutdown.
type Daemon struct {
	log  *slog.Logger
	opts Options
	// cfg is the configuration that runs: the last one applied, with the
	// keys only a restart changes as started (running, run.go).
	cfg config.Config
	// started is the configuration the daemon started with; it holds the
	// values of those keys until a restart.
	started config.Config
	zones   []config.ZoneConfig
	cache   *cache.Cache
	handler *resolver.Handler
	server  *resolver.Server
	groups  []*upstream.Group

	// The operators' side: metrics always, the admin server when
	// admin.listen is set and its port could be bound.
	tel   *admin.Telemetry
	admin *admin.Server
	// ctlSocket is the control socket towerd bound itself (control.go),
	// removed on stop; nil when systemd passed it or the channel is off.
	ctlSocket *controlSocket

	saver *cacheSaver // periodic cache saves (state.go)

	// systemd (systemd.go): the sockets it passed, the notifications
	// sent, and what READY=1 waits for after the sockets serve.
	sd        *sdSession
	readiness []readinessCheck

	// The Consul watch (consul.go): pushed records for Config.Records.
	consul          *consul.Watcher
	stopConsulWatch func()

	// Zone "."'s resolv.conf (resolvwatch.go): the running watch, nil when
	// "." has configured servers; its wake-ups; the changes applied; and a
	// test hook told of each change applied or kept out.
	follow        *resolvFollow
	resolvChanged chan struct{}
	resolvChanges prometheus.Counter
	followEvent   func(what string, servers []string)

	// Local data (local.go): the source the handler runs with, the one
	// resolverConfig built last (running once the handler takes it), and
	// the poll of its hosts files.
	local     atomic.Pointer[local.Source]
	localNext *local.Source
	// anchors are the DNSSEC trust anchors last read (dnssecConfig).
	anchors       []dns.RR
	stopLocalPoll func()

	// The search-list rules' lists (search.go).
	search searchState

	// The dnstap writer (dnstap.go).
	dnstap dnstapState

	reloads  chan chan reloadOutcome
	quit     chan struct{}
	quitOnce sync.Once
	ready    chan struct{} // closed once every listener serves
	stopped  chan struct{} // closed when Run returns
}

// New builds a towerd from opts and binds its sockets; Run serves them. On
// error nothing is left running and the error was logged; errors.Is(err,
// ErrConfig) tells a configuration problem from a system one.
func New(opts Options) (*Daemon, error) {
	opts.Clock = clock.Or(opts.Clock)
	d := &Daemon{log: opts.Log, opts: opts, reloads: make(chan chan reloadOutcome), quit: make(chan struct{}),
		ready: make(chan struct{}), stopped: make(chan struct{}), sd: &sdSession{events: make(chan sdEvent)}}
	cfg, zones, err := d.adoptSockets(opts.Config, opts.Zones)
	if err != nil {
		d.log.Error("cannot use the sockets systemd passed", "err", err)
		return nil, err
	}
	cc := cacheConfig(cfg)
	cc.Now = opts.Clock.Now
	c, err := cache.New(cc)
	if err != nil {
		d.log.Error("cache", "err", err)
		return nil, fmt.Errorf("%w: cache: %v", ErrConfig, err)
	}
	d.cache = c
	d.tel = admin.NewTelemetry(c, time.Now(), opts.Version)
	if opts.LogMetrics != nil {
		if err := d.tel.Register(opts.LogMetrics); err != nil {
			d.log.Error("BUG: registering the log's metrics", "err", err)
		}
	}
	d.dnstap.stats = dnstap.NewStats()
	if err := d.tel.Register(d.dnstap.stats); err != nil {
		d.log.Error("BUG: registering dnstap's metrics", "err", err)
	}
	d.initFollow()      // resolvwatch.go
	d.loadCache(c, cfg) // state.go
	if err := d.prepareConsul(cfg); err != nil {
		d.log.Error("consul watch", "err", err)
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	rcfg, groups, err := d.resolverConfig(cfg, zones)
	if err != nil {
		d.discardDnstap()
		d.log.Error("upstreams", "err", err)
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	h, err := resolver.NewHandler(rcfg, c, d.log, d.tel.Resolver)
	if err != nil {
		d.discardDnstap()
		closeGroups(groups)
		d.log.Error("resolver", "err", err)
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	d.cfg, d.started, d.zones, d.handler, d.groups = cfg, cfg, zones, h, groups
	d.applyDnstap(cfg)
	h.SetLogQueries(cfg.LogQueries)
	d.local.Store(d.localNext)
	d.search.running = d.search.next

	d.server = &resolver.Server{
		Handler:           h,
		TCPMaxConnections: tcpConnectionCap(cfg, d.log), // fds.go
		TCPIdleTimeout:    cfg.TCP.IdleTimeout.Duration,
		TCPReadTimeout:    cfg.TCP.ReadTimeout.Duration,
		TCPWriteTimeout:   cfg.TCP.WriteTimeout.Duration,
		UDPReceiveBuffer:  int(cfg.UDPReceiveBuffer),
		OnReceiveBuffer:   d.receiveBufferSet(int(cfg.UDPReceiveBuffer)),
		OnInvalid: func(err error) {
			d.log.Debug("dropped unparsable packet", "err", err)
		},
		OnPanic: func(v any, stack []byte) {
			d.log.Error("BUG: panic while answering a query; answered SERVFAIL", "panic", v, "stack", string(stack))
		},
	}
	if err := d.listen(cfg.Listen); err != nil {
		d.log.Error("cannot listen", "err", err, "hint", bindHint(err))
		h.Close()
		d.stopDnstap()
		closeGroups(groups)
		return nil, err
	}
	return d, nil
}

// resolverConfig builds the handler's configuration and one upstream group
// per zone; the caller closes the groups once they are no longer used. A
// zone "." without servers (its followed resolv.conf does not exist yet)
// gets an upstream that fails at once (resolvwatch.go).
func (d *Daemon) resolverConfig(cfg config.Config, zones []config.ZoneConfig) (resolver.Config, []*upstream.Group, error) {
	var groups []*upstream.Group
	src, err := d.newLocal(cfg, zones)
	if err != nil {
		return resolver.Config{}, nil, err
	}
	d.localNext = src
	d.search.next = d.searchLists(cfg) // search.go
	d.anchors = nil
	if cfg.DNSSEC.ModeValue() != resolver.DNSSECOff {
		if d.anchors, err = cfg.DNSSEC.ReadAnchors(); err != nil {
			return resolver.Config{}, nil, err
		}
	}
	rcfg := d.handlerConfig(cfg, d.records(src), d.search.next)
	for _, z := range zones {
		if len(z.Servers) == 0 && z.Name == "." {
			rcfg.Zones = append(rcfg.Zones, resolver.Zone{Name: z.Name, Upstream: noServers{}})
			continue
		}
		g, err := d.newGroup(cfg, z.Name, z.Servers)
		if err != nil {
			closeGroups(groups)
			return rcfg, nil, fmt.Errorf("zone %q: %w", z.Name, err)
		}
		groups = append(groups, g)
		rcfg.Zones = append(rcfg.Zones, resolver.Zone{Name: z.Name, Upstream: g})
	}
	return rcfg, groups, nil
}

// handlerConfig is the handler's configuration without its zones, answering
// from records first (local data, then the Consul watch), with search's
// lists for the search-list rules.
func (d *Daemon) handlerConfig(cfg config.Config, records resolver.RecordSource, search []resolver.SearchList) resolver.Config {
	rcfg := resolver.Config{
		QueryTimeout:       cfg.QueryTimeout.Duration,
		MaxUDPSize:         cfg.MaxUDPSize,
		UpstreamTimeout:    cfg.Upstream.Timeout.Duration,
		MaxInflight:        cfg.Upstream.MaxInflight,
		Prefetch:           cfg.Cache.Prefetch,
		ServeStale:         cfg.ServeStale.Enabled,
		StaleClientTimeout: cfg.ServeStale.ClientTimeout.Duration,
		StaleAnswerTTL:     cfg.ServeStale.AnswerTTL.Duration,
		FailureRecheck:     cfg.ServeStale.FailureRecheck.Duration,
		QueryLogRate:       cfg.LogQueriesRate,
		Search:             search,
		SearchHold:         cfg.Search.Hold.Duration,
	}
	rcfg.Records = records
	rcfg.Tap = d.dnstapTap(cfg) // dnstap.go
	// UDP answers of the Consul domain are cut as the agent cuts them,
	// watched or not (issue 23).
	rcfg.TrimUDP = consul.DomainTrim(cfg.Consul.Domain)
	if d.consul != nil {
		rcfg.TrimUDP = d.consul.TrimsUDP
	}
	for _, a := range cfg.Allow {
		rcfg.Allow = append(rcfg.Allow, netip.MustParsePrefix(a)) // validated
	}
	rcfg.DNSSEC = d.dnssecConfig(cfg)
	rcfg.Clock = d.opts.Clock
	return rcfg
}

// dnssecConfig is validation's share of cfg with the anchors last read
// (resolverConfig). Besides the listed negative anchors, the Consul domain
// and the local data's names are ones: private names under a signed root
// (the resolver adds every zone other than ".").
func (d *Daemon) dnssecConfig(cfg config.Config) resolver.DNSSECConfig {
	mode := cfg.DNSSEC.ModeValue()
	if mode == resolver.DNSSECOff {
		return resolver.DNSSECConfig{}
	}
	negative := append([]string(nil), cfg.DNSSEC.NegativeTrustAnchors...)
	if cfg.Consul.Domain != "" {
		negative = append(negative, cfg.Consul.Domain)
	}
	negative = append(negative, cfg.Local.LocalNames()...)
	return resolver.DNSSECConfig{Mode: mode, Anchors: d.anchors, NegativeAnchors: negative}
}

// probeName is the [[zone]] probe_name configured for zone, "" (". NS")
// when none is.
func probeName(cfg config.Config, zone string) string { return zoneConfig(cfg, zone).ProbeName }

// zoneConfig is the [[zone]] configured for zone, the zero ZoneConfig
// when none is.
func zoneConfig(cfg config.Config, zone string) config.ZoneConfig {
	for _, z := range cfg.Zones {
		if dns.CanonicalName(z.Name) == dns.CanonicalName(zone) {
			return z
		}
	}
	return config.ZoneConfig{}
}

// newGroup builds zone's upstream group over servers with cfg's [upstream]
// settings, its metrics and its health logs.
func (d *Daemon) newGroup(cfg config.Config, zone string, servers []string) (*upstream.Group, error) {
	roots, err := zoneConfig(cfg, zone).TLSRoots()
	if err != nil {
		return nil, err
	}
	return upstream.NewGroup(zone, servers, upstream.GroupOptions{
		TLSRoots: roots,
		OnTLSFailure: func(server, reason string, err error) {
			// Once per change of reason (upstream.GroupOptions), not per
			// query: no query went out in clear meanwhile.
			d.log.Warn("upstream TLS connection failed; nothing is sent to it in clear", "zone", zone, "server", server, "reason", reason, "err", err)
		},
		MaxAttempts:   cfg.Upstream.MaxAttempts,
		FailThreshold: cfg.Upstream.FailThreshold,
		// The ceiling follows the floor so a high floor stays meaningful.
		MinAttemptTimeout:     cfg.Upstream.MinAttemptTimeout.Duration,
		MaxAttemptTimeout:     max(cfg.Upstream.MinAttemptTimeout.Duration, 1500*time.Millisecond),
		InitialAttemptTimeout: max(cfg.Upstream.MinAttemptTimeout.Duration, 500*time.Millisecond),
		ProbeName:             probeName(cfg, zone), // type stays NS: any reply means up
		Observe:               d.tel.Upstreams.Observer(zone),
		HedgeBudget:           hedgeBudget(cfg),
		Clock:                 d.opts.Clock,
		OnHedge:               d.tel.Upstreams.HedgeObserver(zone),
		OnBrokenChain:         d.tel.Upstreams.ChainObserver(zone),
		OnHealthChange: func(server string, up bool) {
			if up {
				d.log.Info("upstream is back up", "zone", zone, "server", server)
			} else {
				d.log.Warn("upstream marked down", "zone", zone, "server", server)
			}
		},
	})
}

// hedgeBudget is upstream.hedge_budget as GroupOptions takes it: there 0
// means the default, and hedging off is negative.
func hedgeBudget(cfg config.Config) float64 {
	if cfg.Upstream.HedgeBudget == 0 {
		return -1
	}
	return cfg.Upstream.HedgeBudget
}

// cacheConfig is the cache's share of cfg.
func cacheConfig(cfg config.Config) cache.Config {
	return cache.Config{
		Capacity:    cfg.Cache.Size,
		MaxBytes:    int64(cfg.Cache.MaxBytes),
		MinTTL:      cfg.Cache.MinTTL.Duration,
		MaxTTL:      cfg.Cache.MaxTTL.Duration,
		NoDataTTL:   cfg.Cache.NoDataWithoutSOATTL.Duration,
		MaxStaleAge: staleAge(cfg),
	}
}

// staleAge is how long past expiry an answer may still be served: the
// cache's, the Consul watch's and /stats's one figure. Without serve-stale
// it is 0, whatever serve_stale.max_age says: nothing is kept past expiry,
// so neither the cache nor the watch need hold it.
func staleAge(cfg config.Config) time.Duration {
	if !cfg.ServeStale.Enabled {
		return 0
	}
	return cfg.ServeStale.MaxAge.Duration
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
