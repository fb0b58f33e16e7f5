// Command towerd is a per-node DNS caching resolver: split forwarding (consul.
// to the local agent, everything else to the site's resolvers), an LRU cache
// that serves stale answers when the upstream fails, and never caches NXDOMAIN.
//
// This package dispatches subcommands and parses the flags of serve and
// check; the work is in internal/config, daemon and admin, and every
// other subcommand is its package's own: ctl (the control subcommands),
// install, dnsmasqimport, drill and doctor, after the Go toolchain's
// cmd/go/internal layout (issues 16 and 26).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/towerd/towerd/cmd/towerd/internal/base"
	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/cmd/towerd/internal/daemon"
	"github.com/towerd/towerd/cmd/towerd/internal/logsink"
	"github.com/towerd/towerd/cmd/towerd/internal/resolvconf"
	"github.com/towerd/towerd/resolver/boundedfile"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes, base's under the names this package's subcommands use.
const (
	exitOK     = base.ExitOK
	exitFail   = base.ExitFail   // a runtime failure: a port that cannot be bound, an upstream that cannot be set up
	exitConfig = base.ExitConfig // bad flags or configuration
)

// logFlushTimeout bounds how long towerd waits at exit for its last log
// lines to be taken: a reader that stopped keeps them.
const logFlushTimeout = 2 * time.Second

func newLogger(w io.Writer, level, format string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level)) // validated already
	opts := &slog.HandlerOptions{Level: l}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// defaultGCPercent is towerd's garbage collector target unless GOGC is set.
// Go's default (100) lets the heap grow to twice what is live before a
// collection; towerd's live heap is mostly its cache, so that doubled the
// memory each cached entry costs a node. 50 trades a little miss throughput
// for a smaller RSS per entry (figures: docs/benchmarks.md, make bench's
// memory scenario); cache hits allocate nothing, so they never trigger a
// collection.
const defaultGCPercent = 50

func setGCPercent() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
}

// options are the command-line flags of serve and check.
type options struct {
	configPath  string
	listen      string
	upstreams   string
	consulDNS   string
	consulHTTP  string
	cacheSize   int
	logLevel    string
	admin       string
	control     string
	stateDir    string
	saveEvery   time.Duration
	checkConfig bool
	showVersion bool
	set         map[string]bool
}

// serveUsage is what -h prints above the flags of serve and check: the
// subcommand's own usage, not Go's "Usage of towerd:" (issue 25).
var serveUsage = map[string]string{
	"serve": `usage: towerd [serve] [flags]
  runs the resolver: reads the config file and its towerd.d/*.toml drop-ins,
  applies the flags over them, and serves DNS until SIGTERM (SIGHUP reloads).
  Exit 0 after a clean stop; 1: towerd cannot run (a port it cannot bind);
  2: bad flags or configuration (the message names the file, line and key).
`,
	"check": `usage: towerd check [flags]
  loads the configuration as serve does (the file, its towerd.d/*.toml
  drop-ins, the flags), prints the zones it would forward and warns about
  what looks wrong. Exit 0: valid; 2: bad flags or configuration (the
  message names the file, the line of the value at fault and the key).
`,
}

// parseFlags parses the flags of serve or check (name).
func parseFlags(name string, args []string, stderr io.Writer) (*options, error) {
	o := &options{set: map[string]bool{}}
	fs := flag.NewFlagSet("towerd "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), serveUsage[name])
		fs.PrintDefaults()
	}
	fs.StringVar(&o.configPath, "config", config.DefaultPath, "config file (TOML); a missing file at the default path means built-in defaults; \"\" = built-in defaults only")
	fs.StringVar(&o.listen, "listen", "", "comma-separated ip:port addresses to serve on (UDP and TCP); overrides the listen key")
	fs.StringVar(&o.upstreams, "upstream", "", "comma-separated servers for zone \".\"; overrides the file and resolv.conf")
	fs.StringVar(&o.consulDNS, "consul-dns", "", "server for zone \"consul.\" (default 127.0.0.1:8600)")
	fs.StringVar(&o.consulHTTP, "consul-http", "", "HTTP API of the local Consul agent the service watch follows (overrides consul.address); \"off\" turns the watch off")
	fs.IntVar(&o.cacheSize, "cache-size", 0, "maximum cached answers; overrides cache.size")
	fs.StringVar(&o.logLevel, "log-level", "", "debug, info, warn or error; overrides log_level")
	fs.StringVar(&o.admin, "admin", "", "ip:port of the admin HTTP server (/metrics, /stats); \"\" turns it off; overrides admin.listen")
	fs.StringVar(&o.control, "control", "", "path of the control socket (reload, flush, cache, lookup, log-queries); \"\" turns it off; overrides control.socket (default "+config.DefaultControlSocket+")")
	fs.StringVar(&o.stateDir, "state-dir", "", "directory the cache is saved in on stop and loaded from on start; \"\" = not saved; overrides state_dir (default "+config.DefaultStateDir+")")
	fs.DurationVar(&o.saveEvery, "state-save-interval", 0, "how often the cache is also saved while serving, e.g. \"5m\"; \"0s\" = only on stop; overrides state_save_interval (default 5m)")
	fs.BoolVar(&o.checkConfig, "check-config", false, "validate the configuration and exit (same as \"towerd check\")")
	fs.BoolVar(&o.showVersion, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	return o, nil
}

