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
