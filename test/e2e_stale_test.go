package test

import (
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
)

// Serve-stale defaults (RFC 8767) that the answers below must show.
const (
	staleAnswerTTL = 30 // serve_stale.answer_ttl
	edeStaleAnswer = 3  // RFC 8914 "Stale Answer"
)

// staleTTL is the TTL of the stale answer for an entry of TTL ttl: the
// stale answer TTL, never more than the answer had fresh (issue 23), so 0
// for the TTL-0 names (Consul's default) these tests keep stale.
func staleTTL(ttl uint32) uint32 { return min(staleAnswerTTL, ttl) }

// TestServeStale warms the cache with a TTL-0 record (Consul's default: stored
// already expired, so it is only stale material), breaks the upstream in
// each of the ways RFC 8767 serves stale for, and checks that the name
// still answers stale while a name never seen gets SERVFAIL.
func TestServeStale(t *testing.T) {
	t.Parallel()
	const name, never, addr = "stale.example.", "never.example.", "192.0.2.30"
	tests := []struct {
		name         string
		failUpstream func(t *testing.T, s stack)
	}{
		{"port closed", func(t *testing.T, s stack) { s.def.Stop() }},
		{"black hole", func(t *testing.T, s stack) {
			s.def.Stop()
			newBlackhole(t, s.def.Addr)
		}},
		{"SERVFAIL", func(t *testing.T, s stack) {
			s.def.SetFault(name, dnstest.Fault{Rcode: dns.RcodeServerFailure})
			s.def.SetFault(never, dnstest.Fault{Rcode: dns.RcodeServerFailure})
		}},
		{"REFUSED", func(t *testing.T, s stack) {
			s.def.SetFault(name, dnstest.Fault{Rcode: dns.RcodeRefused})
			s.def.SetFault(never, dnstest.Fault{Rcode: dns.RcodeRefused})
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startStack(t)
			s.def.Add(t, name+" 0 IN A "+addr)

			warm := dig(t, s.d.UDP, name, "A")
			if warm.Status != "NOERROR" || !slices.Equal(addresses(warm.Answer), []string{addr}) {
				t.Fatalf("warm-up: status %s, answer %v; want NOERROR %s", warm.Status, warm.Answer, addr)
			}
			if ttl := warm.Answer[0].Header().Ttl; ttl != 0 {
				t.Errorf("warm-up answer TTL %d, want the upstream's 0", ttl)
			}
			tc.failUpstream(t, s)

			// dig speaks EDNS, so the stale answer carries EDE 3. It must
			// come inside dig's 5 s: after the client response timer at
			// the latest, not after the whole upstream budget.
			start := time.Now()
			r := dig(t, s.d.UDP, name, "A")
			t.Logf("stale answer after %v", time.Since(start))
			if r.Status != "NOERROR" || !slices.Equal(addresses(r.Answer), []string{addr}) {
				t.Fatalf("status %s, answer %v; want the stale NOERROR %s\n%s", r.Status, r.Answer, addr, r.Output)
			}
			if ttl := r.Answer[0].Header().Ttl; ttl != staleTTL(0) {
				t.Errorf("stale answer TTL %d, want %d", ttl, staleTTL(0))
			}
			if !r.OPT || !r.hasEDE(edeStaleAnswer) {
				t.Errorf("EDNS client: OPT %v, EDE %v; want EDE %d (Stale Answer)\n%s", r.OPT, r.EDE, edeStaleAnswer, r.Output)
			}

			// Without EDNS: the same stale answer and no OPT at all.
			reply := mustExchange(t, s.d.UDP, "udp", query(name, dns.TypeA, false))
			if reply.Rcode != dns.RcodeSuccess || !slices.Equal(addresses(reply.Answer), []string{addr}) {
				t.Fatalf("no EDNS: rcode %s, answer %v; want the stale NOERROR %s",
					dns.RcodeToString[reply.Rcode], reply.Answer, addr)
			}
			if ttl := reply.Answer[0].Header().Ttl; ttl != staleTTL(0) {
				t.Errorf("no EDNS: stale answer TTL %d, want %d", ttl, staleTTL(0))
			}
			if reply.IsEdns0() != nil {
				t.Errorf("no EDNS: the answer carries an OPT record: %v", reply.IsEdns0())
			}

			// Nothing stale to fall back on: SERVFAIL.
			r = dig(t, s.d.UDP, never, "A")
			if r.Status != "SERVFAIL" {
				t.Errorf("never-seen name: status %s, want SERVFAIL\n%s", r.Status, r.Output)
			}
		})
	}

	// The black hole, once more, on its own: how many packets one stale
	// answer cost the dead upstream.
	t.Run("black hole packets", func(t *testing.T) {
		t.Parallel()
		s := startStack(t)
		s.def.Add(t, name+" 0 IN A "+addr)
		dig(t, s.d.UDP, name, "A")
		s.def.Stop()
		hole := newBlackhole(t, s.def.Addr)
		start := time.Now()
		r := dig(t, s.d.UDP, name, "A")
		elapsed, packets := time.Since(start), hole.packets.Load()
		t.Logf("stale answer after %v; the black hole got %d packets by then", elapsed, packets)
		if r.Status != "NOERROR" || !r.hasEDE(edeStaleAnswer) {
			t.Errorf("status %s, EDE %v; want a stale NOERROR with EDE %d", r.Status, r.EDE, edeStaleAnswer)
		}
		// upstream.max_attempts (3) bounds the packets one resolution sends.
		if packets < 1 || packets > 3 {
			t.Errorf("black hole got %d packets, want 1..3 (upstream.max_attempts)", packets)
		}
	})

	// NXDOMAIN is an answer, not a failure: it replaces the stale entry and
	// is not cached itself, so the next query asks the upstream again.
	t.Run("NXDOMAIN replaces stale", func(t *testing.T) {
		t.Parallel()
		s := startStack(t)
		const gone = "gone.example."
		s.def.Add(t, gone+" 0 IN A 192.0.2.31")
		if r := dig(t, s.d.UDP, gone, "A"); r.Status != "NOERROR" || len(r.Answer) != 1 {
			t.Fatalf("warm-up: status %s, answer %v; want NOERROR 192.0.2.31", r.Status, r.Answer)
		}
		s.def.SetFault(gone, dnstest.Fault{NXDOMAIN: true})
		for i := 2; i <= 3; i++ {
			r := dig(t, s.d.UDP, gone, "A")
			if r.Status != "NXDOMAIN" || len(r.Answer) != 0 {
				t.Errorf("query %d: status %s, answer %v; want NXDOMAIN and no records", i, r.Status, r.Answer)
			}
			if got := s.def.Count(gone, dns.TypeA); got != i {
				t.Errorf("after query %d the upstream saw %d queries, want %d", i, got, i)
			}
		}
	})
}
