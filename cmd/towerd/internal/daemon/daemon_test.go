package daemon

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
)

// The lifecycle the drill and `towerd serve` share: New binds, Run serves
// and reports ready, Reload takes a good configuration and refuses a bad
// one (both counted), Shutdown drains and saves the cache, and a Reload
// after Run returned fails instead of hanging.
func TestNewRunReloadShutdown(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Listen = []string{"127.0.0.1:0"}
	cfg.Admin.Listen = "127.0.0.1:0"
	cfg.Consul.Enabled = false
	cfg.StateDir = t.TempDir()
	// Port 9 (discard) on loopback: never asked, the test sends no query.
	zones := []config.ZoneConfig{{Name: ".", Servers: []string{"127.0.0.1:9"}}}
	cfg.Zones = zones // a reload must not read the machine's resolv.conf
	next := cfg
	next.Cache.MinTTL = config.Dur(time.Minute)
	var loadErr error
	d, stop := runDaemon(t, Options{
		Config: cfg, Zones: zones, Log: slog.New(slog.DiscardHandler), ConfigFile: "test.toml",
		Load: func() (config.Config, error) { return next, loadErr },
	})
	if addrs := strings.Join(d.Addrs(), " "); !strings.Contains(addrs, "udp/127.0.0.1:") || !strings.Contains(addrs, "tcp/127.0.0.1:") {
		t.Errorf("Addrs %q, want UDP and TCP on 127.0.0.1", addrs)
	}

	if err := d.Reload(); err != nil {
		t.Fatalf("good reload: %v", err)
	}
	loadErr = errors.New("broken file")
	if err := d.Reload(); err == nil || !strings.Contains(err.Error(), "broken file") {
		t.Fatalf("bad reload: %v, want the load error", err)
	}
	if n := metricValue(t, d.tel, "towerd_config_reloads_total", "success"); n != 1 {
		t.Errorf("reloads{success} %v, want 1", n)
	}
	if n := metricValue(t, d.tel, "towerd_config_reloads_total", "failure"); n != 1 {
		t.Errorf("reloads{failure} %v, want 1", n)
	}
	if d.cfg.Cache.MinTTL.Duration != time.Minute {
		t.Errorf("running cache.min_ttl %v after the good reload, want 1m", d.cfg.Cache.MinTTL)
	}

	if err := stop(); err != nil {
		t.Fatalf("Run after Shutdown: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.StateDir, cacheFileName)); err != nil {
		t.Errorf("no cache saved on shutdown: %v", err)
	}
	if err := d.Reload(); err == nil {
		t.Error("Reload after Run returned succeeded")
	}
}

// TestStaleAgeIsZeroWithoutServeStale: the one stale age the cache, the
// Consul watch and /stats get is serve_stale.max_age only while serve-stale
// is on.
func TestStaleAgeIsZeroWithoutServeStale(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.ServeStale.MaxAge = config.Dur(3 * time.Hour)
	if got := staleAge(cfg); got != 3*time.Hour || cacheConfig(cfg).MaxStaleAge != got {
		t.Errorf("serve-stale on: stale age %v, cache's %v; want 3h", got, cacheConfig(cfg).MaxStaleAge)
	}
	cfg.ServeStale.Enabled = false
	if got := staleAge(cfg); got != 0 || cacheConfig(cfg).MaxStaleAge != 0 {
		t.Errorf("serve-stale off: stale age %v, cache's %v; want 0", got, cacheConfig(cfg).MaxStaleAge)
	}
}
