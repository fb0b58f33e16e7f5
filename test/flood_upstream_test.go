package test

import (
	"context"
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
	srv           *dns.Server
}

func newFloodUpstream(t *testing.T) *floodUpstream {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &floodUpstream{addr: pc.LocalAddr().String()}
	started := make(chan struct{})
	served := make(chan error, 1)
	u.srv = &dns.Server{PacketConn: pc, Net: "udp", Handler: u, NotifyStartedFunc: func() { close(started) }}
	go func() { served <- u.srv.ActivateAndServe() }()
	select {
	case <-started:
	case err := <-served:
		t.Fatalf("flood upstream: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = u.srv.ShutdownContext(ctx)
		<-served
	})
	return u
}

// ServeDNS implements dns.Handler. miekg/dns runs it on its own goroutine
// per packet, so a slow answer holds only its own query.
func (u *floodUpstream) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
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
	if len(r.Question) != 1 || r.Question[0].Qtype != dns.TypeA {
		_ = w.WriteMsg(m) // NODATA without SOA: not what the flood asks
		return
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
	_ = w.WriteMsg(m)
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
