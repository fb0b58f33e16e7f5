package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
)

func TestResolveStateDir(t *testing.T) {
	tests := []struct {
		configured, env, want string
	}{
		{DefaultStateDir, "", DefaultStateDir},
		{DefaultStateDir, "/var/lib/private/towerd", "/var/lib/private/towerd"},
		{DefaultStateDir, "/a:/b", "/a"}, // several StateDirectory= entries: the first
		{"/srv/towerd", "/var/lib/towerd", "/srv/towerd"},
		{"", "/var/lib/towerd", ""}, // "" turns persistence off even under systemd
	}
	for _, tt := range tests {
		t.Setenv("STATE_DIRECTORY", tt.env)
		if got := resolveStateDir(tt.configured); got != tt.want {
			t.Errorf("state_dir %q, STATE_DIRECTORY %q: got %q, want %q", tt.configured, tt.env, got, tt.want)
		}
	}
}

func newStateCache(t *testing.T) *cache.Cache {
	t.Helper()
	c, err := cache.New(cache.Config{Capacity: 100, MaxStaleAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSaveAndLoadCache: the file is written with mode 0600, no temporary
// file is left behind, and a new daemon loads what the old one saved; a
// damaged file is ignored with a warning.
func TestSaveAndLoadCache(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	d := &daemon{log: slog.New(slog.NewTextHandler(&logs, nil))}
	cfg := Config{StateDir: dir}

	src := newStateCache(t)
	m := new(dns.Msg)
	m.SetQuestion("www.example.", dns.TypeA)
	rr, _ := dns.NewRR("www.example. 300 IN A 192.0.2.1")
	m.Answer = []dns.RR{rr}
	k := cache.NewKey("www.example.", dns.TypeA, dns.ClassINET, false, false)
	if ok, reason := src.Set(k, m); !ok {
		t.Fatal(reason)
	}
	d.saveCache(src, cfg)

	path := filepath.Join(dir, cacheFileName)
	info, err := os.Stat(path)
	if err != nil {
		t.Fatalf("no snapshot written: %v\n%s", err, &logs)
	}
	if mode := info.Mode().Perm(); mode != 0o600 {
		t.Errorf("snapshot mode %v, want 0600", mode)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("state dir holds %d files, want only %s", len(entries), cacheFileName)
	}

	dst := newStateCache(t)
	d.loadCache(dst, cfg)
	if _, ok := dst.Get(k); !ok {
		t.Errorf("entry not loaded\n%s", &logs)
	}
	if !strings.Contains(logs.String(), "loaded saved cache") || !strings.Contains(logs.String(), "entries=1") {
		t.Errorf("no load line with the entry count:\n%s", &logs)
	}

	if err := os.WriteFile(path, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	logs.Reset()
	empty := newStateCache(t)
	d.loadCache(empty, cfg)
	if empty.Len() != 0 || !strings.Contains(logs.String(), "level=WARN msg=\"saved cache ignored") {
		t.Errorf("damaged file: %d entries loaded, log:\n%s", empty.Len(), &logs)
	}

	// A missing directory turns persistence off; nothing is created.
	logs.Reset()
	missing := Config{StateDir: filepath.Join(dir, "nope")}
	d.saveCache(src, missing)
	if _, err := os.Stat(missing.StateDir); err == nil {
		t.Errorf("towerd created the missing state directory")
	}
}
