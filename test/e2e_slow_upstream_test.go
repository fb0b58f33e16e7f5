package test

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
)

// TestSlowUpstreamIsAnswered is issue 11's slow day: after fast replies the
// upstream takes 250 ms, 400 ms, 700 ms, 1.5 s and 3 s per name. With the
// default configuration (query_timeout 1.8 s, max_attempts 3) a client with
// a 2 s timeout gets NOERROR on its first try for every name up to 1.5 s,
// the upstream never sees more than 3 queries per name, and the 3 s name,
// too slow for the client's first try, is answered on its retry from what
// the late reply left behind, without asking the upstream again.
func TestSlowUpstreamIsAnswered(t *testing.T) {
	t.Parallel()
	const slowest = "d3000ms.slow.test."
	// The upstream answers every name with an A record, after the name's
	// delay (the fault under test).
	up := newTestUpstream(t)
	up.SetScript(answerEveryA(net.IPv4(192, 0, 2, 80)))
	consul := newTestUpstream(t)
	d := startTowerd(t, "-config", "", "-listen", "127.0.0.1:0",
		"-upstream", up.Addr, "-consul-dns", consul.Addr)
	client := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
	ask := func(name string) (*dns.Msg, error) {
		reply, _, err := client.Exchange(query(name, dns.TypeA, true), d.UDP)
		return reply, err
	}
	const maxAttempts = 3 // upstream.max_attempts's default

	for i := range 5 {
		name := fmt.Sprintf("fast%d.slow.test.", i)
		if reply, err := ask(name); err != nil || reply.Rcode != dns.RcodeSuccess {
			t.Fatalf("%s: %v, %v; want NOERROR", name, reply, err)
		}
	}
	for _, delay := range []time.Duration{250 * time.Millisecond, 400 * time.Millisecond, 700 * time.Millisecond, 1500 * time.Millisecond} {
		name := fmt.Sprintf("d%dms.slow.test.", delay.Milliseconds())
		up.SetFault(name, dnstest.Fault{Delay: delay})
		reply, err := ask(name)
		if err != nil || reply.Rcode != dns.RcodeSuccess || len(reply.Answer) != 1 {
			t.Errorf("%s (upstream takes %s): %v, %v; want NOERROR with its A record on the first try", name, delay, reply, err)
		}
		if n := up.Count(name, dns.TypeA); n > maxAttempts {
			t.Errorf("%s: upstream saw %d queries, want at most %d", name, n, maxAttempts)
		}
	}

	up.SetFault(slowest, dnstest.Fault{Delay: 3 * time.Second})
	replied := up.Answered(slowest, 1)
	if reply, err := ask(slowest); err == nil && reply.Rcode == dns.RcodeSuccess {
		t.Logf("%s answered on the first try", slowest) // a slow machine; not wrong
	}
	select {
	case <-replied:
	case <-time.After(10 * time.Second):
		t.Fatalf("upstream never replied for %s", slowest)
	}
	// The resolution may still have an attempt on the way (its third
	// packet can cross the late reply): wait until it has ended, so that
	// what the upstream saw is what the first query cost.
	waitMetric(t, d, "towerd_inflight_resolutions", 0, 10*time.Second)
	sent := up.Count(slowest, dns.TypeA)
	reply, err := ask(slowest)
	if err != nil || reply.Rcode != dns.RcodeSuccess || len(reply.Answer) != 1 {
		t.Fatalf("%s on the retry: %v, %v; want NOERROR from the late reply", slowest, reply, err)
	}
	if n := up.Count(slowest, dns.TypeA); n != sent || n > maxAttempts {
		t.Errorf("%s: upstream saw %d queries, then %d after the retry; want at most %d and none for the retry",
			slowest, sent, n, maxAttempts)
	}
}
