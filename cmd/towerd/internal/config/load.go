package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
	"github.com/pelletier/go-toml/v2"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/cmd/towerd/internal/resolvconf"
	"github.com/towerd/towerd/resolver/boundedfile"
	"github.com/towerd/towerd/upstream"
)

// Error is a configuration problem tied to a key and, when known, a line.
type Error struct {
	File string
	Line int
	Key  string
	Msg  string
}

// Error formats "file:line: key \"k\": msg", leaving out what is unknown.
func (e *Error) Error() string {
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

// MaxFileSize is the most bytes the config file and each drop-in may
// have: the sample with every key and its comments is under 20 KiB, and
// an import of a dnsmasq config with many local records a few hundred.
const MaxFileSize = 1 << 20

// maxHedgeBudget bounds upstream.hedge_budget.
const maxHedgeBudget = 0.25

// fileRule is how the config file and its drop-ins are read (issue 21): a
// regular file up to MaxFileSize, opened without blocking, so neither
// towerd's start, a reload nor `towerd check` can hang on a FIFO in their
// place. Symlinks are followed: configuration managers link them.
var fileRule = boundedfile.Rule{MaxSize: MaxFileSize}

// Load reads path over the defaults, then its drop-ins (DropIns) over
// it. A missing file is fine when optional (the default path): towerd then
// runs on built-in defaults and the drop-ins. A file that is not a regular
// file, or is larger than MaxFileSize, is an error naming it.
func Load(path string, optional bool) (Config, error) {
	cfg := DefaultConfig()
	if path == "" {
		return cfg, nil
	}
	data, err := boundedfile.ReadFile(path, fileRule)
	switch {
	case errors.Is(err, os.ErrNotExist) && optional:
		data = nil
	case errors.Is(err, os.ErrNotExist):
		return cfg, fmt.Errorf("config file %s does not exist (a file named with -config must exist; without -config towerd reads %s if it is there, else uses built-in defaults)", path, DefaultPath)
	case err != nil:
		return cfg, fmt.Errorf("reading config: %w", err)
	}
	files := []Source{{path, data}}
	if data == nil {
		files = nil
	}
	dropIns, err := DropIns(path)
	if err != nil {
		return cfg, err
	}
	for _, p := range dropIns {
		d, err := boundedfile.ReadFile(p, fileRule)
		if err != nil {
			return cfg, fmt.Errorf("reading config: %w", err)
		}
		files = append(files, Source{p, d})
	}
	if cfg, err = Parse(files); err != nil {
		return cfg, err
	}
	if p, ok := ExpandCredentials(cfg.Consul.TokenFile); ok {
		cfg.Consul.TokenFile = p
	}
	err = cfg.Validate()
	if err == nil {
		err = cfg.Consul.checkFiles()
	}
	return cfg, Attribute(err, files, path)
}

// Source is one file of the configuration: the config file or a drop-in,
// with the path its errors name.
type Source struct {
	Path string
	Data []byte
}

// Parse decodes files over the defaults in order (the config file, then
// its drop-ins), as Load does once it has read them. It does not validate:
// towerd doctor, which reads the files of a node under a root itself, runs
// Validate and Attribute as Load does.
func Parse(files []Source) (Config, error) {
	cfg := DefaultConfig()
	for _, f := range files {
		if err := decodeOver(f, &cfg); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// Attribute places a validation error (*Error): an error about a zone of
// the merged configuration in the file that set that zone, with its index
// among that file's zones; any other in the last of files that sets its
// key, else the last that sets what holds it (the [[zone]] header of a
// zone without servers, the [cache] header of a key left at its default),
// else in the config file main without a line. It sets the file, the
// line of the value at fault and the key's full path; other errors, and
// nil, are returned as they are.
func Attribute(err error, files []Source, main string) error {
	var ce *Error
	if !errors.As(err, &ce) || placeZoneError(ce, files) { // positions.go
		return err
	}
	spans := make([][]keySpan, len(files))
	for key := ce.Key; key != ""; key = enclosing(key) {
		for i, f := range slices.Backward(files) {
			if spans[i] == nil {
				spans[i] = scanKeys(f.Data)
			}
			if line := lineOf(spans[i], key); line > 0 {
				ce.File, ce.Line = f.Path, line
				return err
			}
		}
	}
	if slices.ContainsFunc(files, func(f Source) bool { return f.Path == main }) {
		ce.File = main
	}
	return err
}

// DropInDirName is the directory of drop-ins beside the config file:
// /etc/towerd/towerd.d for /etc/towerd/towerd.toml.
const DropInDirName = "towerd.d"

// DropIns lists the drop-ins of the config file at path: the *.toml files
// of towerd.d beside it, in name order (as systemd and sshd order theirs),
// each read over the file and the ones before it. `towerd install` puts
// what it decided for the node in towerd.d/00-install.toml when towerd.toml
// is the package's sample, so the conffile stays dpkg's. A missing
// directory has none.
func DropIns(path string) ([]string, error) {
	dir := filepath.Join(filepath.Dir(path), DropInDirName)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading config drop-ins: %w", err)
	}
	var out []string
	for _, e := range entries { // ReadDir sorts by name
		if strings.HasSuffix(e.Name(), ".toml") && !strings.HasPrefix(e.Name(), ".") && !e.IsDir() {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out, nil
}

// decodeOver reads one file over cfg. A key it sets replaces the value so
// far; its zones merge by name, as they merge over the defaults: a zone it
// names replaces that zone, the others stay.
func decodeOver(f Source, cfg *Config) error {
	zones := cfg.Zones
	cfg.Zones = nil
	if err := Decode(f.Data, f.Path, cfg); err != nil {
		return err
	}
	cfg.Zones, _ = mergeZones(zones, cfg.Zones)
	return nil
}

// mergeZones merges a file's zones over those so far by name and says
// where each of the file's zones went in the result. A zone named twice in
// one file stays twice, for Validate to refuse.
func mergeZones(zones, file []ZoneConfig) (merged []ZoneConfig, at []int) {
	merged, replaced := slices.Clone(zones), map[int]bool{}
	for _, z := range file {
		i := slices.IndexFunc(zones, func(m ZoneConfig) bool { return dns.CanonicalName(m.Name) == dns.CanonicalName(z.Name) })
		if i >= 0 && !replaced[i] {
			merged[i], replaced[i] = z, true
		} else {
			i = len(merged)
			merged = append(merged, z)
		}
		at = append(at, i)
	}
	return merged, at
}

// Decode reads TOML data over cfg, rejecting unknown keys; path only names
// the source in errors. It does not validate: callers run Validate.
func Decode(data []byte, path string, cfg *Config) error {
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(cfg)
	if err == nil {
		return nil
	}
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) && len(strict.Errors) > 0 {
		e := strict.Errors[0]
		line, col := e.Position()
		return &Error{File: path, Line: line, Key: fullKey(data, line, col, strings.Join(e.Key(), ".")), // positions.go
			Msg: "unknown key (every key: towerd.toml(5), docs/configuration.md)"}
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		line, col := de.Position()
		return &Error{File: path, Line: line, Key: fullKey(data, line, col, strings.Join(de.Key(), ".")),
			Msg: friendlyDecodeMsg(strings.TrimPrefix(de.Error(), "toml: "), data, line, col)}
	}
	if m := notADuration.FindStringSubmatch(err.Error()); m != nil {
		// A bare number for a duration: the decoder gives no place.
		key, line := locateBareDuration(data, m[1])
		return &Error{File: path, Line: line, Key: key,
			Msg: fmt.Sprintf(`want a duration string such as "30s", got %s (a duration is quoted and has a unit)`, m[1])}
	}
	return &Error{File: path, Msg: err.Error()}
}

func keyErr(key, format string, args ...any) error {
	return &Error{Key: key, Msg: fmt.Sprintf(format, args...)}
}

// Validate checks every value once, at start-up or reload, with messages that
// name the key.
func (c *Config) Validate() error {
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
	if c.MaxUDPSize < 512 || c.MaxUDPSize > 65535 {
		return keyErr("max_udp_size", "must be between 512 and 65535 bytes (got %d)", c.MaxUDPSize)
	}
	if c.UDPReceiveBuffer < 0 || c.UDPReceiveBuffer > 1<<30 {
		return keyErr("udp_receive_buffer", "must be between 0 (the system's default) and 1GiB (got %v)", c.UDPReceiveBuffer)
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
	if c.LogQueriesRate < 1 {
		return keyErr("log_queries_rate", "must be at least 1 line a second (got %d)", c.LogQueriesRate)
	}
	if c.StateSaveInterval.Duration < 0 {
		return keyErr("state_save_interval", "cannot be negative (\"0s\" means save only on stop)")
	}
	if c.Cache.Size <= 0 {
		return keyErr("cache.size", "must be at least 1 (got %d)", c.Cache.Size)
	}
	// 1 MiB holds a few of the largest answers (64 KiB); below it one such
	// answer would push out most of the cache.
	if c.Cache.MaxBytes < 1<<20 || c.Cache.MaxBytes > cache.MaxBytesLimit {
		return keyErr("cache.max_bytes", "must be between 1MiB and %s (got %v)", ByteSize(cache.MaxBytesLimit), c.Cache.MaxBytes)
	}
	if c.Cache.MinTTL.Duration < 0 || c.Cache.MaxTTL.Duration < 0 {
		return keyErr("cache.min_ttl", "TTL clamps cannot be negative")
	}
	if c.Cache.MaxTTL.Duration > 0 && c.Cache.MinTTL.Duration > c.Cache.MaxTTL.Duration {
		return keyErr("cache.min_ttl", "%v is above cache.max_ttl %v", c.Cache.MinTTL, c.Cache.MaxTTL)
	}
	if d := c.Cache.NoDataWithoutSOATTL.Duration; d < 0 || d > time.Hour || d%time.Second != 0 {
		return keyErr("cache.nodata_without_soa_ttl", "must be whole seconds between 0s and 1h (got %v)", c.Cache.NoDataWithoutSOATTL)
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
	// Written so NaN fails too. Above a quarter a hedge is no longer a
	// hedge but racing every query, which a site's resolvers pay for.
	if !(u.HedgeBudget >= 0 && u.HedgeBudget <= maxHedgeBudget) {
		return keyErr("upstream.hedge_budget", "must be between 0 and %g (got %g)", maxHedgeBudget, u.HedgeBudget)
	}
	if err := c.TCP.validate(); err != nil {
		return err
	}
	if err := c.Search.validate(); err != nil {
		return err
	}
	if err := c.Admin.validate(); err != nil {
		return err
	}
	if err := c.Dnstap.validate(); err != nil {
		return err
	}
	if err := c.Control.validate(); err != nil {
		return err
	}
	if err := c.Consul.validate(); err != nil {
		return err
	}
	if err := c.Local.validate(); err != nil {
		return err
	}
	if err := c.DNSSEC.validate(); err != nil {
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
		if z.ProbeName != "" {
			if _, ok := dns.IsDomainName(z.ProbeName); !ok {
				return keyErr(fmt.Sprintf("zone[%d].probe_name", i), "%q is not a domain name", z.ProbeName)
			}
		}
		for j, srv := range z.Servers {
			if err := checkServer(srv); err != nil {
				return keyErr(fmt.Sprintf("zone[%d].servers[%d]", i, j), "%v", err)
			}
		}
		if _, err := z.TLSRoots(); err != nil {
			return keyErr(fmt.Sprintf("zone[%d].tls_ca_file", i), "%v", err)
		}
	}
	return nil
}

// ForwardZones returns the configured zones merged over the defaults by name, with
// the system's nameservers filled in for "." when it lists none, and
// towerd's own listen addresses left out so it never forwards to itself.
// root is the directory that stands for / when reading resolv.conf; source
// names the file zone "." took its servers from, "" when configured. When
// that file does not exist, "." is returned without servers (and source
// still names the file): the daemon follows the file and waits for it.
func (c *Config) ForwardZones(root string) ([]ZoneConfig, string, error) {
	var source string
	zones := c.MergedZones()
	out := make([]ZoneConfig, 0, len(zones))
	for _, z := range zones {
		name := z.Name
		servers := z.Servers
		if len(servers) == 0 && name == "." {
			rc, path, err := readResolvConf(root, c.ResolvConf)
			var refused *boundedfile.RefusedError
			if errors.Is(err, fs.ErrNotExist) || errors.As(err, &refused) {
				// The followed file may appear only once its manager runs
				// (a DHCP client before its first lease, resolved before it
				// starts): "." starts without servers and the daemon picks
				// them up when the file appears (issue 14). A file in its
				// place that is not one (a FIFO, a device, too large: issue
				// 21) is the same wait, not a node without DNS for its other
				// zones; the daemon logs why.
				source = path
				out = append(out, ZoneConfig{Name: name})
				continue
			}
			if err != nil {
				return nil, "", &Error{Key: "zone[.].servers",
					Msg: fmt.Sprintf("no servers configured and the system's cannot be read: %v", err)}
			}
			servers, source = rc.Nameservers, path
		}
		normalized := make([]string, 0, len(servers))
		for _, s := range servers {
			n, err := upstream.NormalizeServer(s)
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
		out = append(out, ZoneConfig{Name: name, Servers: kept, ProbeName: z.ProbeName, TLSCAFile: z.TLSCAFile})
	}
	return out, source, nil
}

// MergedZones are the configured zones merged over the defaults by name
// (canonical names, the defaults' order first), as written: zone "."
// without servers stays without, and nothing is left out or normalized.
func (c *Config) MergedZones() []ZoneConfig {
	byName := map[string]ZoneConfig{}
	var order []string
	for _, z := range append(append([]ZoneConfig(nil), defaultZones...), c.Zones...) {
		name := dns.CanonicalName(z.Name)
		if _, ok := byName[name]; !ok {
			order = append(order, name)
		}
		byName[name] = ZoneConfig{Name: name, Servers: z.Servers, ProbeName: z.ProbeName, TLSCAFile: z.TLSCAFile}
	}
	out := make([]ZoneConfig, 0, len(order))
	for _, name := range order {
		out = append(out, byName[name])
	}
	return out
}

// readResolvConf reads the file named by the resolv_conf key, or the system's.
func readResolvConf(root, path string) (resolvconf.Conf, string, error) {
	if path == "" {
		return readSystemResolvConf(root) // systemresolv.go
	}
	data, err := resolvconf.ReadFile(path)
	if err != nil {
		return resolvconf.Conf{}, path, err
	}
	rc, err := resolvconf.Parse(bytes.NewReader(data))
	return rc, path, err
}

func (t TCPConfig) validate() error {
	if t.MaxConnections < 1 {
		return keyErr("tcp.max_connections", "must be at least 1 (got %d)", t.MaxConnections)
	}
	for _, k := range []struct {
		key string
		d   Duration
	}{{"tcp.idle_timeout", t.IdleTimeout}, {"tcp.read_timeout", t.ReadTimeout}, {"tcp.write_timeout", t.WriteTimeout}} {
		if k.d.Duration <= 0 {
			return keyErr(k.key, "must be positive (got %v)", k.d)
		}
	}
	return nil
}

func (a AdminConfig) validate() error {
	if a.MaxConnections < 1 {
		return keyErr("admin.max_connections", "must be at least 1 (got %d)", a.MaxConnections)
	}
	if a.Listen == "" {
		return nil
	}
	ap, err := netip.ParseAddrPort(a.Listen)
	if err != nil {
		return keyErr("admin.listen", "%q is not ip:port (e.g. %q; \"\" turns the admin server off)", a.Listen, DefaultAdminListen)
	}
	if !ap.Addr().Unmap().IsLoopback() && !a.AllowNonLoopback {
		return keyErr("admin.listen", "%s is not a loopback address; the admin server has no authentication "+
			"and shows the node's figures: set admin.allow_non_loopback = true to serve it there anyway", a.Listen)
	}
	return nil
}
