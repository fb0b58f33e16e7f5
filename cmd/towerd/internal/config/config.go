// Package config is towerd's configuration: the TOML file's shape, the
// built-in defaults, loading with errors that name file, line and key,
// validation, the zones the daemon forwards to, and the one renderer that
// writes a towerd.toml (for install and import-dnsmasq). It lives under
// cmd/towerd/internal because only towerd's subcommands read this file
// format; the libraries take their own Config structs (issue 16).
package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/resolver"
)

// DefaultPath is where towerd looks for its config file. A missing file
// at this path means built-in defaults; a missing file named with -config is
// an error.
const DefaultPath = "/etc/towerd/towerd.toml"

// Config is towerd's whole configuration: the TOML file's shape. Durations are
// strings such as "1.8s" or "24h".
type Config struct {
	// Listen: UDP and TCP on each address.
	Listen []string `toml:"listen"`
	// Allow: client networks that get answers; others get REFUSED.
	Allow []string `toml:"allow"`
	// QueryTimeout: the longest a client waits when nothing usable is cached.
	QueryTimeout Duration `toml:"query_timeout"`
	// MaxUDPSize: bytes; UDP answers stop at min(the client's EDNS size,
	// this) and set TC past it (DNS Flag Day 2020). 512 to 65535.
	MaxUDPSize int `toml:"max_udp_size"`
	// UDPReceiveBuffer: bytes of kernel receive buffer asked for on each
	// UDP socket (setsockopt SO_RCVBUF), to hold the queries that arrive
	// while towerd's reader is not running; 0 = the system's default.
	// Capped at net.core.rmem_max without CAP_NET_ADMIN.
	UDPReceiveBuffer ByteSize `toml:"udp_receive_buffer"`
	// ResolvConf: file whose nameservers serve zone "." when it lists none;
	// empty = /run/systemd/resolve/resolv.conf if present, else /etc/resolv.conf.
	ResolvConf string `toml:"resolv_conf"`
	// LogLevel: debug, info, warn or error.
	LogLevel string `toml:"log_level"`
	// LogFormat: text or json.
	LogFormat string `toml:"log_format"`
	// LogQueries: one log line per answered query (client, name, type,
	// rcode, source, upstream, duration), written whatever log_level says.
	// `towerd log-queries on|off` switches it at runtime; a reload applies
	// this key only when its value in the file changed.
	LogQueries bool `toml:"log_queries"`
	// LogQueriesRate: the most query-log lines a second; the lines past it
	// are dropped and counted (towerd_query_log_lines_dropped_total). A
	// reload applies it.
	LogQueriesRate int `toml:"log_queries_rate"`
	// StateDir: where the cache is saved on stop and loaded on start
	// (daemon/state.go); "" = not saved. At its default, $STATE_DIRECTORY wins.
	StateDir string `toml:"state_dir"`
	// StateSaveInterval: how often the cache is also saved while serving,
	// so a crash or SIGKILL loses at most this much; "0s" = only on stop.
	StateSaveInterval Duration `toml:"state_save_interval"`

	Cache      CacheConfig      `toml:"cache"`
	ServeStale ServeStaleConfig `toml:"serve_stale"`
	Upstream   UpstreamConfig   `toml:"upstream"`
	TCP        TCPConfig        `toml:"tcp"`
	Search     SearchConfig     `toml:"search"` // search.go
	Zones      []ZoneConfig     `toml:"zone"`
	Local      LocalConfig      `toml:"local"` // local.go
	Admin      AdminConfig      `toml:"admin"`
	Control    ControlConfig    `toml:"control"` // control.go
	Consul     ConsulConfig     `toml:"consul"`  // consul.go
	Dnstap     DnstapConfig     `toml:"dnstap"`  // dnstap.go
	DNSSEC     DNSSECConfig     `toml:"dnssec"`  // dnssec.go
}

