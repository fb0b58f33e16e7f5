package cache

import (
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestShapeMatchesHit: what Shape makes of an upstream reply is what Get
// returns for it right after Set, record for record (issue 11: the first
// answer looks like every later hit), and for replies that are not stored
// it follows the same TTL rules.
func TestShapeMatchesHit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rcode int
		s     sections
		want  uint32 // TTL of every record after shaping
	}{
		{"huge TTL clamped by max_ttl", dns.RcodeSuccess, sections{answer: []string{"www.example.com. 2147483647 IN A 192.0.2.1"}}, 86400},
		{"TTL with the top bit set is 0 (RFC 2181 §8)", dns.RcodeSuccess, sections{answer: []string{"www.example.com. 4294967280 IN A 192.0.2.1"}}, 0},
		{"smallest TTL of the reply", dns.RcodeSuccess, sections{
			answer: []string{"www.example.com. 300 IN CNAME a.example.com.", "a.example.com. 40 IN A 192.0.2.1"},
			extra:  []string{"a.example.com. 500 IN AAAA 2001:db8::1"}}, 40},
		{"NODATA: min(SOA TTL, MINIMUM) (RFC 2308 §5)", dns.RcodeSuccess, sections{ns: []string{soa(3600, 30)}}, 30},
		{"NODATA after a CNAME: MINIMUM bounds it", dns.RcodeSuccess, sections{
			answer: []string{"www.example.com. 300 IN CNAME a.example.com."}, ns: []string{soa(3600, 20)}}, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := newTestCache(t, Config{Capacity: 10, MaxTTL: 24 * time.Hour, MaxStaleAge: time.Hour})
			m := reply(t, tc.rcode, tc.s)
			m.SetEdns0(1232, false)
			before := m.String()
			shaped := firstAnswer(t, c, m)
			if m.String() != before {
				t.Fatal("preparing the answer modified the reply")
			}
			if shaped.IsEdns0() != nil {
				t.Error("shaped reply kept the upstream's OPT")
			}
			for _, rr := range append(append(append([]dns.RR(nil), shaped.Answer...), shaped.Ns...), shaped.Extra...) {
				if rr.Header().Ttl != tc.want {
					t.Errorf("%v: TTL %d, want %d", rr, rr.Header().Ttl, tc.want)
				}
			}
			k := keyA("www.example.com.")
			mustSet(t, c, k, m)
			hit, ok := c.Get(k)
			if !ok {
				t.Fatal("stored reply not found")
			}
			hit.Msg.Id, shaped.Id = 0, 0
			if got, want := hit.Msg.String(), shaped.String(); got != want {
				t.Errorf("hit after Set:\n%s\nShape:\n%s", got, want)
			}
		})
	}
}

// TestShapeNXDOMAIN: a reply that is never stored gets the negative TTL of
// RFC 2308 §5 all the same.
func TestShapeNXDOMAIN(t *testing.T) {
	c, _ := newTestCache(t, Config{Capacity: 10, MinTTL: 5 * time.Second, MaxStaleAge: time.Hour})
	shaped := firstAnswer(t, c, reply(t, dns.RcodeNameError, sections{ns: []string{soa(3600, 60)}}))
	if len(shaped.Ns) != 1 || shaped.Ns[0].Header().Ttl != 60 {
		t.Fatalf("NXDOMAIN authority %v, want the SOA at TTL 60", shaped.Ns)
	}
	shaped = firstAnswer(t, c, reply(t, dns.RcodeNameError, sections{ns: []string{soa(3600, 1)}}))
	if shaped.Ns[0].Header().Ttl != 5 {
		t.Fatalf("NXDOMAIN SOA TTL %d, want min_ttl 5", shaped.Ns[0].Header().Ttl)
	}
}

// firstAnswer is what the clients waiting for a resolution get for m, the
// reply of its own question: the answer the entry builder prepares from
// its bytes (PrepareAnswer), as Message shows it, with m's ID.
func firstAnswer(t *testing.T, c *Cache, m *dns.Msg) *dns.Msg {
	t.Helper()
	raw, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	q := m.Question[0]
	a, reason := c.PrepareAnswer(NewKey(q.Name, q.Qtype, q.Qclass, false, false), raw)
	if reason != "" {
		t.Fatalf("not prepared: %s", reason)
	}
	out := a.Message()
	out.Id = m.Id
	return out
}
