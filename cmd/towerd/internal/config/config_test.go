package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadConfigErrorsNameKeyAndLine(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		{"unknown key", "listen = [\"127.0.0.1:53\"]\n[cache]\nsize = 5\nsise = 7\n", `towerd.toml:4: key "cache.sise": unknown key`},
		{"unknown table", "[cahce]\nsize = 5\n", `key "cahce`},
		{"wrong type", "[cache]\nsize = \"many\"\n", `towerd.toml:2: key "cache.size"`},
		{"bad duration", "[serve_stale]\nmax_age = \"forever\"\n", `towerd.toml:2: key "serve_stale.max_age": "forever" is not a duration`},
		{"zero size", "\n[cache]\nsize = 0\n", `towerd.toml:3: key "cache.size": must be at least 1`},
		{"bad listen", "listen = [\"localhost\"]\n", `towerd.toml:1: key "listen[0]"`},
		{"bad allow", "allow = [\"everyone\"]\n", `key "allow[0]"`},
		{"min over max", "[cache]\nmin_ttl = \"2h\"\nmax_ttl = \"1h\"\n", `key "cache.min_ttl"`},
		{"zone without servers", "[[zone]]\nname = \"corp.example.\"\n", `key "zone[0].servers"`},
		{"bad server", "[[zone]]\nname = \"corp.\"\nservers = [\"not an address\"]\n", `key "zone[0].servers[0]"`},
		{"bad probe name", "[[zone]]\nname = \"corp.\"\nservers = [\"192.0.2.1\"]\nprobe_name = \"a..b\"\n", `towerd.toml:4: key "zone[0].probe_name"`},
		{"bad level", "log_level = \"loud\"\n", `towerd.toml:1: key "log_level"`},
		{"negative save interval", "state_dir = \"\"\nstate_save_interval = \"-1m\"\n", `towerd.toml:2: key "state_save_interval": cannot be negative`},
		{"attempt floor over budget", "[upstream]\ntimeout = \"1s\"\nmin_attempt_timeout = \"2s\"\n", `towerd.toml:3: key "upstream.min_attempt_timeout"`},
		{"syntax", "[cache\n", `towerd.toml:1:`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, "towerd.toml", tc.body)
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
	path := writeFile(t, "t.toml", "[cache]\nsize = 42\n[serve_stale]\nclient_timeout = \"0s\"\n")
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

func TestConsulConfig(t *testing.T) {
	cfg, err := Load("", true)
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Consul; !c.Enabled || c.Address != "" || c.AnswerTTL.Duration != 0 || len(c.Services) != 0 {
		t.Errorf("default [consul] %+v: want enabled, address from the environment, TTL 0, all services", c)
	}

	token := writeFile(t, "token", "secret\n")
	path := writeFile(t, "towerd.toml", `
[consul]
address    = "127.0.0.1:8501"
scheme     = "https"
token_file = "`+token+`"
datacenter = "dc2"
services   = ["web", "db"]
tags       = ["dns"]
answer_ttl = "5s"
`)
	cfg, err = Load(path, false)
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Consul; c.Address != "127.0.0.1:8501" || c.Scheme != "https" || c.TokenFile != token ||
		c.Datacenter != "dc2" || len(c.Services) != 2 || c.Tags[0] != "dns" || c.AnswerTTL.Duration != 5*time.Second {
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeFile(t, "towerd.toml", tc.body), false)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}

	// A disabled watch is not validated: its keys may wait for later.
	if _, err := Load(writeFile(t, "towerd.toml", "[consul]\nenabled = false\nscheme = \"ftp\"\n"), false); err != nil {
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
	path := writeFile(t, "towerd.toml", "listen = [\"127.0.0.1:53\"]\n\n[cache]\nsize = 100\n\n[admin]\nlisten = \"0.0.0.0:9253\"\n")
	_, err := Load(path, false)
	if err == nil || !strings.Contains(err.Error(), `towerd.toml:7: key "admin.listen"`) {
		t.Fatalf("error %v, want it at towerd.toml:7", err)
	}
}
