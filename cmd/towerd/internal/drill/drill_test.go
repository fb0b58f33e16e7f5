package drill

import (
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
)

// twoZones is a node's config with two zones of its own (besides the
// default consul.), a listen address, admin server and state directory
// the drill must not use, and serve-stale timers short enough for a
// short plan.
const twoZones = `listen = ["127.0.0.1:53"]
allow = ["10.0.0.0/8"]
state_dir = "STATE"

[admin]
listen = "127.0.0.1:9253"

[serve_stale]
client_timeout = "0s"
failure_recheck = "1s"

[[zone]]
name = "."
servers = ["192.0.2.1", "192.0.2.2"]

[[zone]]
name = "Corp.Example"
servers = ["192.0.2.3:5353"]
`

func writeNode(t *testing.T) (path, stateDir string) {
	t.Helper()
	dir := t.TempDir()
	stateDir = filepath.Join(dir, "state")
	path = filepath.Join(dir, "towerd.toml")
	if err := os.WriteFile(path, []byte(strings.Replace(twoZones, "STATE", stateDir, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, stateDir
}

func validOptions(t *testing.T) Options {
	t.Helper()
	path, _ := writeNode(t)
	return optionsFor(t, path)
}

func optionsFor(t *testing.T, path string) Options {
	t.Helper()
	n, err := LoadNode(path, false)
	if err != nil {
		t.Fatal(err)
	}
	return Options{Node: n, Clients: 2, Rate: 10, Timeout: 2 * time.Second, Names: 6, TTL: time.Second,
		Warmup: 5 * time.Second, Duration: time.Second, Threshold: 100, P99: time.Second,
		Log: slog.New(slog.DiscardHandler)}
}

// Check names the flag that is out of bounds.
func TestCheckNamesTheFlag(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Options)
		want   string // "" = valid
	}{
		{"valid", func(*Options) {}, ""},
		{"too long", func(o *Options) { o.Duration = time.Hour }, "-duration"},
		{"too short for the rate", func(o *Options) { o.Duration = time.Millisecond }, "-duration"},
		{"black-hole too short for the rate", func(o *Options) { o.Blackhole = time.Millisecond }, "-blackhole"},
		{"names never asked twice", func(o *Options) { o.Names = 100 }, "-names 100"},
		{"derived black-hole too long", func(o *Options) { o.StaleWithin = time.Hour }, "-blackhole"},
		{"no clients", func(o *Options) { o.Clients = 0 }, "-clients"},
		{"too many names", func(o *Options) { o.Names = maxNames + 1 }, "-names"},
		{"flood", func(o *Options) { o.Clients, o.Rate, o.Duration = 1000, 1000, 5*time.Minute }, "queries"},
		{"short ttl", func(o *Options) { o.TTL = time.Millisecond }, "-ttl"},
		{"loss over 1", func(o *Options) { o.Faults.Loss = 2 }, "-loss"},
		{"negative delay", func(o *Options) { o.Faults.Delay = -time.Second }, "-delay"},
		{"threshold over 100", func(o *Options) { o.Threshold = 101 }, "-threshold"},
		{"no p99 target", func(o *Options) { o.P99 = 0 }, "-p99"},
		{"no warm-up", func(o *Options) { o.Warmup = 0 }, "-warmup"},
		{"negative recovery", func(o *Options) { o.Recovery = -time.Second }, "-recovery"},
	}
	for _, tt := range tests {
		o := validOptions(t)
		tt.change(&o)
		err := o.Check()
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: Check() = %v, want an error naming %q", tt.name, err, tt.want)
		}
	}
}

// The node's zones are merged over the defaults as serve merges them, each
// with the servers the node asks; "." without servers is marked as the
// system's (the drill does not read resolv.conf).
func TestLoadNodeZones(t *testing.T) {
	path, _ := writeNode(t)
	n, err := LoadNode(path, false)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, z := range n.Zones {
		got = append(got, z.Name+"="+strings.Join(z.Servers, ","))
	}
	want := []string{"consul.=127.0.0.1:8600", ".=192.0.2.1:53,192.0.2.2:53", "corp.example.=192.0.2.3:5353"}
	if !slices.Equal(got, want) || n.Missing || n.describe() != path {
		t.Errorf("zones %q, missing %v, %q; want %q", got, n.Missing, n.describe(), want)
	}

	// The installed file missing: built-in defaults, and the report says so.
	missing := filepath.Join(t.TempDir(), "towerd.toml")
	n, err = LoadNode(missing, true)
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, z := range n.Zones {
		got = append(got, z.Name+"="+strings.Join(z.Servers, ","))
	}
	if !n.Missing || !strings.Contains(n.describe(), "built-in defaults") ||
		!slices.Equal(got, []string{"consul.=127.0.0.1:8600", ".="}) {
		t.Errorf("missing default file: %+v %q, zones %q", n, n.describe(), got)
	}
	// A file named with -config must exist.
	if _, err := LoadNode(missing, false); err == nil {
		t.Error("a missing -config file was accepted")
	}
}