// load reads the config file and applies the flags over it.
func (o *options) load() (config.Config, error) {
	optional := !o.set["config"] || o.configPath == ""
	cfg, err := config.Load(o.configPath, optional)
	if err != nil {
		return cfg, err
	}
	if o.set["listen"] {
		cfg.Listen = splitList(o.listen)
	}
	if o.set["cache-size"] {
		cfg.Cache.Size = o.cacheSize
	}
	if o.set["log-level"] {
		cfg.LogLevel = o.logLevel
	}
	if o.set["admin"] {
		cfg.Admin.Listen = o.admin
	}
	if o.set["control"] {
		cfg.Control.Socket = o.control
	}
	if o.set["state-dir"] {
		cfg.StateDir = o.stateDir
	}
	if o.set["state-save-interval"] {
		cfg.StateSaveInterval = config.Dur(o.saveEvery)
	}
	if o.set["upstream"] {
		cfg.Zones = setZone(cfg.Zones, ".", splitList(o.upstreams))
	}
	if o.set["consul-dns"] {
		cfg.Zones = setZone(cfg.Zones, "consul.", splitList(o.consulDNS))
	}
	if o.set["consul-http"] {
		// Only "off" changes consul.enabled: an address never turns on a
		// watch the configuration turned off (issue 12).
		if o.consulHTTP == "off" {
			cfg.Consul.Enabled = false
		} else {
			cfg.Consul.Address = o.consulHTTP
		}
	}
	if err := cfg.Validate(); err != nil {
		var ce *config.Error
		if errors.As(err, &ce) {
			ce.Msg += " (after applying flags)"
		}
		return cfg, err
	}
	return cfg, nil
}

// setZone replaces zone name's servers, as -upstream and -consul-dns do.
func setZone(zones []config.ZoneConfig, name string, servers []string) []config.ZoneConfig {
	out := make([]config.ZoneConfig, 0, len(zones)+1)
	for _, z := range zones {
		if !strings.EqualFold(strings.TrimSuffix(z.Name, ".")+".", name) {
			out = append(out, z)
		}
	}
	return append(out, config.ZoneConfig{Name: name, Servers: servers})
}

// splitList splits a comma-separated flag value, dropping empty entries.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// warnNoRootServers says when zone "." starts without servers: its
// resolv.conf does not exist (yet), or is not a file towerd reads (a FIFO,
// a device, too large: issue 21). towerd starts anyway and follows the
// file (issue 14), but until it is usable every name outside the other
// zones gets SERVFAIL.
func warnNoRootServers(stderr io.Writer, zones []config.ZoneConfig, source string) {
	for _, z := range zones {
		if z.Name == "." && len(z.Servers) == 0 {
			why := source + " does not exist"
			var refused *boundedfile.RefusedError
			if _, err := resolvconf.ReadFile(source); errors.As(err, &refused) {
				why = refused.Error()
			}
			fmt.Fprintf(stderr, "towerd: warning: zone \".\" has no servers: %s; "+
				"towerd answers SERVFAIL for it until the file is usable (set servers for zone \".\" or resolv_conf)\n", why)
		}
	}
}

// serveCommand is `towerd serve` and, with check, `towerd check`.
func serveCommand(args []string, stdout, stderr io.Writer, check bool) int {
	name := "serve"
	if check {
		name = "check"
	}
	o, err := parseFlags(name, args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitConfig
	}
	if o.showVersion {
		fmt.Fprintln(stdout, "towerd", version)
		return exitOK
	}
	cfg, err := o.load()
	if err != nil {
		fmt.Fprintf(stderr, "towerd: config: %v\n", err)
		return exitConfig
	}
	zones, source, err := cfg.ForwardZones("/")
	if err != nil {
		fmt.Fprintf(stderr, "towerd: config: %v\n", err)
		return exitConfig
	}
	if check || o.checkConfig {
		fmt.Fprintf(stdout, "config ok: listen %s\n", strings.Join(cfg.Listen, ", "))
		for _, z := range zones {
			fmt.Fprintf(stdout, "  zone %-20s -> %s\n", z.Name, strings.Join(z.Servers, ", "))
		}
		if source != "" {
			fmt.Fprintf(stdout, "  (zone \".\" servers from %s, followed while towerd runs)\n", source)
		}
		printDropIns(stdout, o.configPath)
		if note := cfg.Consul.CredentialsNote(); note != "" {
			fmt.Fprintf(stdout, "  (%s)\n", note)
		}
		warnNoRootServers(stderr, zones, source)
		warnOwnResolvConf(stderr, cfg, source)
		checkWarnings(o, cfg, stderr) // check.go
		return exitOK
	}
	// Every log line goes through the sink: a log reader that stops must
	// not stop DNS (issue 21; cmd/towerd/internal/logsink).
	sink := logsink.New(stderr)
	log := newLogger(sink, cfg.LogLevel, cfg.LogFormat)
	sink.Start(func(n uint64) {
		log.Warn("log lines dropped: whatever reads towerd's log (the journal, a pipe) did not take them fast enough",
			"dropped", n, "metric", "towerd_log_lines_dropped_total")
	})
	defer sink.Close(logFlushTimeout)
	setGCPercent()
	d, err := daemon.New(daemon.Options{
		Config: cfg, Zones: zones, ZonesSource: source, Log: log, ConfigFile: o.configPath,
		Load: o.load, Version: version, Systemd: true, Signals: true, LogMetrics: sink,
	})
	switch {
	case errors.Is(err, daemon.ErrConfig):
		return exitConfig
	case err != nil:
		return exitFail
	}
	if err := d.Run(context.Background()); err != nil {
		return exitFail // logged by Run
	}
	return exitOK
}
