package config

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/towerd/towerd/test/dnstest"
)

func TestLoadConfigErrorsNameKeyAndLine(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		{"unknown key", "listen = [\"127.0.0.1:53\"]\n[cache]\nsize = 5\nsise = 7\n", `towerd.toml:4: key "cache.sise": unknown key`},
		{"unknown table", "[cahce]\nsize = 5\n", `key "cahce`},
		{"wrong type", "[cache]\nsize = \"many\"\n", `towerd.toml:2: key "cache.size"`},
		{"bad duration", "[serve_stale]\nmax_age = \"forever\"\n", `towerd.toml:2: key "serve_stale.max_age": "forever" is not a duration`},
		{"zero size", "\n[cache]\nsize = 0\n", `towerd.toml:3: key "cache.size": must be at least 1`},
		{"max_bytes below 1MiB", "[cache]\nmax_bytes = \"512KiB\"\n", `towerd.toml:2: key "cache.max_bytes": must be between 1MiB and 1GiB (got 512KiB)`},
		{"max_bytes over 1GiB", "[cache]\nmax_bytes = 2147483648\n", `key "cache.max_bytes": must be between 1MiB and 1GiB (got 2GiB)`},
		{"max_bytes not a size", "[cache]\nmax_bytes = \"16 megs\"\n", `towerd.toml:2: key "cache.max_bytes": "16 megs" is not a size`},
		{"bad listen", "listen = [\"localhost\"]\n", `towerd.toml:1: key "listen[0]"`},
		{"bad allow", "allow = [\"everyone\"]\n", `key "allow[0]"`},
		{"min over max", "[cache]\nmin_ttl = \"2h\"\nmax_ttl = \"1h\"\n", `key "cache.min_ttl"`},
		{"zone without servers", "[[zone]]\nname = \"corp.example.\"\n", `key "zone[0].servers"`},
		{"bad server", "[[zone]]\nname = \"corp.\"\nservers = [\"not an address\"]\n", `key "zone[0].servers[0]"`},
		{"bad probe name", "[[zone]]\nname = \"corp.\"\nservers = [\"192.0.2.1\"]\nprobe_name = \"a..b\"\n", `towerd.toml:4: key "zone[0].probe_name"`},
		{"bad level", "log_level = \"loud\"\n", `towerd.toml:1: key "log_level"`},
		{"negative save interval", "state_dir = \"\"\nstate_save_interval = \"-1m\"\n", `towerd.toml:2: key "state_save_interval": cannot be negative`},
		{"attempt floor over budget", "[upstream]\ntimeout = \"1s\"\nmin_attempt_timeout = \"2s\"\n", `towerd.toml:3: key "upstream.min_attempt_timeout"`},
		{"hedge budget racing", "[upstream]\nhedge_budget = 0.5\n", `key "upstream.hedge_budget"`},
		{"hedge budget negative", "[upstream]\nhedge_budget = -0.1\n", `key "upstream.hedge_budget"`},
		{"hedge budget nan", "[upstream]\nhedge_budget = nan\n", `key "upstream.hedge_budget"`},
		{"udp size too small", "max_udp_size = 100\n", `towerd.toml:1: key "max_udp_size": must be between 512 and 65535`},
		{"udp size too large", "\nmax_udp_size = 70000\n", `towerd.toml:2: key "max_udp_size"`},
		{"no tcp connections", "[tcp]\nmax_connections = 0\n", `towerd.toml:2: key "tcp.max_connections": must be at least 1`},
		{"zero tcp write timeout", "[tcp]\nidle_timeout = \"5s\"\nwrite_timeout = \"0s\"\n", `towerd.toml:3: key "tcp.write_timeout": must be positive`},
		{"unknown tcp key", "[tcp]\nmax_conns = 5\n", `towerd.toml:2: key "tcp.max_conns": unknown key`},
		{"search hold too long", "[search]\nhold = \"10s\"\n", `towerd.toml:2: key "search.hold": must be between 0s and 5s`},
		{"search list without domains", "[[search.list]]\nndots = 5\n", `key "search.list[0].domains": needs at least one domain`},
		{"bad search domain", "[[search.list]]\ndomains = [\"corp example\"]\n", `key "search.list[0]": search list: "corp example" is not a domain name`},
		{"search ndots too high", "[[search.list]]\ndomains = [\"svc.cluster.local\"]\nndots = 16\n", `key "search.list[0]": search list: ndots 16`},
		{"syntax", "[cache\n", `towerd.toml:1:`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := dnstest.WriteFile(t, "towerd.toml", tc.body)
			_, err := Load(path, false)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestLoadConfigDefaultsAndOverrides(t *testing.T) {
	cfg, err := Load(filepath.Join(t.TempDir(), "absent.toml"), true)
	if err != nil {
		t.Fatalf("missing optional file: %v", err)
	}
	if cfg.Cache.Size != 10000 || cfg.ServeStale.AnswerTTL.Duration != 30*time.Second ||
		cfg.Upstream.MaxInflight != 150 || cfg.Listen[0] != "127.0.0.1:53" ||
		cfg.StateSaveInterval.Duration != 5*time.Minute {
		t.Fatalf("defaults wrong: %+v", cfg)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "absent.toml"), false); err == nil {
		t.Fatal("missing file named on the command line accepted")
	}
	path := dnstest.WriteFile(t, "t.toml", "[cache]\nsize = 42\n[serve_stale]\nclient_timeout = \"0s\"\n")
	cfg, err = Load(path, false)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Cache.Size != 42 || cfg.ServeStale.ClientTimeout.Duration != 0 || cfg.ServeStale.MaxAge.Duration != 24*time.Hour {
		t.Fatalf("file not merged over defaults: %+v", cfg)
	}
}

func TestZonesMergeAndAvoidLoops(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	resolv := "nameserver 127.0.0.1\nnameserver 192.0.2.53\nsearch corp.example\n"
	if err := os.WriteFile(filepath.Join(root, "etc/resolv.conf"), []byte(resolv), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Zones = []ZoneConfig{{Name: "Corp.Example", Servers: []string{"192.0.2.10"}, ProbeName: "corp.example."}}
	zones, source, err := cfg.ForwardZones(root)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	probes := map[string]string{}
	for _, z := range zones {
		got[z.Name] = strings.Join(z.Servers, ",")
		probes[z.Name] = z.ProbeName
	}
	if probes["corp.example."] != "corp.example." || probes["."] != "" {
		t.Errorf("probe names = %v, want corp.example.'s kept and none for \".\"", probes)
	}
	want := map[string]string{
		"consul.":       "127.0.0.1:8600",
		".":             "192.0.2.53:53", // 127.0.0.1:53 is towerd itself
		"corp.example.": "192.0.2.10:53",
	}
	for name, servers := range want {
		if got[name] != servers {
			t.Errorf("zone %s = %q, want %q", name, got[name], servers)
		}
	}
	if source != filepath.Join(root, "etc/resolv.conf") {
		t.Errorf("source = %q", source)
	}

	// A resolv.conf that names only towerd leaves "." with nothing: refuse.
	if err := os.WriteFile(filepath.Join(root, "etc/resolv.conf"), []byte("nameserver 127.0.0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Zones = nil
	if _, _, err := cfg.ForwardZones(root); err == nil || !strings.Contains(err.Error(), "loop") {
		t.Fatalf("self-only upstream accepted: %v", err)
	}
}

// A followed resolv.conf that does not exist yet (its DHCP client has not
// run) leaves "." without servers instead of failing, and names the file
// the daemon is to wait for (issue 14), and so does a file that is not
// one (issue 21). A file that cannot be read for another reason still
// fails.
func TestZonesMissingResolvConf(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.ResolvConf = filepath.Join(dir, "later/resolv.conf")
	zones, source, err := cfg.ForwardZones("/")
	if err != nil {
		t.Fatalf("missing resolv_conf: %v", err)
	}
	if source != cfg.ResolvConf {
		t.Errorf("source = %q, want %q", source, cfg.ResolvConf)
	}
	found := false
	for _, z := range zones {
		if z.Name == "." {
			found = true
			if len(z.Servers) != 0 {
				t.Errorf("zone . servers %v, want none", z.Servers)
			}
		}
	}
	if !found {
		t.Error("no zone .")
	}

	// What is not a resolv.conf (issue 21: a FIFO, a device, a directory)
	// is waited for like a missing file; the daemon logs why.
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, fifo, "/dev/zero"} {
		cfg.ResolvConf = p
		if zones, source, err := cfg.ForwardZones("/"); err != nil || source != p || len(zones[len(zones)-1].Servers) != 0 {
			t.Errorf("resolv_conf %s: %v, %q, %v; want zone . waiting for it", p, zones, source, err)
		}
	}

	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.ResolvConf = filepath.Join(file, "resolv.conf") // ENOTDIR: cannot be read
	if _, _, err := cfg.ForwardZones("/"); err == nil || !strings.Contains(err.Error(), "zone[.].servers") {
		t.Errorf("unreadable resolv_conf: %v, want an error naming zone[.].servers", err)
	}
}

func TestConsulConfig(t *testing.T) {
	cfg, err := Load("", true)
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Consul; !c.Enabled || c.Address != "" || c.AnswerTTL.Duration != 0 || len(c.Services) != 0 ||
		c.MaxWatches != 64 || c.IdleTimeout.Duration != 30*time.Minute {
		t.Errorf("default [consul] %+v: want enabled, address from the environment, TTL 0, none pinned, 64 watches, 30m idle", c)
	}

	token := dnstest.WriteFile(t, "token", "secret\n")
	path := dnstest.WriteFile(t, "towerd.toml", `
[consul]
address    = "127.0.0.1:8501"
scheme     = "https"
token_file = "`+token+`"
datacenter = "dc2"
services   = ["web", "db"]
tags       = ["dns"]
answer_ttl = "5s"
max_watches = 20
idle_timeout = "10m"
`)
	cfg, err = Load(path, false)
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Consul; c.Address != "127.0.0.1:8501" || c.Scheme != "https" || c.TokenFile != token ||
		c.Datacenter != "dc2" || len(c.Services) != 2 || c.Tags[0] != "dns" || c.AnswerTTL.Duration != 5*time.Second ||
		c.MaxWatches != 20 || c.IdleTimeout.Duration != 10*time.Minute {
		t.Errorf("[consul] read as %+v", c)
	}

	for _, tc := range []struct{ name, body, want string }{
		{"scheme", "[consul]\nscheme = \"ftp\"\n", `towerd.toml:2: key "consul.scheme"`},
		{"both tokens", "[consul]\ntoken = \"a\"\ntoken_file = \"" + token + "\"\n", `key "consul.token_file": set consul.token or consul.token_file, not both`},
		{"token file", "[consul]\ntoken_file = \"/nonexistent/token\"\n", `key "consul.token_file": cannot be read`},
		{"ca file", "[consul]\ntls_ca_file = \"/nonexistent/ca.pem\"\n", `key "consul.tls_ca_file": cannot be read`},
		{"fractional ttl", "[consul]\nanswer_ttl = \"1.5s\"\n", `key "consul.answer_ttl": DNS TTLs are whole seconds`},
		{"negative ttl", "[consul]\nanswer_ttl = \"-1s\"\n", `key "consul.answer_ttl"`},
		{"empty service", "[consul]\nservices = [\"web\", \" \"]\n", `key "consul.services[1]"`},
		{"unknown key", "[consul]\nadress = \"x\"\n", `key "consul.adress": unknown key`},
		{"max_watches 0", "[consul]\nmax_watches = 0\n", `key "consul.max_watches": must be between 1 and 150`},
		{"max_watches past the agent's limit", "[consul]\nmax_watches = 190\n", `key "consul.max_watches"`},
		{"more pins than watches", "[consul]\nmax_watches = 1\nservices = [\"a\", \"b\"]\n", `key "consul.services": 2 pinned services exceed`},
		{"star with others", "[consul]\nservices = [\"*\", \"web\"]\n", `key "consul.services[0]": "*"`},
		{"idle_timeout", "[consul]\nidle_timeout = \"10ms\"\n", `key "consul.idle_timeout": must be at least 1s`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(dnstest.WriteFile(t, "towerd.toml", tc.body), false)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}

	// A disabled watch is not validated: its keys may wait for later.
	if _, err := Load(dnstest.WriteFile(t, "towerd.toml", "[consul]\nenabled = false\nscheme = \"ftp\"\n"), false); err != nil {
		t.Errorf("disabled watch: %v", err)
	}
}

func TestAdminListenMustBeLoopback(t *testing.T) {
	for _, tc := range []struct {
		name    string
		admin   AdminConfig
		wantErr string // "" = valid
	}{
		{"default", AdminConfig{Listen: DefaultAdminListen}, ""},
		{"off", AdminConfig{Listen: ""}, ""},
		{"ipv6 loopback", AdminConfig{Listen: "[::1]:9253"}, ""},
		{"port 0", AdminConfig{Listen: "127.0.0.1:0"}, ""},
		{"all interfaces", AdminConfig{Listen: "0.0.0.0:9253"}, "not a loopback address"},
		{"public", AdminConfig{Listen: "192.0.2.7:9253"}, "admin.allow_non_loopback"},
		{"public, allowed", AdminConfig{Listen: "192.0.2.7:9253", AllowNonLoopback: true}, ""},
		{"host name", AdminConfig{Listen: "localhost:9253"}, "is not ip:port"},
		{"no port", AdminConfig{Listen: "127.0.0.1"}, "is not ip:port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.admin.MaxConnections = cfg.Admin.MaxConnections
			cfg.Admin = tc.admin
			err := cfg.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), `key "admin.listen"`) {
				t.Fatalf("error %v, want one naming admin.listen and containing %q", err, tc.wantErr)
			}
		})
	}
}

// The error points at the [admin] table's listen line, not the top-level one.
func TestAdminErrorNamesLineInTable(t *testing.T) {
	path := dnstest.WriteFile(t, "towerd.toml", "listen = [\"127.0.0.1:53\"]\n\n[cache]\nsize = 100\n\n[admin]\nlisten = \"0.0.0.0:9253\"\n")
	_, err := Load(path, false)
	if err == nil || !strings.Contains(err.Error(), `towerd.toml:7: key "admin.listen"`) {
		t.Fatalf("error %v, want it at towerd.toml:7", err)
	}
}

// max_udp_size and [tcp] are read from the file (issue 13); before, a file
// setting max_udp_size failed as an unknown key.
func TestLoadSizeAndTCPKeys(t *testing.T) {
	def := DefaultConfig()
	if def.MaxUDPSize != 1232 || def.TCP.MaxConnections != 256 || def.TCP.IdleTimeout.Duration != 10*time.Second ||
		def.TCP.ReadTimeout.Duration != 2*time.Second || def.TCP.WriteTimeout.Duration != 2*time.Second {
		t.Fatalf("defaults: max_udp_size %d, tcp %+v", def.MaxUDPSize, def.TCP)
	}
	path := dnstest.WriteFile(t, "towerd.toml", "max_udp_size = 4096\n[tcp]\nmax_connections = 32\nidle_timeout = \"3s\"\nread_timeout = \"500ms\"\nwrite_timeout = \"1s\"\n")
	cfg, err := Load(path, false)
	if err != nil {
		t.Fatal(err)
	}
	want := TCPConfig{MaxConnections: 32, IdleTimeout: Dur(3 * time.Second), ReadTimeout: Dur(500 * time.Millisecond), WriteTimeout: Dur(time.Second)}
	if cfg.MaxUDPSize != 4096 || cfg.TCP != want {
		t.Fatalf("loaded max_udp_size %d, tcp %+v; want 4096, %+v", cfg.MaxUDPSize, cfg.TCP, want)
	}
}

// cache.max_bytes takes bytes as an integer or with a binary unit.
func TestCacheMaxBytes(t *testing.T) {
	if got := DefaultConfig().Cache.MaxBytes; got != 16<<20 {
		t.Errorf("default cache.max_bytes = %v, want 16MiB", got)
	}
	for _, tt := range []struct {
		value string
		want  ByteSize
	}{{"33554432", 32 << 20}, {`"32MiB"`, 32 << 20}, {`"1536KiB"`, 1536 << 10}, {`"1GiB"`, 1 << 30}, {`"2000000B"`, 2000000}} {
		cfg, err := Load(dnstest.WriteFile(t, "towerd.toml", "[cache]\nmax_bytes = "+tt.value+"\n"), false)
		if err != nil || cfg.Cache.MaxBytes != tt.want {
			t.Errorf("max_bytes = %s: %v, %v; want %d", tt.value, cfg.Cache.MaxBytes, err, tt.want)
		}
	}
	if s := ByteSize(1536 << 10).String(); s != "1536KiB" {
		t.Errorf("String = %q", s)
	}
}

// consul.token_file may name ${CREDENTIALS_DIRECTORY}, which systemd sets
// inside towerd.service for LoadCredential= (issue 14): expanded there,
// and outside the service (towerd check by hand) not read but noted. No
// other variable is expanded.
func TestTokenFileInCredentialsDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "consul-token"), []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(t.TempDir(), "towerd.toml")
	if err := os.WriteFile(cfgPath, []byte("[consul]\ntoken_file = \"${CREDENTIALS_DIRECTORY}/consul-token\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	t.Setenv("CREDENTIALS_DIRECTORY", "")
	cfg, err := Load(cfgPath, false)
	if err != nil {
		t.Fatalf("outside the service: %v", err)
	}
	if cfg.Consul.TokenFile != "${CREDENTIALS_DIRECTORY}/consul-token" ||
		!strings.Contains(cfg.Consul.CredentialsNote(), "read inside towerd.service only") {
		t.Errorf("outside the service: token_file %q, note %q", cfg.Consul.TokenFile, cfg.Consul.CredentialsNote())
	}

	t.Setenv("CREDENTIALS_DIRECTORY", dir)
	cfg, err = Load(cfgPath, false)
	if err != nil {
		t.Fatalf("inside the service: %v", err)
	}
	if cfg.Consul.TokenFile != filepath.Join(dir, "consul-token") || cfg.Consul.CredentialsNote() != "" {
		t.Errorf("inside the service: token_file %q, note %q", cfg.Consul.TokenFile, cfg.Consul.CredentialsNote())
	}
	// Inside the service a missing credential is an error like any file.
	if err := os.Remove(filepath.Join(dir, "consul-token")); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(cfgPath, false); err == nil || !strings.Contains(err.Error(), "consul.token_file") {
		t.Errorf("missing credential: %v", err)
	}

	t.Setenv("HOME", dir)
	if got, ok := ExpandCredentials("$HOME/token"); !ok || got != "$HOME/token" {
		t.Errorf("ExpandCredentials expanded another variable: %q", got)
	}
}

// Changed names the keys a reload changes, as the file spells them.
func TestChangedKeys(t *testing.T) {
	a := DefaultConfig()
	b := DefaultConfig()
	if got := Changed(a, b); len(got) != 0 {
		t.Fatalf("Changed(default, default) = %v", got)
	}
	b.Listen = []string{"127.0.0.1:1053"}
	b.Upstream.Timeout = Dur(2 * time.Second)
	b.Zones = []ZoneConfig{{Name: "corp.", Servers: []string{"192.0.2.53"}}}
	b.LogQueries = true
	b.Consul.Enabled = !a.Consul.Enabled
	got := strings.Join(Changed(a, b), " ")
	if want := "listen log_queries upstream.timeout zone consul.enabled"; got != want {
		t.Errorf("Changed = %q, want %q", got, want)
	}
}