// CacheConfig is the [cache] table.
type CacheConfig struct {
	// Size: maximum number of cached answers (LRU beyond it).
	Size int `toml:"size"`
	// MaxBytes: most bytes the cached answers may take, each counted as
	// its reply, its name and a fixed overhead (cache.EntryOverhead); the
	// least recently used go beyond it. An integer of bytes or a string
	// such as "16MiB". A reload applies it at once.
	MaxBytes ByteSize `toml:"max_bytes"`
	// MinTTL, MaxTTL: clamps on a cached answer's TTL; "0s" = no clamp.
	MinTTL Duration `toml:"min_ttl"`
	MaxTTL Duration `toml:"max_ttl"`
	// Prefetch: refresh an entry hit in the last 10 % of its TTL.
	Prefetch bool `toml:"prefetch"`
	// NoDataWithoutSOATTL: TTL of a NODATA answer that carries no SOA
	// (dnsmasq's local= names); "0s" = kept only as stale material.
	NoDataWithoutSOATTL Duration `toml:"nodata_without_soa_ttl"`
}

// ServeStaleConfig is the [serve_stale] table (RFC 8767).
type ServeStaleConfig struct {
	Enabled bool `toml:"enabled"`
	// ClientTimeout: how long a client with a stale answer waits for the
	// upstream; "0s" = answer stale at once and refresh in the background.
	ClientTimeout Duration `toml:"client_timeout"`
	// MaxAge: how long past expiry an answer may be served.
	MaxAge Duration `toml:"max_age"`
	// AnswerTTL: TTL on stale answers.
	AnswerTTL Duration `toml:"answer_ttl"`
	// FailureRecheck: after a failed refresh, serve stale this long without
	// asking the upstream again.
	FailureRecheck Duration `toml:"failure_recheck"`
}

// UpstreamConfig is the [upstream] table.
type UpstreamConfig struct {
	// Timeout: budget of one upstream resolution, all attempts included.
	Timeout Duration `toml:"timeout"`
	// MaxInflight: concurrent upstream resolutions; over it, stale or SERVFAIL.
	MaxInflight int `toml:"max_inflight"`
	// MaxAttempts: packets one resolution may send, across servers.
	MaxAttempts int `toml:"max_attempts"`
	// FailThreshold: retransmission timeouts in a row, each twice the one
	// before, that a server leaves without any reply (clients' attempts and
	// towerd's own probes) before it is marked down; never less than 1 s
	// nor more than 5 s of silence.
	FailThreshold int `toml:"fail_threshold"`
	// MinAttemptTimeout: floor of the per-attempt timeout that follows a
	// server's measured round-trip; below it a fast server's hiccup would
	// already cost a retry.
	MinAttemptTimeout Duration `toml:"min_attempt_timeout"`
	// HedgeBudget: share of upstream queries that may be hedges, a late
	// first attempt asked again of the next fastest server (token bucket,
	// burst 10; a hedge that won after its first attempt's timeout was
	// that retransmission, sent early, and is refunded); 0 turns hedging
	// and exploring off.
	HedgeBudget float64 `toml:"hedge_budget"`
}

// TCPConfig is the [tcp] table: limits on DNS over TCP (issue 13), which any
// local process can open connections to.
type TCPConfig struct {
	// MaxConnections: concurrent TCP connections; to admit one more, the
	// connection idle longest is closed. Lowered at start when the file
	// descriptor limit would not leave the reserve for upstream sockets
	// and the admin server.
	MaxConnections int `toml:"max_connections"`
	// IdleTimeout: a connection without a query this long is closed.
	IdleTimeout Duration `toml:"idle_timeout"`
	// ReadTimeout: once a query's first byte arrived, the rest must
	// arrive within this, or the connection is closed.
	ReadTimeout Duration `toml:"read_timeout"`
	// WriteTimeout: a reply not taken by the client within this closes
	// the connection.
	WriteTimeout Duration `toml:"write_timeout"`
}

