package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/miekg/dns"
	"github.com/pelletier/go-toml/v2"

	"github.com/towerd/towerd/upstream"
	"github.com/towerd/towerd/upstream/resolvconf"
)

// DefaultConfigPath is where towerd looks for its config file. A missing file
// at this path means built-in defaults; a missing file named with -config is
// an error.
const DefaultConfigPath = "/etc/towerd/towerd.toml"

// Config is towerd's whole configuration: the TOML file's shape. Durations are
// strings such as "1.8s" or "24h".
type Config struct {
	// Listen: UDP and TCP on each address.
	Listen []string `toml:"listen"`
	// Allow: client networks that get answers; others get REFUSED.
	Allow []string `toml:"allow"`
	// QueryTimeout: the longest a client waits when nothing usable is cached.
	QueryTimeout Duration `toml:"query_timeout"`
	// ResolvConf: file whose nameservers serve zone "." when it lists none;
	// empty = /run/systemd/resolve/resolv.conf if present, else /etc/resolv.conf.
	ResolvConf string `toml:"resolv_conf"`
	// LogLevel: debug, info, warn or error.
	LogLevel string `toml:"log_level"`
	// LogFormat: text or json.
	LogFormat string `toml:"log_format"`
	// StateDir: where the cache is saved on stop and loaded on start
	// (state.go); "" = not saved. At its default, $STATE_DIRECTORY wins.
	StateDir string `toml:"state_dir"`
	// StateSaveInterval: how often the cache is also saved while serving,
	// so a crash or SIGKILL loses at most this much; "0s" = only on stop.
	StateSaveInterval Duration `toml:"state_save_interval"`

	Cache      CacheConfig      `toml:"cache"`
	ServeStale ServeStaleConfig `toml:"serve_stale"`
	Upstream   UpstreamConfig   `toml:"upstream"`
	Zones      []ZoneConfig     `toml:"zone"`
	Admin      AdminConfig      `toml:"admin"`  // admin.go
	Consul     ConsulConfig     `toml:"consul"` // consul.go
}

// CacheConfig is the [cache] table.
type CacheConfig struct {
	// Size: maximum number of cached answers (LRU beyond it).
	Size int `toml:"size"`
	// MinTTL, MaxTTL: clamps on a cached answer's TTL; "0s" = no clamp.
	MinTTL Duration `toml:"min_ttl"`
	MaxTTL Duration `toml:"max_ttl"`
	// Prefetch: refresh an entry hit in the last 10 % of its TTL.
	Prefetch bool `toml:"prefetch"`
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
	// FailThreshold: consecutive failures that mark a server down.
	FailThreshold int `toml:"fail_threshold"`
	// MinAttemptTimeout: floor of the per-attempt timeout that follows a
	// server's measured round-trip; below it a fast server's hiccup would
	// already cost a retry.
	MinAttemptTimeout Duration `toml:"min_attempt_timeout"`
}

// ZoneConfig is one [[zone]] entry.
type ZoneConfig struct {
	// Name: the zone, e.g. "consul." or "." for everything else.
	Name string `toml:"name"`
	// Servers: host or host:port (port 53 when left out). Empty for "." =
	// the nameservers of ResolvConf.
	Servers []string `toml:"servers"`
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

func dur(d time.Duration) Duration { return Duration{d} }

// DefaultConfig returns the built-in configuration: loopback port 53, the
// consul. zone to the local agent, everything else to the system's resolvers.
func DefaultConfig() Config {
	return Config{
		Listen:       []string{"127.0.0.1:53"},
		Allow:        []string{"127.0.0.0/8", "::1/128"},
		QueryTimeout: dur(1800 * time.Millisecond),
		LogLevel:     "info",
		LogFormat:    "text",
		StateDir:     DefaultStateDir,
		// A snapshot of 10,000 entries is written in tens of milliseconds,
		// fsync included; every 5 minutes keeps what a crash loses small
		// without keeping the disk busy.
		StateSaveInterval: dur(5 * time.Minute),
		Cache: CacheConfig{
			Size:     10000,
			MinTTL:   dur(0),
			MaxTTL:   dur(24 * time.Hour),
			Prefetch: true,
		},
		ServeStale: ServeStaleConfig{
			Enabled:        true,
			ClientTimeout:  dur(1800 * time.Millisecond),
			MaxAge:         dur(24 * time.Hour),
			AnswerTTL:      dur(30 * time.Second),
			FailureRecheck: dur(30 * time.Second),
		},
		Upstream: UpstreamConfig{
			Timeout:       dur(5 * time.Second),
			MaxInflight:   150,
			MaxAttempts:   3,
			FailThreshold: 3,
			// 200 ms: a lost packet is still resent well inside the 1.8 s
			// client timer, while a fast upstream's GC pause or a loaded
			// node does not turn every slow reply into a second packet.
			MinAttemptTimeout: dur(200 * time.Millisecond),
		},
		Admin:  AdminConfig{Listen: DefaultAdminListen},
		Consul: defaultConsulConfig(),
	}
}

// defaultZones are merged under the configured ones by name.
var defaultZones = []ZoneConfig{
	{Name: "consul.", Servers: []string{"127.0.0.1:8600"}},
	{Name: "."},
}

// ConfigError is a configuration problem tied to a key and, when known, a line.
type ConfigError struct {
	File string
	Line int
	Key  string
	Msg  string
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	}
	if e.Key != "" {
		fmt.Fprintf(&b, "key %q: ", e.Key)
	}
	b.WriteString(e.Msg)
	return b.String()
}

