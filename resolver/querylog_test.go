package resolver

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/towerd/towerd/test/dnstest"
)

// logLines returns the JSON lines written to out so far, decoded.
func logLines(t *testing.T, out *dnstest.SyncBuffer) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		lines = append(lines, m)
	}
	return lines
}

// The query log writes one line per answer with its source: the upstream
// (naming the server that replied), the cache (the fast path), a stale
// entry, and the pushed records of a RecordSource (the Consul watch, faked
// here: the e2e tests with a real agent would take seconds per case). It
// writes at info even under a logger at warn, and nothing once it is off.
func TestQueryLogLines(t *testing.T) {
	var out dnstest.SyncBuffer
	e := buildEnv(t, func(c *Config) { c.Records = diffRecords{} }, nil, func(h *Handler, _ *Server) {
		h.queryLog = newQueryLog(slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn})))
	})
	if e.h.LogQueries() {
		t.Fatal("the query log is on by default")
	}
	e.query("www.example.")
	if n := len(logLines(t, &out)); n != 0 {
		t.Fatalf("%d lines logged while the log is off", n)
	}
	if was := e.h.SetLogQueries(true); was {
		t.Fatal("SetLogQueries reported the log was on")
	}

	e.query("fresh.example.") // upstream
	e.query("FRESH.example.") // cache, fast path
	e.query("www.example.")   // cache (cached before the log was on)
	e.clock.Advance(301 * time.Second)
	e.up.mode.Store("servfail")
	if r := e.query("www.example."); !hasEDE(r, dns.ExtendedErrorCodeStaleAnswer) {
		t.Fatalf("want a stale answer, got %v", r)
	}
	e.query("bad.example.")        // SERVFAIL from the upstream, nothing stale
	e.query("web.service.consul.") // the RecordSource
	e.h.SetLogQueries(false)
	e.query("fresh.example.")

	want := []map[string]any{
		{"name": "fresh.example.", "source": "upstream", "upstream": e.up.addr, "rcode": "NOERROR", "zone": "."},
		{"name": "fresh.example.", "source": "cache", "rcode": "NOERROR"},
		{"name": "www.example.", "source": "cache", "rcode": "NOERROR"},
		{"name": "www.example.", "source": "stale", "rcode": "NOERROR"},
		{"name": "bad.example.", "source": "upstream", "upstream": e.up.addr, "rcode": "SERVFAIL"},
		{"name": "web.service.consul.", "source": "consul", "rcode": "NOERROR"},
	}
	got := logLines(t, &out)
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g["msg"] != "query" || g["level"] != "INFO" || g["client"] != "127.0.0.1" || g["type"] != "A" || g["proto"] != "udp" {
			t.Errorf("line %d: %v", i, g)
		}
		if _, ok := g["duration"].(float64); !ok {
			t.Errorf("line %d has no duration: %v", i, g)
		}
		if _, has := g["upstream"]; has != (w["upstream"] != nil) {
			t.Errorf("line %d: upstream field %v, want %v", i, g["upstream"], w["upstream"])
		}
		for k, v := range w {
			if g[k] != v {
				t.Errorf("line %d: %s = %v, want %v (%v)", i, k, g[k], v, g)
			}
		}
	}
}

// The query log writes at most QueryLogRate lines in a second of the
// clock and counts the rest; the next second lets lines through again.
func TestQueryLogRate(t *testing.T) {
	var out dnstest.SyncBuffer
	e := buildEnv(t, func(c *Config) { c.QueryLogRate = 3 }, nil, func(h *Handler, _ *Server) {
		h.queryLog = newQueryLog(slog.New(slog.NewJSONHandler(&out, nil)))
	})
	e.h.SetLogQueries(true)
	for range 5 {
		e.query("www.example.")
	}
	if n, dropped := len(logLines(t, &out)), e.h.QueryLogDropped(); n != 3 || dropped != 2 {
		t.Errorf("5 queries in a second: %d lines, %d dropped; want 3 and 2", n, dropped)
	}
	e.clock.Advance(time.Second)
	e.query("www.example.")
	if n := len(logLines(t, &out)); n != 4 {
		t.Errorf("the next second: %d lines in all, want 4", n)
	}
}

// Trace returns the reply and the observation of a real query: the second
// ask of a name comes from the cache, the first from the upstream server.
func TestTraceNamesTheSource(t *testing.T) {
	e := newEnv(t, nil)
	m := new(dns.Msg)
	m.SetQuestion("trace.example.", dns.TypeA)
	for i, want := range []struct{ source, server string }{{SourceUpstream, e.up.addr}, {SourceCache, ""}} {
		reply, q := e.h.Trace(m, netipLoopback)
		if reply == nil || reply.Rcode != dns.RcodeSuccess || len(reply.Answer) != 1 {
			t.Fatalf("ask %d: reply %v", i, reply)
		}
		if q.Source != want.source || q.Server != want.server || q.Zone != "." || q.Proto != "tcp" {
			t.Errorf("ask %d: observed %+v, want source %s server %q", i, q, want.source, want.server)
		}
	}
}

var netipLoopback = netip.MustParseAddr("127.0.0.1")

// BenchmarkAnswerPacketHitQueryLog is BenchmarkAnswerPacketHit with the
// query log on, written by slog's text handler to io.Discard: what a line
// costs on top of a hit.
func BenchmarkAnswerPacketHitQueryLog(b *testing.B) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	h, _ := diffHandler(b, m)
	h.queryLog = newQueryLog(slog.New(slog.NewTextHandler(io.Discard, nil)))
	h.SetLogQueries(true)
	benchHit(b, h)
}