// ZoneConfig is one [[zone]] entry.
type ZoneConfig struct {
	// Name: the zone, e.g. "consul." or "." for everything else.
	Name string `toml:"name"`
	// Servers: host or host:port (port 53 when left out), or a DNS over
	// TLS server, tls://host[:port]#name (port 853 when left out; name is
	// what its certificate must carry, RFC 8310's strict profile); plain
	// and TLS servers may be mixed. Empty for "." = the nameservers of
	// ResolvConf.
	Servers []string `toml:"servers"`
	// TLSCAFile: PEM file of the CA certificates the zone's TLS servers
	// are verified against; "" = the system's roots.
	TLSCAFile string `toml:"tls_ca_file"`
	// ProbeName: the name a health probe asks (type NS) of a server marked
	// down; "" = ".". Any reply counts as up, so this only matters for a
	// server that drops queries outside its zones instead of refusing them:
	// set it to a name the server answers, e.g. the zone itself (issue 11).
	ProbeName string `toml:"probe_name"`
}

// Duration is a time.Duration written as a Go duration string in TOML.
type Duration struct{ time.Duration }

// UnmarshalText parses "1.8s", "30s", "24h".
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration (examples: \"1.8s\", \"30s\", \"24h\")", b)
	}
	d.Duration = v
	return nil
}

// MarshalText writes the duration back as a string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Dur wraps d for the config structs; flags and tests build values with it.
func Dur(d time.Duration) Duration { return Duration{d} }

// ByteSize is a size in bytes: a TOML integer, or a string with a binary
// unit, as in "16MiB" (unbound's msg-cache-size takes "4m" the same way).
type ByteSize int64

// byteUnits are the suffixes UnmarshalText takes, largest first.
var byteUnits = []struct {
	suffix string
	size   int64
}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}

// UnmarshalText parses "16MiB", "512KiB", "1GiB", "4096B" or "4096".
func (b *ByteSize) UnmarshalText(text []byte) error {
	s, unit := strings.TrimSpace(string(text)), int64(1)
	for _, u := range byteUnits {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			s, unit = strings.TrimSpace(n), u.size
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/unit {
		return fmt.Errorf("%q is not a size (examples: 16777216, \"16MiB\", \"512KiB\", \"1GiB\")", text)
	}
	*b = ByteSize(n * unit)
	return nil
}

// MarshalText writes the size in the largest unit that divides it.
func (b ByteSize) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

func (b ByteSize) String() string {
	for _, u := range byteUnits {
		if b != 0 && int64(b)%u.size == 0 {
			return strconv.FormatInt(int64(b)/u.size, 10) + u.suffix
		}
	}
	return "0B"
}

// OptionalDuration is a duration a key may leave unset, written "": the
// key's documentation says what unset means.
type OptionalDuration struct {
	time.Duration
	Set bool
}

// UnmarshalText parses "" (unset) or a duration.
func (d *OptionalDuration) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*d = OptionalDuration{}
		return nil
	}
	var v Duration
	if err := v.UnmarshalText(b); err != nil {
		return err
	}
	*d = OptionalDuration{Duration: v.Duration, Set: true}
	return nil
}

// MarshalText writes "" when unset, else the duration.
func (d OptionalDuration) MarshalText() ([]byte, error) {
	if !d.Set {
		return []byte{}, nil
	}
	return []byte(d.String()), nil
}

