package daemon

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
	"github.com/towerd/towerd/cmd/towerd/internal/admin"
	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/test/dnstest"
)

func TestResolveStateDir(t *testing.T) {
	tests := []struct {
		configured, env, want string
	}{
		{config.DefaultStateDir, "", config.DefaultStateDir},
		{config.DefaultStateDir, "/var/lib/private/towerd", "/var/lib/private/towerd"},
		{config.DefaultStateDir, "/a:/b", "/a"}, // several StateDirectory= entries: the first
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
	d := &Daemon{log: slog.New(slog.NewTextHandler(&logs, nil)), tel: admin.NewTelemetry(newStateCache(t), time.Now(), "test")}
	cfg := config.Config{StateDir: dir}

	src := newStateCache(t)
	m := new(dns.Msg)
	m.SetQuestion("www.example.", dns.TypeA)
	rr, _ := dns.NewRR("www.example. 300 IN A 192.0.2.1")
	m.Answer = []dns.RR{rr}
	k := cache.NewKey("www.example.", dns.TypeA, dns.ClassINET, false, false)
	if ok, reason := dnstest.SetMsg(src, k, m); !ok {
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
	missing := config.Config{StateDir: filepath.Join(dir, "nope")}
	d.saveCache(src, missing)
	if _, err := os.Stat(missing.StateDir); err == nil {
		t.Errorf("towerd created the missing state directory")
	}
}

// logLines is a log destination a test can wait on: slog writes each record
// with one Write, and each lands on the channel. A line that finds the
// channel full is dropped rather than blocking the logger: the lines waited
// for here repeat with every save.
type logLines chan string

func (l logLines) Write(p []byte) (int, error) {
	select {
	case l <- string(p):
	default:
	}
	return len(p), nil
}

// next returns the first line containing want, skipping others, or fails
// after a deadline (a bound, not a sleep: the wait ends with the line).
func (l logLines) next(t *testing.T, want string) string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case line := <-l:
			if strings.Contains(line, want) {
				return line
			}
		case <-deadline:
			t.Fatalf("no log line containing %q", want)
			return ""
		}
	}
}

// TestPeriodicCacheSave: while serving, the cache is saved every
// state_save_interval, with a debug line and the metrics; a reload moves the
// saves; a failed save is a warning and counted; stop waits for the saver.
func TestPeriodicCacheSave(t *testing.T) {
	dir := t.TempDir()
	lines := make(logLines, 64)
	c := newStateCache(t)
	d := &Daemon{log: slog.New(slog.NewTextHandler(lines, &slog.HandlerOptions{Level: slog.LevelDebug})),
		tel: admin.NewTelemetry(c, time.Now(), "test")}
	add := func(name string) {
		t.Helper()
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		rr, _ := dns.NewRR(name + " 300 IN A 192.0.2.1")
		m.Answer = []dns.RR{rr}
		if ok, reason := dnstest.SetMsg(c, cache.NewKey(name, dns.TypeA, dns.ClassINET, false, false), m); !ok {
			t.Fatal(reason)
		}
	}
	saves := func(result string) float64 {
		return metricValue(t, d.tel, "towerd_cache_saves_total", result)
	}

	add("one.example.")
	s := d.startCacheSaver(c, config.Config{StateDir: dir, StateSaveInterval: config.Dur(10 * time.Millisecond)})
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			s.stop()
		}
	})
	if line := lines.next(t, `msg="saved cache"`); !strings.Contains(line, "level=DEBUG") || !strings.Contains(line, "entries=1") {
		t.Errorf("first periodic save logged as %q, want a debug line with entries=1", line)
	}
	// Saves go on: the next one has the entry added since.
	add("two.example.")
	for !strings.Contains(lines.next(t, `msg="saved cache"`), "entries=2") {
	}
	loaded := newStateCache(t)
	d.loadCache(loaded, config.Config{StateDir: dir})
	if loaded.Len() != 2 {
		t.Errorf("the periodic snapshot loads %d entries, want 2", loaded.Len())
	}
	if n := saves("success"); n < 2 {
		t.Errorf("towerd_cache_saves_total{result=success} %v, want at least 2", n)
	}
	if ts := metricValue(t, d.tel, "towerd_cache_last_save_success_timestamp_seconds", ""); ts <= 0 {
		t.Errorf("towerd_cache_last_save_success_timestamp_seconds %v after a save", ts)
	}

	// A reload names another directory, where cache.bin cannot be written
	// (it is a directory): the failure is a warning and counted.
	other := t.TempDir()
	if err := os.Mkdir(filepath.Join(other, cacheFileName), 0o700); err != nil {
		t.Fatal(err)
	}
	s.reconfigure(config.Config{StateDir: other, StateSaveInterval: config.Dur(10 * time.Millisecond)})
	if line := lines.next(t, `msg="cache not saved"`); !strings.Contains(line, "level=WARN") || !strings.Contains(line, other) {
		t.Errorf("failed save logged as %q, want a warning naming %s", line, other)
	}
	if n := saves("failure"); n < 1 {
		t.Errorf("towerd_cache_saves_total{result=failure} %v after a failed save", n)
	}

	// "0s" saves only on stop; stop returns once the saver is gone.
	s.reconfigure(config.Config{StateDir: dir})
	s.stop()
	stopped = true
	if leftovers, _ := filepath.Glob(filepath.Join(dir, ".*")); len(leftovers) != 0 {
		t.Errorf("temporary files left behind: %v", leftovers)
	}
}

// metricValue reads one series of tel's registry: name, with label
// result="result" when result is not "".
func metricValue(t *testing.T, tel *admin.Telemetry, name, result string) float64 {
	t.Helper()
	mfs, err := tel.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := result == ""
			for _, lp := range m.GetLabel() {
				match = match || (lp.GetName() == "result" && lp.GetValue() == result)
			}
			if match {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no series %s{result=%q}", name, result)
	return 0
}