// LoadConfig reads path over the defaults. A missing file is fine when
// optional (the default path): towerd then runs on built-in defaults.
func LoadConfig(path string, optional bool) (Config, error) {
	cfg := DefaultConfig()
	if path == "" {
		return cfg, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && optional {
		return cfg, nil
	}
	if err != nil {
		return cfg, fmt.Errorf("reading config: %w", err)
	}
	if err := decodeConfig(data, path, &cfg); err != nil {
		return cfg, err
	}
	if err := cfg.validate(); err != nil {
		var ce *ConfigError
		if errors.As(err, &ce) {
			ce.File = path
			ce.Line = lineOfKey(data, ce.Key)
		}
		return cfg, err
	}
	return cfg, nil
}

func decodeConfig(data []byte, path string, cfg *Config) error {
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(cfg)
	if err == nil {
		return nil
	}
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) && len(strict.Errors) > 0 {
		e := strict.Errors[0]
		line, _ := e.Position()
		return &ConfigError{File: path, Line: line, Key: strings.Join(e.Key(), "."),
			Msg: "unknown key (see the README's configuration table)"}
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		line, _ := de.Position()
		return &ConfigError{File: path, Line: line, Key: strings.Join(de.Key(), "."),
			Msg: strings.TrimPrefix(de.Error(), "toml: ")}
	}
	return &ConfigError{File: path, Msg: err.Error()}
}

// lineOfKey finds the line of "leaf =" for a dotted key, best effort, so
// validation errors point at the line like parse errors do. Only lines of
// the key's own table count: "admin.listen" must not point at the top-level
// "listen".
func lineOfKey(data []byte, key string) int {
	if key == "" {
		return 0
	}
	parts := strings.Split(key, ".")
	leaf := regexp.QuoteMeta(strings.TrimSuffix(parts[len(parts)-1], "]"))
	if i := strings.Index(leaf, `\[`); i >= 0 {
		leaf = leaf[:i]
	}
	table := ""
	if len(parts) > 1 {
		table, _, _ = strings.Cut(parts[0], "[")
	}
	re := regexp.MustCompile(`^\s*` + leaf + `\s*=`)
	current := ""
	for i, line := range strings.Split(string(data), "\n") {
		if m := tableHeader.FindStringSubmatch(line); m != nil {
			current = m[1]
			continue
		}
		if current == table && re.MatchString(line) {
			return i + 1
		}
	}
	return 0
}

// tableHeader matches "[cache]" and "[[zone]]" lines.
var tableHeader = regexp.MustCompile(`^\s*\[\[?\s*([A-Za-z0-9_-]+)\s*\]\]?`)

func keyErr(key, format string, args ...any) error {
	return &ConfigError{Key: key, Msg: fmt.Sprintf(format, args...)}
}

