package test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
)

// TestSplitForwarding: each name reaches only the upstream of its longest
// matching zone, matched case-insensitively, and the answer keeps the
// question as the client spelled it.
func TestSplitForwarding(t *testing.T) {
	t.Parallel()
	upstreams := map[string]*testUpstream{
		"default": newTestUpstream(t),
		"consul":  newTestUpstream(t),
		"corp":    newTestUpstream(t),
	}
	// Every upstream knows every name, each with its own address, so the
	// answer tells which one was asked.
	addr := map[string]string{"default": "192.0.2.1", "consul": "192.0.2.2", "corp": "192.0.2.3"}
	tests := []struct {
		qname string
		want  string // upstream that must get the query
	}{
		{"x.service.consul.", "consul"},
		{"Y.Service.CONSUL.", "consul"},
		{"example.org.", "default"},
		{"a.corp.example.", "corp"},
		{"B.CoRp.ExAmple.", "corp"},
		{"corp.example.", "corp"},          // the zone apex itself
		{"corp.example.org.", "default"},   // a suffix of the name, not of its labels
		{"notcorp.example.", "default"},    // label boundary
		{"consul.example.org.", "default"}, // "consul" not at the end
	}
	for name, u := range upstreams {
		for _, tc := range tests {
			u.Add(t, fmt.Sprintf("%s 300 IN A %s", tc.qname, addr[name]))
		}
	}
	cfg := writeConfig(t, fmt.Sprintf(`# split forwarding
[[zone]]
name = "corp.example."
servers = [%q]

[[zone]]
name = "consul."
servers = [%q]

[[zone]]
name = "."
servers = [%q]
`, upstreams["corp"].Addr, upstreams["consul"].Addr, upstreams["default"].Addr))
	d := startTowerd(t, "-config", cfg, "-listen", "127.0.0.1:0")

	for _, tc := range tests {
		t.Run(strings.TrimSuffix(tc.qname, "."), func(t *testing.T) {
			reply := mustExchange(t, d.UDP, "udp", query(tc.qname, dns.TypeA, true))
			if reply.Rcode != dns.RcodeSuccess {
				t.Fatalf("rcode %s, want NOERROR", dns.RcodeToString[reply.Rcode])
			}
			if len(reply.Question) != 1 || reply.Question[0].Name != tc.qname {
				t.Errorf("answer's question %v, want the client's spelling %q", reply.Question, tc.qname)
			}
			if got := addresses(reply.Answer); !slices.Equal(got, []string{addr[tc.want]}) {
				t.Errorf("answer %v, want [%s] from the %s upstream", got, addr[tc.want], tc.want)
			}
			for name, u := range upstreams {
				want := 0
				if name == tc.want {
					want = 1
				}
				if got := u.Count(tc.qname, dns.TypeA); got != want {
					t.Errorf("%s upstream saw %d queries, want %d", name, got, want)
				}
			}
		})
	}
}

