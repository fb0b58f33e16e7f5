package test

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/towerd/towerd/test/dnstest"
)

// floodUpstream answers every A question on UDP: the flood's names with a
// made-up address (one in floodSlowEvery after floodSlowDelay, so that
// resolutions pile up against the in-flight cap), and cachedName(i) with
// cachedAddr(i). It counts how many queries it holds at once.
type floodUpstream struct {
	addr          string
	concurrent    atomic.Int64
	maxConcurrent atomic.Int64
	queries       atomic.Int64
}

// newFloodUpstream is the kit's upstream on UDP only, answering with the
// flood's Script.
func newFloodUpstream(t *testing.T) *floodUpstream {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &floodUpstream{}
	srv := dnstest.NewUpstreamOn(t, pc, nil)
	srv.SetScript(u.answer)
	u.addr = srv.Addr
	return u
}

// answer is the flood's Script. The kit runs it on miekg/dns's goroutine
// for the packet, so a slow answer holds only its own query.
func (u *floodUpstream) answer(r *dns.Msg, _ string) *dns.Msg {
	now := u.concurrent.Add(1)
	defer u.concurrent.Add(-1)
	for {
		seen := u.maxConcurrent.Load()
		if now <= seen || u.maxConcurrent.CompareAndSwap(seen, now) {
			break
		}
	}
	u.queries.Add(1)
	m := new(dns.Msg)
	m.SetReply(r)
	if r.Question[0].Qtype != dns.TypeA {
		return m // NODATA without SOA: not what the flood asks
	}
	name := r.Question[0].Name
	var addr net.IP
	var n, i int
	switch {
	case strings.HasPrefix(name, "cached-"):
		if _, err := fmt.Sscanf(name, "cached-%d.", &i); err == nil {
			addr = net.ParseIP(cachedAddr(i))
		}
	default:
		if _, err := fmt.Sscanf(name, "%d-", &n); err == nil && n%floodSlowEvery == 0 {
			// The delay is the behaviour under test (a slow upstream), not
			// a wait for something to happen.
			time.Sleep(floodSlowDelay)
		}
		addr = net.IPv4(198, 51, 100, byte(n))
	}
	if addr != nil {
		m.Answer = []dns.RR{&dns.A{
			Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 3600},
			A:   addr,
		}}
	}
	return m
}

// metricValue reads one unlabelled gauge or counter from /metrics. Unlike
// scrape it returns errors, so it may run outside the test's goroutine.
func metricValue(admin, name string) (float64, error) {
	client := &http.Client{Timeout: httpTimeout}
	resp, err := client.Get("http://" + admin + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, err
	}
	mf := mfs[name]
	if mf == nil || len(mf.GetMetric()) == 0 {
		return 0, fmt.Errorf("no %s in /metrics", name)
	}
	m := mf.GetMetric()[0]
	if g := m.GetGauge(); g != nil {
		return g.GetValue(), nil
	}
	return m.GetCounter().GetValue(), nil
}