// validate checks every value once, at start-up or reload, with messages that
// name the key.
func (c *Config) validate() error {
	if len(c.Listen) == 0 {
		return keyErr("listen", "needs at least one address")
	}
	for i, a := range c.Listen {
		if _, err := netip.ParseAddrPort(a); err != nil {
			return keyErr(fmt.Sprintf("listen[%d]", i), "%q is not ip:port (e.g. \"127.0.0.1:53\", \"[::1]:53\")", a)
		}
	}
	for i, a := range c.Allow {
		if _, err := netip.ParsePrefix(a); err != nil {
			return keyErr(fmt.Sprintf("allow[%d]", i), "%q is not a network in CIDR form (e.g. \"10.0.0.0/8\")", a)
		}
	}
	if c.QueryTimeout.Duration <= 0 {
		return keyErr("query_timeout", "must be positive (got %v)", c.QueryTimeout)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return keyErr("log_level", "%q is not one of debug, info, warn, error", c.LogLevel)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		return keyErr("log_format", "%q is not one of text, json", c.LogFormat)
	}
	if c.StateSaveInterval.Duration < 0 {
		return keyErr("state_save_interval", "cannot be negative (\"0s\" means save only on stop)")
	}
	if c.Cache.Size <= 0 {
		return keyErr("cache.size", "must be at least 1 (got %d)", c.Cache.Size)
	}
	if c.Cache.MinTTL.Duration < 0 || c.Cache.MaxTTL.Duration < 0 {
		return keyErr("cache.min_ttl", "TTL clamps cannot be negative")
	}
	if c.Cache.MaxTTL.Duration > 0 && c.Cache.MinTTL.Duration > c.Cache.MaxTTL.Duration {
		return keyErr("cache.min_ttl", "%v is above cache.max_ttl %v", c.Cache.MinTTL, c.Cache.MaxTTL)
	}
	s := c.ServeStale
	if s.ClientTimeout.Duration < 0 {
		return keyErr("serve_stale.client_timeout", "cannot be negative (\"0s\" means answer stale at once)")
	}
	if s.MaxAge.Duration < 0 {
		return keyErr("serve_stale.max_age", "cannot be negative")
	}
	if s.AnswerTTL.Duration < time.Second {
		return keyErr("serve_stale.answer_ttl", "must be at least 1s (got %v)", s.AnswerTTL)
	}
	if s.FailureRecheck.Duration < 0 {
		return keyErr("serve_stale.failure_recheck", "cannot be negative")
	}
	u := c.Upstream
	if u.Timeout.Duration <= 0 {
		return keyErr("upstream.timeout", "must be positive (got %v)", u.Timeout)
	}
	if u.MaxInflight <= 0 {
		return keyErr("upstream.max_inflight", "must be at least 1 (got %d)", u.MaxInflight)
	}
	if u.MaxAttempts <= 0 {
		return keyErr("upstream.max_attempts", "must be at least 1 (got %d)", u.MaxAttempts)
	}
	if u.FailThreshold <= 0 {
		return keyErr("upstream.fail_threshold", "must be at least 1 (got %d)", u.FailThreshold)
	}
	if u.MinAttemptTimeout.Duration <= 0 || u.MinAttemptTimeout.Duration > u.Timeout.Duration {
		return keyErr("upstream.min_attempt_timeout", "must be positive and at most upstream.timeout (got %v)", u.MinAttemptTimeout)
	}
	if err := c.Admin.validate(); err != nil {
		return err
	}
	if err := c.Consul.validate(); err != nil {
		return err
	}
	seen := map[string]bool{}
	for i, z := range c.Zones {
		key := fmt.Sprintf("zone[%d].name", i)
		if _, ok := dns.IsDomainName(z.Name); !ok || z.Name == "" {
			return keyErr(key, "%q is not a domain name", z.Name)
		}
		name := dns.CanonicalName(z.Name)
		if seen[name] {
			return keyErr(key, "zone %q is configured twice", name)
		}
		seen[name] = true
		if len(z.Servers) == 0 && name != "." {
			return keyErr(fmt.Sprintf("zone[%d].servers", i), "zone %q needs at least one server", name)
		}
		for j, srv := range z.Servers {
			if _, err := upstream.NormalizeAddress(srv); err != nil {
				return keyErr(fmt.Sprintf("zone[%d].servers[%d]", i, j), "%v", err)
			}
		}
	}
	return nil
}

// zones returns the configured zones merged over the defaults by name, with
// the system's nameservers filled in for "." when it lists none, and
// towerd's own listen addresses left out so it never forwards to itself.
func (c *Config) zones(root string) ([]ZoneConfig, string, error) {
	byName := map[string]ZoneConfig{}
	var order []string
	for _, z := range append(append([]ZoneConfig(nil), defaultZones...), c.Zones...) {
		name := dns.CanonicalName(z.Name)
		if _, ok := byName[name]; !ok {
			order = append(order, name)
		}
		byName[name] = ZoneConfig{Name: name, Servers: z.Servers}
	}
	var source string
	out := make([]ZoneConfig, 0, len(order))
	for _, name := range order {
		z := byName[name]
		servers := z.Servers
		if len(servers) == 0 && name == "." {
			rc, path, err := readResolvConf(root, c.ResolvConf)
			if err != nil {
				return nil, "", &ConfigError{Key: "zone[.].servers",
					Msg: fmt.Sprintf("no servers configured and the system's cannot be read: %v", err)}
			}
			servers, source = rc.Nameservers, path
		}
		normalized := make([]string, 0, len(servers))
		for _, s := range servers {
			n, err := upstream.NormalizeAddress(s)
			if err != nil {
				return nil, "", keyErr("zone["+name+"].servers", "%v", err)
			}
			normalized = append(normalized, n)
		}
		kept := resolvconf.WithoutAddresses(normalized, c.Listen)
		if len(kept) == 0 {
			msg := fmt.Sprintf("zone %q has no server left once towerd's own listen addresses %v are left out (forwarding to itself would loop)", name, c.Listen)
			if source != "" && name == "." {
				msg += "; " + source + " names only towerd: set servers for zone \".\" or resolv_conf"
			}
			return nil, "", keyErr("zone["+name+"].servers", "%s", msg)
		}
		out = append(out, ZoneConfig{Name: name, Servers: kept})
	}
	return out, source, nil
}

// readResolvConf reads the file named by the resolv_conf key, or the system's.
func readResolvConf(root, path string) (resolvconf.Conf, string, error) {
	if path == "" {
		return resolvconf.ReadSystem(root)
	}
	f, err := os.Open(path)
	if err != nil {
		return resolvconf.Conf{}, path, err
	}
	defer f.Close()
	rc, err := resolvconf.Parse(f)
	return rc, path, err
}