// The loopback copy keeps what is rehearsed and switches off or to
// loopback whatever reaches outside the drill.
func TestLoopbackCopy(t *testing.T) {
	path, _ := writeNode(t)
	n, err := LoadNode(path, false)
	if err != nil {
		t.Fatal(err)
	}
	cfg, replaced := n.loopbackCopy()
	if !slices.Equal(cfg.Listen, []string{"127.0.0.1:0"}) || cfg.Admin.Listen != "" || cfg.Control.Socket != "" || cfg.StateDir != "" ||
		cfg.Consul.Enabled || !slices.Contains(cfg.Allow, "127.0.0.1/32") {
		t.Errorf("loopback copy still reaches out: %+v", cfg)
	}
	if cfg.ServeStale.FailureRecheck.Duration != time.Second || cfg.ServeStale.ClientTimeout.Duration != 0 {
		t.Errorf("the node's serve_stale was not kept: %+v", cfg.ServeStale)
	}
	if len(replaced) != 5 || n.Config.Admin.Listen != "127.0.0.1:9253" {
		t.Errorf("replaced %q (want admin, control, state_dir, Consul, allow), node config changed: %v", replaced, n.Config.Admin)
	}
}

// Derived phases and targets follow the node's cache clamps and
// serve-stale timers.
func TestPlanFollowsTheNode(t *testing.T) {
	o := validOptions(t)
	o.TTL = 5 * time.Second
	o.Node.Config.Cache.MinTTL = config.Dur(20 * time.Second)
	o.Node.Config.ServeStale.ClientTimeout = config.Dur(1800 * time.Millisecond)
	o.Node.Config.ServeStale.FailureRecheck = config.Dur(30 * time.Second)
	p := o.plan()
	if p.ttl != 20*time.Second || p.staleWithin != 23800*time.Millisecond || p.blackhole != 24800*time.Millisecond ||
		p.recoverWithin != 35*time.Second || p.recoveryMax != 40*time.Second {
		t.Errorf("plan %+v", p)
	}
	o.Node.Config.ServeStale.Enabled = false
	p = o.plan()
	if p.staleWithin != 22*time.Second || p.recoverWithin != 5*time.Second || !strings.Contains(p.recoverWhy, "serve_stale is off") {
		t.Errorf("plan without serve-stale %+v", p)
	}
	o.Blackhole, o.RecoverWithin = 3*time.Second, 7*time.Second
	p = o.plan()
	if p.blackhole != 3*time.Second || p.recoverWithin != 7*time.Second || p.recoverWhy != "" {
		t.Errorf("plan with -blackhole and -recover-within %+v", p)
	}
}

// The recovery watch: recovered once every name has been answered fresh
// after the last answer that was not, the time running to that answer; it
// stops the clients once that has held for one client timeout.
func TestRecoveryWatch(t *testing.T) {
	back := time.Unix(1000, 0)
	at := func(ms int) time.Time { return back.Add(time.Duration(ms) * time.Millisecond) }
	stops := 0
	w := newRecoveryWatch(back, 2, time.Second, func() { stops++ })
	for _, o := range []outcome{
		{name: 0, at: at(100), ok: true, stale: true},
		{name: 1, at: at(200), ok: true},
		{name: 1, at: at(300), timedOut: true},
		{name: 0, at: at(400), ok: true},
		{name: 0, at: at(500), ok: true},
	} {
		w.see(o)
	}
	if _, ok := w.recovery(); ok || stops != 0 {
		t.Fatalf("recovered before name 1 answered fresh again (stops %d)", stops)
	}
	w.see(outcome{name: 1, at: at(600), ok: true})
	if took, ok := w.recovery(); !ok || took != 300*time.Millisecond || stops != 0 {
		t.Fatalf("recovery %v %v stops %d, want 300ms and no stop yet", took, ok, stops)
	}
	w.see(outcome{name: 0, at: at(1700), ok: true})
	if stops != 1 {
		t.Errorf("stops %d after the state held for the client timeout, want 1", stops)
	}
}

// targetLine matches one line of the verdict: what, figure, verdict.
var targetLine = regexp.MustCompile(`(?m)^(names answered in the warm-up|success through towerd, [^\n]*?|cached p99 [^\n]*?|first stale answer after the black-hole|recovery after the upstream returns)\s+(\S+)\s+(PASS|FAIL|INCONCLUSIVE)\s`)

// A short drill without faults of the two-zone node runs its three phases
// on loopback through a towerd built by daemon.New, meets every target,
// and leaves the node's state directory alone.
func TestRunShortPlan(t *testing.T) {
	path, stateDir := writeNode(t)
	o := optionsFor(t, path)
	o.Seed = 1
	o.Threshold, o.P99, o.StaleWithin, o.RecoverWithin = 99, 2*time.Second, 4*time.Second, 15*time.Second
	if err := o.Check(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	verdict, err := Rehearse(o, &out)
	if err != nil {
		t.Fatal(err)
	}
	report := out.String()
	lines := targetLine.FindAllStringSubmatch(report, -1)
	if verdict != Pass || len(lines) != 7 || !strings.Contains(report, "PASS: every target met (7)") {
		t.Errorf("verdict %v, %d target lines, report:\n%s", verdict, len(lines), report)
	}
	for _, m := range lines {
		if m[3] != "PASS" {
			t.Errorf("%s: %s %s", m[1], m[2], m[3])
		}
	}
	for _, want := range []string{"towerd drill  seed 1", "copy: 2 names n00000.towerd-drill.corp.example.",
		"copy: 2 names n00000.towerd-drill. ", "admin server 127.0.0.1:9253 → off", "Consul watch → off",
		"s  baseline   ", "machine   1 jitter and loss  "} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	if _, err := os.Stat(stateDir); !os.IsNotExist(err) {
		t.Errorf("the node's state_dir %s was touched: %v", stateDir, err)
	}
}
