package daemon

import (
	"context"
	"io"
	"log/slog"
	"net"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/cmd/towerd/internal/logsink"
	"github.com/towerd/towerd/cmd/towerd/internal/manual"
)

// repoRoot is the repository, seen from this package's directory.
const repoRoot = "../../../.."

// TestManualMetrics: the metric tables of the manual (first column
// "metric") list every towerd_* family a real daemon registers, with its
// type, and nothing else. The daemon is built and run by New and Run as
// `towerd serve` does, with the Consul watch on (an agent address where
// nothing listens), so every collector is registered; its names are read
// from the registry's descriptors, not from a scrape, so a family that has
// no series yet (a counter vector nobody has counted in) is not missed.
func TestManualMetrics(t *testing.T) {
	m, err := manual.Load(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	registered := registeredNames(t, startedTelemetryDaemon(t))

	documented := map[string]string{} // name -> type
	for _, table := range m.Tables("metric") {
		typ := table.Column("type")
		for _, row := range table.Rows {
			names := manual.CodeSpans(row.Cells[0])
			if len(names) != 1 || !strings.HasPrefix(names[0], "towerd_") {
				t.Errorf("%s:%d: a metric row naming %q, want one towerd_* name", table.File, row.Line, row.Cells[0])
				continue
			}
			if _, dup := documented[names[0]]; dup {
				t.Errorf("%s:%d: %s documented twice", table.File, row.Line, names[0])
			}
			if typ >= 0 && typ < len(row.Cells) {
				documented[names[0]] = row.Cells[typ]
			}
		}
	}
	for name := range registered {
		if _, ok := documented[name]; !ok {
			t.Errorf("the daemon registers %s; no metric table of the manual documents it", name)
		}
	}
	for name := range documented {
		if _, ok := registered[name]; !ok {
			t.Errorf("the manual documents %s, which the daemon does not register", name)
		}
	}
	typed := 0
	for name, typ := range registered {
		if typ != "" {
			typed++
		}
		if doc, ok := documented[name]; ok && typ != "" && doc != typ {
			t.Errorf("%s is a %s; the manual says %s", name, typ, doc)
		}
	}
	t.Logf("%d towerd_* families registered (%d with series, their types checked), %d documented", len(registered), typed, len(documented))
}

// startedTelemetryDaemon runs a daemon wired as `towerd serve` wires one,
// every optional part on: the Consul watch (towards a loopback port where
// nothing listens), the admin server and periodic cache saves. It returns
// once the daemon serves.
func startedTelemetryDaemon(t *testing.T) *Daemon {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	agent := ln.Addr().String()
	ln.Close() // a closed port: the watch's queries are refused at once

	cfg := config.DefaultConfig()
	cfg.Listen = []string{"127.0.0.1:0"}
	cfg.Admin.Listen = "127.0.0.1:0"
	cfg.Consul.Address = agent
	cfg.StateDir = t.TempDir()
	// Port 9 (discard) on loopback: never asked, the test sends no query.
	zones := []config.ZoneConfig{{Name: ".", Servers: []string{"127.0.0.1:9"}}}
	cfg.Zones = zones
	// The log goes through a sink, whose metrics the daemon registers, as
	// in towerd serve.
	sink := logsink.New(io.Discard)
	sink.Start(nil)
	t.Cleanup(func() { sink.Close(time.Second) })
	d, stop := runDaemon(t, Options{Config: cfg, Zones: zones, Log: slog.New(slog.NewTextHandler(sink, nil)),
		ConfigFile: "test.toml", LogMetrics: sink})
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return d
}

// quietConfig is the default configuration listening on a free loopback
// port only: no admin server, no Consul watch, no state directory.
func quietConfig() config.Config {
	cfg := config.DefaultConfig()
	cfg.Listen = []string{"127.0.0.1:0"}
	cfg.Admin.Listen = ""
	cfg.Consul.Enabled = false
	cfg.StateDir = ""
	return cfg
}

// runDaemon builds a daemon from opts and runs it until it serves; stop
// shuts it down and returns what Run returned.
func runDaemon(t *testing.T, opts Options) (d *Daemon, stop func() error) {
	t.Helper()
	d, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background()) }()
	select {
	case <-d.Ready():
	case err := <-done:
		t.Fatalf("Run returned before serving: %v", err)
	}
	return d, func() error {
		d.Shutdown()
		return <-done
	}
}