// DefaultConfig returns the built-in configuration: loopback port 53, the
// consul. zone to the local agent, everything else to the system's resolvers.
func DefaultConfig() Config {
	return Config{
		Listen:       []string{"127.0.0.1:53"},
		Allow:        []string{"127.0.0.0/8", "::1/128"},
		QueryTimeout: Dur(1800 * time.Millisecond),
		MaxUDPSize:   1232,
		// The kernel's default (net.core.rmem_default) holds a few
		// hundred queries, a few milliseconds of a busy node's reader
		// descheduled; the rest are dropped (docs/benchmarks.md). 4 MiB is
		// unbound's suggested so-rcvbuf; it is a ceiling, taken only
		// while queries wait.
		UDPReceiveBuffer: 4 << 20,
		LogLevel:         "info",
		LogFormat:        "text",
		// A node's own clients ask tens of names a second. journald takes
		// 10,000 messages in 30 s from a service by default
		// (RateLimitBurst=, RateLimitIntervalSec=) and drops the rest
		// uncounted; 300 lines a second (about 60 KB/s) stays within it,
		// and towerd counts what it drops.
		LogQueriesRate: resolver.DefaultQueryLogRate,
		StateDir:       DefaultStateDir,
		// A snapshot of 10,000 entries is written in tens of milliseconds,
		// fsync included; every 5 minutes keeps what a crash loses small
		// without keeping the disk busy.
		StateSaveInterval: Dur(5 * time.Minute),
		Cache: CacheConfig{
			Size:     10000,
			MaxBytes: cache.DefaultMaxBytes,
			MinTTL:   Dur(0),
			MaxTTL:   Dur(24 * time.Hour),
			Prefetch: true,
			// unbound's NORR_TTL (util/data/msgreply.h): what it keeps a
			// NOERROR without records or SOA for.
			NoDataWithoutSOATTL: Dur(5 * time.Second),
		},
		ServeStale: ServeStaleConfig{
			Enabled:        true,
			ClientTimeout:  Dur(1800 * time.Millisecond),
			MaxAge:         Dur(24 * time.Hour),
			AnswerTTL:      Dur(30 * time.Second),
			FailureRecheck: Dur(30 * time.Second),
		},
		Upstream: UpstreamConfig{
			Timeout:       Dur(5 * time.Second),
			MaxInflight:   150,
			MaxAttempts:   3,
			FailThreshold: 3,
			// 200 ms: a lost packet is still resent well inside the 1.8 s
			// client timer, while a fast upstream's GC pause or a loaded
			// node does not turn every slow reply into a second packet.
			MinAttemptTimeout: Dur(200 * time.Millisecond),
			HedgeBudget:       0.05,
		},
		TCP: TCPConfig{
			MaxConnections: 256,
			IdleTimeout:    Dur(10 * time.Second), // RFC 7766 §6.2.3: seconds, not minutes
			ReadTimeout:    Dur(2 * time.Second),
			WriteTimeout:   Dur(2 * time.Second),
		},
		Search:  defaultSearchConfig(),
		Local:   defaultLocalConfig(),
		Admin:   AdminConfig{Listen: DefaultAdminListen, MaxConnections: 32},
		Control: defaultControlConfig(),
		Consul:  defaultConsulConfig(),
		DNSSEC:  defaultDNSSECConfig(),
	}
}

// defaultZones are merged under the configured ones by name.
var defaultZones = []ZoneConfig{
	{Name: "consul.", Servers: []string{"127.0.0.1:8600"}},
	{Name: "."},
}

// DefaultAdminListen is where the admin HTTP server listens by default;
// 9253 sits beside the exporters' ports and is free on a stock node.
const DefaultAdminListen = "127.0.0.1:9253"

// AdminConfig is the [admin] table: the HTTP server for what any local
// user may read: metrics, /stats (without cache contents) and the health
// checks. What changes state goes through [control].
type AdminConfig struct {
	// Listen: ip:port of the admin HTTP server; "" turns it off.
	Listen string `toml:"listen"`
	// AllowNonLoopback: serve on an address that is not loopback. The
	// server has no authentication and shows the node's figures, so this
	// must be asked for explicitly.
	AllowNonLoopback bool `toml:"allow_non_loopback"`
	// MaxConnections: admin connections served at once, taken from the
	// file descriptor budget; past it the connection idle longest is
	// closed, or the new one refused with 503 when none is idle.
	MaxConnections int `toml:"max_connections"`
}

// DefaultStateDir is where the cache is saved: systemd's StateDirectory=towerd.
const DefaultStateDir = "/var/lib/towerd"