// TestTruncation: towerd retries over TCP when its upstream truncates, and
// fits its own answers to what the client can take (512 bytes without EDNS),
// setting TC when they do not fit.
func TestTruncation(t *testing.T) {
	t.Parallel()
	s := startStack(t)

	s.def.Add(t, "tc.example. 300 IN A 192.0.2.21", "tc.example. 300 IN A 192.0.2.22", "tc.example. 300 IN A 192.0.2.23")
	s.def.SetFault("tc.example.", dnstest.Fault{TruncateUDP: true})
	t.Run("upstream truncates over UDP", func(t *testing.T) {
		reply := mustExchange(t, s.d.UDP, "udp", query("tc.example.", dns.TypeA, true))
		if reply.Rcode != dns.RcodeSuccess || reply.Truncated {
			t.Fatalf("rcode %s, TC %v; want NOERROR without TC", dns.RcodeToString[reply.Rcode], reply.Truncated)
		}
		want := []string{"192.0.2.21", "192.0.2.22", "192.0.2.23"}
		if got := addresses(reply.Answer); !slices.Equal(got, want) {
			t.Errorf("answer %v, want the full set %v fetched over TCP", got, want)
		}
		udp, tcp := s.def.CountNet("tc.example.", dns.TypeA, "udp"), s.def.CountNet("tc.example.", dns.TypeA, "tcp")
		if udp != 1 || tcp != 1 {
			t.Errorf("upstream saw %d UDP and %d TCP queries, want 1 and 1", udp, tcp)
		}
	})

	const records = 40
	var big []string
	for i := 1; i <= records; i++ {
		big = append(big, fmt.Sprintf("big.example. 300 IN A 10.0.0.%d", i))
	}
	s.def.Add(t, big...)
	tests := []struct {
		name        string
		digArgs     []string
		wantTC      bool
		wantRecords int // -1: some, fewer than all
		maxSize     int
	}{
		{"UDP without EDNS gets TC and at most 512 bytes", []string{"+noedns", "+ignore"}, true, -1, 512},
		{"TCP gets every record", []string{"+tcp"}, false, records, 65535},
		{"UDP with EDNS gets every record", []string{"+bufsize=1232"}, false, records, 1232},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := dig(t, s.d.UDP, append([]string{"big.example.", "A"}, tc.digArgs...)...)
			if r.Status != "NOERROR" {
				t.Fatalf("status %s, want NOERROR\n%s", r.Status, r.Output)
			}
			t.Logf("%d records in %d bytes, flags %v", len(r.Answer), r.MsgSize, r.Flags)
			if r.hasFlag("tc") != tc.wantTC {
				t.Errorf("flags %v, want TC %v", r.Flags, tc.wantTC)
			}
			if r.MsgSize == 0 || r.MsgSize > tc.maxSize {
				t.Errorf("message of %d bytes, want 1..%d", r.MsgSize, tc.maxSize)
			}
			switch {
			case tc.wantRecords >= 0 && len(r.Answer) != tc.wantRecords:
				t.Errorf("%d records, want %d", len(r.Answer), tc.wantRecords)
			case tc.wantRecords < 0 && len(r.Answer) >= records:
				t.Errorf("%d records in a truncated answer, want fewer than %d", len(r.Answer), records)
			}
		})
	}
	if got := s.def.Count("big.example.", dns.TypeA); got != 1 {
		t.Errorf("upstream saw %d queries for big.example., want 1 (the rest are cache hits)", got)
	}
}

// TestSpoofedRepliesAreIgnored: the upstream's genuine reply comes after
// three forgeries (wrong ID, wrong question, wrong source port). towerd must
// keep waiting past them and accept only the genuine one, in its first
// attempt.
func TestSpoofedRepliesAreIgnored(t *testing.T) {
	t.Parallel()
	const genuine, forged = "192.0.2.77", "203.0.113.66"
	spoof := newSpoofUpstream(t, genuine, forged)
	consul := newTestUpstream(t)
	d := startTowerd(t, "-config", "", "-listen", "127.0.0.1:0", "-upstream", spoof.Addr, "-consul-dns", consul.Addr)

	for i := range 2 {
		reply := mustExchange(t, d.UDP, "udp", query("bank.example.", dns.TypeA, true))
		if reply.Rcode != dns.RcodeSuccess {
			t.Fatalf("answer %d: rcode %s, want NOERROR", i+1, dns.RcodeToString[reply.Rcode])
		}
		if got := addresses(reply.Answer); !slices.Equal(got, []string{genuine}) {
			t.Errorf("answer %d: %v, want [%s]; %s is the forgeries' address", i+1, got, genuine, forged)
		}
	}
	// One query: the forgeries neither ended the attempt nor caused a retry,
	// and the second answer came from the cache.
	if got := spoof.queries.Load(); got != 1 {
		t.Errorf("upstream got %d queries, want 1", got)
	}
}