// registeredNames returns every towerd_* family on the daemon's registry
// with its type ("counter", "gauge", "histogram"; "" for one that has no
// series to read the type from). The names come from the descriptors the
// registry checked at registration, which client_golang keeps unexported:
// reflection reads them, and the scrape cross-checks that reading (every
// family gathered must be among them), so a change inside client_golang
// fails here instead of passing with nothing checked.
func registeredNames(t *testing.T, d *Daemon) map[string]string {
	t.Helper()
	reg := findRegistry(reflect.ValueOf(d.tel).Elem())
	if !reg.IsValid() {
		t.Fatal("admin.Telemetry holds no *prometheus.Registry")
	}
	byName := reg.Elem().FieldByName("dimHashesByName")
	if !byName.IsValid() || byName.Kind() != reflect.Map {
		t.Fatal("prometheus.Registry has no dimHashesByName map: client_golang changed; read its descriptors another way")
	}
	out := map[string]string{}
	for _, k := range byName.MapKeys() {
		if name := k.String(); strings.HasPrefix(name, "towerd_") {
			out[name] = ""
		}
	}
	mfs, err := d.tel.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, "towerd_") {
			continue
		}
		if _, ok := out[name]; !ok {
			t.Fatalf("%s is gathered but not among the registry's descriptors: the reflection reads the wrong map", name)
		}
		out[name] = metricType(mf.GetType())
	}
	if len(out) < 40 {
		t.Fatalf("only %d towerd_* families registered: %v", len(out), out)
	}
	return out
}

// findRegistry returns the first *prometheus.Registry among v's fields.
func findRegistry(v reflect.Value) reflect.Value {
	want := reflect.TypeFor[*prometheus.Registry]()
	for i := range v.NumField() {
		if f := v.Field(i); f.Type() == want && !f.IsNil() {
			return f
		}
	}
	return reflect.Value{}
}

func metricType(t dto.MetricType) string {
	switch t {
	case dto.MetricType_COUNTER:
		return "counter"
	case dto.MetricType_GAUGE:
		return "gauge"
	case dto.MetricType_HISTOGRAM:
		return "histogram"
	}
	return strings.ToLower(t.String())
}

// TestManualReloadColumn: the reload column of docs/configuration.md's key
// reference says what a reload does with each key, as reloadResult (the
// code behind SIGHUP and `towerd reload`) sorts it: "yes" when it is
// applied, "restart" when it waits for one. Each key is changed alone in
// the default configuration and the reload's verdict read back.
func TestManualReloadColumn(t *testing.T) {
	m, err := manual.Load(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	column := map[string]string{}
	for _, table := range m.Tables("key") {
		col := table.Column("reload")
		if col < 0 {
			continue
		}
		for _, row := range table.Rows {
			for _, key := range manual.KeysIn(row.Cells[0]) {
				column[key] = row.Cells[col]
			}
		}
	}
	base := config.DefaultConfig()
	for _, k := range manual.ConfigKeys(base) {
		doc, ok := column[k.Name]
		if !ok {
			continue // manual.TestManualConfigKeys names the key missing
		}
		next := withChanged(base, k)
		res := reloadResult(base, next, base)
		changed := config.Changed(base, next)
		if len(changed) != 1 {
			t.Fatalf("%s: changing it changed %v", k.Name, changed)
		}
		applied := slices.Contains(res.Applied, changed[0])
		switch {
		case applied && !strings.HasPrefix(doc, "yes"):
			t.Errorf("%s: a reload applies it; the manual's reload column says %q", k.Name, doc)
		case !applied && !strings.HasPrefix(doc, "restart"):
			t.Errorf("%s: a reload does not apply it (%v); the manual's reload column says %q", k.Name, res.RestartNeeded, doc)
		}
	}
}

// withChanged returns cfg with k's value changed: a string, number or bool
// to another, a list grown by one, a duration by a second; a key of an
// array of tables in a new table of its own.
func withChanged(cfg config.Config, k manual.ConfigKey) config.Config {
	v := reflect.ValueOf(&cfg).Elem()
	for _, step := range k.Path {
		v = v.Field(step.Field)
		if step.Slice {
			grow(v)
			v = v.Index(v.Len() - 1)
		}
	}
	switch {
	case v.Type() == reflect.TypeFor[config.Duration]():
		v.Set(reflect.ValueOf(config.Dur(v.Interface().(config.Duration).Duration + time.Second)))
	case v.Type() == reflect.TypeFor[config.OptionalDuration]():
		d := v.Interface().(config.OptionalDuration)
		v.Set(reflect.ValueOf(config.OptionalDuration{Duration: d.Duration + time.Second, Set: true}))
	case v.Kind() == reflect.String:
		v.SetString(v.String() + "x")
	case v.Kind() == reflect.Int, v.Kind() == reflect.Int64: // an int64 is a config.ByteSize
		v.SetInt(v.Int() + 1)
	case v.Kind() == reflect.Float64:
		v.SetFloat(v.Float() + 0.01)
	case v.Kind() == reflect.Bool:
		v.SetBool(!v.Bool())
	case v.Kind() == reflect.Slice:
		grow(v)
	case v.Kind() == reflect.Pointer && v.IsNil(): // an optional value (search.list[].ndots)
		v.Set(reflect.New(v.Type().Elem()))
	default:
		panic("withChanged: a key of kind " + v.Kind().String())
	}
	return cfg
}

// grow appends a zero element to the slice v holds, in a copy: the
// configuration changed shares no array with the one it came from.
func grow(v reflect.Value) {
	grown := reflect.MakeSlice(v.Type(), v.Len(), v.Len()+1)
	reflect.Copy(grown, v)
	v.Set(reflect.Append(grown, reflect.New(v.Type().Elem()).Elem()))
}
