package main

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
		{"bad level", "log_level = \"loud\"\n", `towerd.toml:1: key "log_level"`},
		{"negative save interval", "state_dir = \"\"\nstate_save_interval = \"-1m\"\n", `towerd.toml:2: key "state_save_interval": cannot be negative`},
		{"attempt floor over budget", "[upstream]\ntimeout = \"1s\"\nmin_attempt_timeout = \"2s\"\n", `towerd.toml:3: key "upstream.min_attempt_timeout"`},
		{"syntax", "[cache\n", `towerd.toml:1:`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, "towerd.toml", tc.body)
			_, err := LoadConfig(path, false)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestLoadConfigDefaultsAndOverrides(t *testing.T) {
	cfg, err := LoadConfig(filepath.Join(t.TempDir(), "absent.toml"), true)
	if err != nil {
		t.Fatalf("missing optional file: %v", err)
	}
	if cfg.Cache.Size != 10000 || cfg.ServeStale.AnswerTTL.Duration != 30*time.Second ||
		cfg.Upstream.MaxInflight != 150 || cfg.Listen[0] != "127.0.0.1:53" ||
		cfg.StateSaveInterval.Duration != 5*time.Minute {
		t.Fatalf("defaults wrong: %+v", cfg)
	}
	if _, err := LoadConfig(filepath.Join(t.TempDir(), "absent.toml"), false); err == nil {
		t.Fatal("missing file named on the command line accepted")
	}
	path := writeFile(t, "t.toml", "[cache]\nsize = 42\n[serve_stale]\nclient_timeout = \"0s\"\n")
	cfg, err = LoadConfig(path, false)
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
	cfg.Zones = []ZoneConfig{{Name: "Corp.Example", Servers: []string{"192.0.2.10"}}}
	zones, source, err := cfg.zones(root)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, z := range zones {
		got[z.Name] = strings.Join(z.Servers, ",")
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
	if _, _, err := cfg.zones(root); err == nil || !strings.Contains(err.Error(), "loop") {
		t.Fatalf("self-only upstream accepted: %v", err)
	}
}

func TestFlagsOverrideFile(t *testing.T) {
	path := writeFile(t, "t.toml", "[cache]\nsize = 42\n[[zone]]\nname = \".\"\nservers = [\"192.0.2.1\"]\n")
	o, err := parseFlags([]string{"-config", path, "-cache-size", "7", "-upstream", "192.0.2.9:5300, 192.0.2.8",
		"-listen", "127.0.0.1:1053"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.load()
	if err != nil {
		t.Fatal(err)
	}
	zones, _, err := cfg.zones(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var root string
	for _, z := range zones {
		if z.Name == "." {
			root = strings.Join(z.Servers, ",")
		}
	}
	if cfg.Cache.Size != 7 || root != "192.0.2.9:5300,192.0.2.8:53" || cfg.Listen[0] != "127.0.0.1:1053" {
		t.Fatalf("flags not applied: size %d root %q listen %v", cfg.Cache.Size, root, cfg.Listen)
	}
	if cfg.StateSaveInterval.Duration != 5*time.Minute {
		t.Errorf("state_save_interval %v without the flag, want the default 5m", cfg.StateSaveInterval)
	}
	o, _ = parseFlags([]string{"-config", path, "-state-save-interval", "0s"}, os.Stderr)
	if cfg, err = o.load(); err != nil || cfg.StateSaveInterval.Duration != 0 {
		t.Errorf("-state-save-interval 0s: %v, %v; want 0s (save only on stop)", cfg.StateSaveInterval, err)
	}
	o, _ = parseFlags([]string{"-config", path, "-cache-size", "-1"}, os.Stderr)
	if _, err := o.load(); err == nil || !strings.Contains(err.Error(), "cache.size") {
		t.Fatalf("bad flag value accepted: %v", err)
	}
}
