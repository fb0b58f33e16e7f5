package test

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
)

// TestCachedAnswerCountsDown asks the same question twice with dig: the
// upstream sees one query, and the second answer's TTL is the record's 300 s
// less the whole seconds the entry has been cached.
func TestCachedAnswerCountsDown(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	const recordTTL = 300
	s.def.Add(t, "ttl.example. 300 IN A 192.0.2.11")

	t0 := time.Now()
	first := dig(t, s.d.UDP, "ttl.example.", "A")
	t1 := time.Now()
	// Not synchronisation: the countdown is what is tested, and it needs
	// wall-clock seconds to pass. towerd runs its own clock in its own process.
	<-time.After(2200 * time.Millisecond)
	t2 := time.Now()
	second := dig(t, s.d.UDP, "ttl.example.", "A")
	t3 := time.Now()

	for i, r := range []digResult{first, second} {
		if r.Status != "NOERROR" || len(r.Answer) != 1 || addresses(r.Answer)[0] != "192.0.2.11" {
			t.Fatalf("answer %d: status %s, records %v; want NOERROR with 192.0.2.11\n%s",
				i+1, r.Status, r.Answer, r.Output)
		}
	}
	if got := s.def.Count("ttl.example.", dns.TypeA); got != 1 {
		t.Errorf("upstream saw %d queries for ttl.example. A, want 1 (the second is a cache hit)", got)
	}

	firstTTL, secondTTL := int(first.Answer[0].Header().Ttl), int(second.Answer[0].Header().Ttl)
	if firstTTL != recordTTL {
		t.Errorf("first answer TTL %d, want the record's %d", firstTTL, recordTTL)
	}
	// The entry was stored between t0 and t1 and read between t2 and t3, so
	// it had been cached at least t2-t1 and at most t3-t0; allow ±1 around
	// recordTTL - floor(elapsed) for rounding at second boundaries.
	shortest, longest := t2.Sub(t1).Seconds(), t3.Sub(t0).Seconds()
	lo := recordTTL - int(math.Floor(longest)) - 1
	hi := recordTTL - int(math.Floor(shortest)) + 1
	t.Logf("first TTL %d, second TTL %d, cached for %.3f..%.3f s, accepted %d..%d",
		firstTTL, secondTTL, shortest, longest, lo, hi)
	if secondTTL < lo || secondTTL > hi {
		t.Errorf("second answer TTL %d, want %d - floor(elapsed) = %d..%d (±1)", secondTTL, recordTTL, lo, hi)
	}
	if secondTTL > firstTTL {
		t.Errorf("second answer TTL %d is above the first's %d", secondTTL, firstTTL)
	}
}

// TestNegativeAnswers: NXDOMAIN is never cached (a name that appears must be
// seen at once), NODATA is (RFC 2308, TTL from the SOA).
func TestNegativeAnswers(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	s.def.Add(t, "v4only.example. 300 IN A 192.0.2.12", "forced.example. 300 IN A 192.0.2.13")
	s.def.SetFault("gone.example.", dnstest.Fault{NXDOMAIN: true})
	s.def.SetFault("forced.example.", dnstest.Fault{NODATA: true})

	tests := []struct {
		name          string
		qname         string
		qtype         uint16
		wantRcode     int
		wantUpstreams int
	}{
		{"NXDOMAIN is not cached", "gone.example.", dns.TypeA, dns.RcodeNameError, 2},
		// getaddrinfo asks A and AAAA; an IPv4-only name answers AAAA with NODATA.
		{"NODATA for an IPv4-only name is cached", "v4only.example.", dns.TypeAAAA, dns.RcodeSuccess, 1},
		{"NODATA for any type is cached", "forced.example.", dns.TypeA, dns.RcodeSuccess, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for i := range 2 {
				reply := mustExchange(t, s.d.UDP, "udp", query(tc.qname, tc.qtype, true))
				if reply.Rcode != tc.wantRcode {
					t.Fatalf("answer %d: rcode %s, want %s", i+1, dns.RcodeToString[reply.Rcode], dns.RcodeToString[tc.wantRcode])
				}
				if len(reply.Answer) != 0 {
					t.Errorf("answer %d: %d records, want none: %v", i+1, len(reply.Answer), reply.Answer)
				}
				if len(reply.Ns) != 1 || reply.Ns[0].Header().Rrtype != dns.TypeSOA {
					t.Errorf("answer %d: authority %v, want the zone's SOA", i+1, reply.Ns)
				}
			}
			if got := s.def.Count(tc.qname, tc.qtype); got != tc.wantUpstreams {
				t.Errorf("upstream saw %d queries for %s %s, want %d", got, tc.qname, dns.TypeToString[tc.qtype], tc.wantUpstreams)
			}
		})
	}
}

// TestConcurrentMissesShareOneUpstreamQuery sends 100 identical queries for
// a cold name while the upstream holds its answer: towerd asks the upstream
// once and all 100 clients get the answer. Not parallel: the upstream must
// be released well inside towerd's first attempt timeout (500 ms before it
// has an RTT sample), so this test runs alone.
func TestConcurrentMissesShareOneUpstreamQuery(t *testing.T) {
	s := startStack(t)
	const name, clients = "popular.example.", 100
	s.def.Add(t, name+" 300 IN A 192.0.2.50")
	arrived, release := s.def.Hold(name)
	t.Cleanup(release)

	type result struct {
		reply *dns.Msg
		err   error
	}
	results := make(chan result, clients)
	var sent sync.WaitGroup
	sent.Add(clients)
	for range clients {
		go func() {
			c := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
			conn, err := c.Dial(s.d.UDP)
			if err != nil {
				sent.Done()
				results <- result{err: err}
				return
			}
			defer conn.Close()
			m := query(name, dns.TypeA, true)
			err = conn.WriteMsg(m)
			sent.Done()
			if err != nil {
				results <- result{err: err}
				return
			}
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			reply, err := conn.ReadMsg()
			if err == nil && reply.Id != m.Id {
				t.Errorf("reply ID %d for query ID %d", reply.Id, m.Id)
			}
			results <- result{reply, err}
		}()
	}
	allSent := make(chan struct{})
	go func() { sent.Wait(); close(allSent) }()
	var arrivedAt time.Time
	for pending := 2; pending > 0; pending-- {
		select {
		case <-allSent:
			allSent = nil
		case <-arrived:
			arrivedAt, arrived = time.Now(), nil
		case <-time.After(5 * time.Second):
			t.Fatalf("timed out waiting for all %d queries to be sent and the first to reach the upstream", clients)
		}
	}
	release()
	t.Logf("the upstream held the query %v; all %d client queries had been sent", time.Since(arrivedAt), clients)

	for range clients {
		r := <-results // each client gives up after 5 s
		if r.err != nil {
			t.Errorf("client: %v", r.err)
			continue
		}
		if r.reply.Rcode != dns.RcodeSuccess || len(r.reply.Answer) != 1 || addresses(r.reply.Answer)[0] != "192.0.2.50" {
			t.Errorf("client got rcode %s, answer %v; want NOERROR 192.0.2.50",
				dns.RcodeToString[r.reply.Rcode], r.reply.Answer)
		}
	}
	if got := s.def.Count(name, dns.TypeA); got != 1 {
		t.Errorf("upstream saw %d queries for %s, want exactly 1 for %d concurrent clients", got, name, clients)
	}
}
