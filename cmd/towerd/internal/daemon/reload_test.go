package daemon

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
)

// running keeps exactly what restartOnly names: with every restart-only
// table and one reloadable key edited, what still differs from the edit
// once applied is every restart-only key that was edited, and only those.
func TestRunningKeepsRestartOnlyKeys(t *testing.T) {
	started := config.DefaultConfig()
	edit := started
	edit.Listen = []string{"127.0.0.2:53"}
	edit.Cache.Size = 500
	edit.TCP.MaxConnections = 7
	edit.Admin.Listen = "127.0.0.1:9999"
	edit.Consul.Address = "127.0.0.1:18500"
	edit.LogLevel = "debug"
	edit.Upstream.Timeout = config.Dur(4 * time.Second)
	all := config.Changed(started, edit)
	var restart []string
	for _, k := range all {
		if restartOnly(k) {
			restart = append(restart, k)
		}
	}
	if len(restart) != len(all)-1 {
		t.Fatalf("restart-only keys %q of %q: want all but upstream.timeout", restart, all)
	}
	if left := config.Changed(running(edit, started), edit); !slices.Equal(left, restart) {
		t.Errorf("running differs from the edit in %q, want the restart-only keys %q", left, restart)
	}
}

// Issue 25: a reload compares the file with what runs. An edit of a
// restart-only key needs a restart, and keeps needing one on every reload
// while the file says so; reverted, it needs none.
func TestReloadComparesWithTheRunningConfig(t *testing.T) {
	cfg := quietConfig()
	cfg.Zones = []config.ZoneConfig{{Name: ".", Servers: []string{"127.0.0.1:9"}}} // never asked
	zones, _, err := cfg.ForwardZones("/")
	if err != nil {
		t.Fatal(err)
	}
	next := cfg
	d, err := New(Options{Config: cfg, Zones: zones, Log: slog.New(slog.DiscardHandler),
		Load: func() (config.Config, error) { return next, nil }})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background()) }()
	t.Cleanup(func() {
		d.Shutdown()
		<-done
	})
	<-d.Ready()

	edited := cfg
	edited.Cache.Size = 500
	edited.TCP.MaxConnections = 7
	edited.Upstream.Timeout = config.Dur(4 * time.Second)
	reverted := cfg
	reverted.Upstream.Timeout = config.Dur(4 * time.Second) // the reloadable edit stays
	for _, step := range []struct {
		name             string
		file             config.Config
		applied, restart []string
	}{
		{"edit", edited, []string{"upstream.timeout"}, []string{"cache.size", "tcp.max_connections"}},
		{"the same edit again", edited, []string{}, []string{"cache.size", "tcp.max_connections"}},
		{"restart-only edits reverted", reverted, []string{}, []string{}},
		{"all reverted", cfg, []string{"upstream.timeout"}, []string{}},
	} {
		next = step.file
		res, err := d.ReloadResult()
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if !slices.Equal(res.Applied, step.applied) || !slices.Equal(res.RestartNeeded, step.restart) {
			t.Errorf("%s: applied %q, restart needed %q; want %q, %q", step.name, res.Applied, res.RestartNeeded, step.applied, step.restart)
		}
	}
	if d.cfg.Cache.Size != cfg.Cache.Size {
		t.Errorf("running cache.size %d, want the started %d", d.cfg.Cache.Size, cfg.Cache.Size)
	}
}

// The Consul watch keeps the stale age it started with: a change needs a
// restart for its records until it is reverted, while the cache follows
// at once.
func TestReloadResultConsulStaleAge(t *testing.T) {
	started := config.DefaultConfig()
	started.Consul.Enabled = true
	edited := started
	edited.ServeStale.MaxAge = config.Dur(time.Hour)
	res := reloadResult(started, edited, started)
	if !slices.Equal(res.Applied, []string{"serve_stale.max_age"}) ||
		!slices.Equal(res.RestartNeeded, []string{"serve_stale.max_age (for Consul watch records)"}) {
		t.Errorf("edit: %+v", res)
	}
	res = reloadResult(running(edited, started), started, started)
	if !slices.Equal(res.Applied, []string{"serve_stale.max_age"}) || len(res.RestartNeeded) != 0 {
		t.Errorf("reverted: %+v, want the cache's max_age applied and no restart", res)
	}
}
