package cache

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// mustRR parses one record in presentation format.
func mustRR(t testing.TB, s string) dns.RR {
	t.Helper()
	rr, err := dns.NewRR(s)
	if err != nil {
		t.Fatalf("dns.NewRR(%q): %v", s, err)
	}
	return rr
}

func mustRRs(t testing.TB, ss ...string) []dns.RR {
	t.Helper()
	var out []dns.RR
	for _, s := range ss {
		out = append(out, mustRR(t, s))
	}
	return out
}

// sections are the record sections of a test reply, in presentation format.
type sections struct {
	answer, ns, extra []string
}

// reply builds an upstream reply to "www.example.com. A" with the given rcode.
func reply(t testing.TB, rcode int, s sections) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion("www.example.com.", dns.TypeA)
	m.Response = true
	m.Rcode = rcode
	m.Answer = mustRRs(t, s.answer...)
	m.Ns = mustRRs(t, s.ns...)
	m.Extra = mustRRs(t, s.extra...)
	return m
}

const (
	soaRR = "example.com. %d IN SOA ns1.example.com. hostmaster.example.com. 1 7200 900 1209600 %d"
	nsRR  = "example.com. 100 IN NS ns1.example.com."
)

// soa is an SOA record for example.com. with the given TTL and MINIMUM.
func soa(ttl, minimum int) string {
	return fmt.Sprintf(soaRR, ttl, minimum)
}

// prepareReply is the entry the resolver makes of m, an upstream's reply
// to k: packed, then prepareAnswer (PrepareAnswer's), or why not.
func prepareReply(k Key, m *dns.Msg, bounds ttlBounds) (WireAnswer, string) {
	raw, err := m.Pack()
	if err != nil {
		return WireAnswer{}, "pack failed"
	}
	return prepareAnswer(k, raw, bounds)
}

// withoutTransportRRs returns s without the records that belong to one
// exchange rather than to the data: OPT (RFC 6891 §6.1.1) and TSIG (RFC
// 8945). s is not modified.
func withoutTransportRRs(s []dns.RR) []dns.RR {
	if !slices.ContainsFunc(s, isTransportRR) {
		return s
	}
	var kept []dns.RR
	for _, rr := range s {
		if !isTransportRR(rr) {
			kept = append(kept, rr)
		}
	}
	return kept
}

func isTransportRR(rr dns.RR) bool {
	t := rr.Header().Rrtype
	return t == dns.TypeOPT || t == dns.TypeTSIG
}

// prepare is the store policy for m, a reply to its own question: the
// entry prepareReply makes, or why it is refused.
func prepare(m *dns.Msg, bounds ttlBounds) (prepared, string) {
	var k Key
	if m != nil && len(m.Question) == 1 {
		k = NewKey(m.Question[0].Name, m.Question[0].Qtype, m.Question[0].Qclass, false, false)
	}
	a, reason := prepareReply(k, m, bounds)
	if reason == "" {
		reason = a.storable()
	}
	if reason != "" {
		return prepared{}, reason
	}
	return a.prepared, ""
}

func TestPrepareRefuses(t *testing.T) {
	positive := sections{answer: []string{"www.example.com. 300 IN A 192.0.2.1"}}
	negative := sections{ns: []string{soa(3600, 300)}}
	truncated := reply(t, dns.RcodeSuccess, positive)
	truncated.Truncated = true
	unnamed := reply(t, 3000, positive)
	unnamed.SetEdns0(1232, false) // the rcode's upper bits travel in the OPT record
	tooLarge := reply(t, dns.RcodeSuccess, sections{})
	for i := 0; i < 300; i++ {
		rr := mustRR(t, `www.example.com. 300 IN TXT "x"`).(*dns.TXT)
		rr.Txt = []string{strings.Repeat(string(rune('a'+i%26)), 255)}
		tooLarge.Answer = append(tooLarge.Answer, rr)
	}

	tests := []struct {
		name   string
		msg    *dns.Msg
		reason string
	}{
		{"truncated", truncated, "truncated"},
		{"nxdomain", reply(t, dns.RcodeNameError, negative), "rcode NXDOMAIN"},
		{"servfail", reply(t, dns.RcodeServerFailure, sections{}), "rcode SERVFAIL"},
		{"refused", reply(t, dns.RcodeRefused, sections{}), "rcode REFUSED"},
		{"formerr", reply(t, dns.RcodeFormatError, sections{}), "rcode FORMERR"},
		{"notimp", reply(t, dns.RcodeNotImplemented, sections{}), "rcode NOTIMP"},
		{"servfail with answer", reply(t, dns.RcodeServerFailure, positive), "rcode SERVFAIL"},
		{"unnamed rcode", unnamed, "rcode 3000"},
		{"over 65535 bytes", tooLarge, "too large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, reason := prepare(tt.msg, ttlBounds{})
			if reason != tt.reason {
				t.Errorf("reason = %q, want %q", reason, tt.reason)
			}
			if p.data != nil {
				t.Errorf("refused reply still produced a message to store")
			}
		})
	}
}

func TestPrepareKindAndTTL(t *testing.T) {
	const s = time.Second
	tests := []struct {
		name     string
		sections sections
		bounds   ttlBounds
		kind     Kind
		ttl      time.Duration
	}{
		{
			name:     "single answer",
			sections: sections{answer: []string{"www.example.com. 300 IN A 192.0.2.1"}},
			kind:     Positive, ttl: 300 * s,
		},
		{
			name: "smallest over answer authority and additional",
			sections: sections{
				answer: []string{"www.example.com. 300 IN A 192.0.2.1", "www.example.com. 200 IN A 192.0.2.2"},
				ns:     []string{nsRR},
				extra:  []string{"ns1.example.com. 50 IN A 192.0.2.53"},
			},
			kind: Positive, ttl: 50 * s,
		},
		{
			name:     "min clamp raises",
			sections: sections{answer: []string{"www.example.com. 30 IN A 192.0.2.1"}},
			bounds:   ttlBounds{min: 60 * s},
			kind:     Positive, ttl: 60 * s,
		},
		{
			name:     "max clamp lowers",
			sections: sections{answer: []string{"www.example.com. 86400 IN A 192.0.2.1"}},
			bounds:   ttlBounds{min: 5 * s, max: 3600 * s},
			kind:     Positive, ttl: 3600 * s,
		},
		{
			name:     "ttl 0 is stored at 0",
			sections: sections{answer: []string{"web.service.consul. 0 IN A 192.0.2.1"}},
			bounds:   ttlBounds{max: 3600 * s},
			kind:     Positive, ttl: 0,
		},
		{
			name:     "ttl 0 raised by min clamp",
			sections: sections{answer: []string{"web.service.consul. 0 IN A 192.0.2.1"}},
			bounds:   ttlBounds{min: 2 * s},
			kind:     Positive, ttl: 2 * s,
		},
		{
			name:     "top bit set counts as 0 (RFC 2181 8)",
			sections: sections{answer: []string{"www.example.com. 2147483648 IN A 192.0.2.1"}},
			kind:     Positive, ttl: 0,
		},
		{
			name:     "largest legal ttl",
			sections: sections{answer: []string{"www.example.com. 2147483647 IN A 192.0.2.1"}},
			kind:     Positive, ttl: 2147483647 * s,
		},
		{
			name:     "nodata soa minimum smaller",
			sections: sections{ns: []string{soa(3600, 300)}},
			kind:     NoData, ttl: 300 * s,
		},
		{
			name:     "nodata soa ttl smaller",
			sections: sections{ns: []string{soa(60, 300)}},
			kind:     NoData, ttl: 60 * s,
		},
		{
			name:     "nodata ignores other authority ttls",
			sections: sections{ns: []string{nsRR, soa(3600, 900)}},
			kind:     NoData, ttl: 900 * s,
		},
		{
			name:     "nodata without soa, no nodata TTL: 0",
			sections: sections{ns: []string{nsRR}},
			kind:     NoData, ttl: 0,
		},
		{
			// dnsmasq's AAAA for a local= IPv4-only name (issue 23).
			name:     "nodata without soa or records gets the nodata TTL",
			sections: sections{},
			bounds:   ttlBounds{noData: 5 * s},
			kind:     NoData, ttl: 5 * s,
		},
		{
			name:     "nodata without soa, bounded by its records",
			sections: sections{ns: []string{"example.com. 3 IN NS ns1.example.com."}},
			bounds:   ttlBounds{noData: 5 * s},
			kind:     NoData, ttl: 3 * s,
		},
		{
			name:     "nodata without soa, clamped",
			sections: sections{},
			bounds:   ttlBounds{noData: 5 * s, min: 10 * s},
			kind:     NoData, ttl: 10 * s,
		},
		{
			name:     "the nodata TTL is not a negative answer's with an soa",
			sections: sections{ns: []string{soa(3600, 300)}},
			bounds:   ttlBounds{noData: 5 * s},
			kind:     NoData, ttl: 300 * s,
		},
		{
			name:     "nodata clamped",
			sections: sections{ns: []string{soa(3600, 3600)}},
			bounds:   ttlBounds{max: 600 * s},
			kind:     NoData, ttl: 600 * s,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, reason := prepare(reply(t, dns.RcodeSuccess, tt.sections), tt.bounds)
			if reason != "" {
				t.Fatalf("refused: %q", reason)
			}
			if p.kind != tt.kind {
				t.Errorf("kind = %v, want %v", p.kind, tt.kind)
			}
			if p.ttl != tt.ttl {
				t.Errorf("ttl = %v, want %v", p.ttl, tt.ttl)
			}
		})
	}
}

func TestPrepareStripsTransportRecords(t *testing.T) {
	m := reply(t, dns.RcodeSuccess, sections{
		answer: []string{"www.example.com. 300 IN A 192.0.2.1"},
		extra:  []string{"ns1.example.com. 120 IN A 192.0.2.53"},
	})
	m.SetEdns0(1232, true) // OPT "TTL" is flags, 0 here: must not count
	m.Extra = append(m.Extra, &dns.TSIG{
		Hdr:       dns.RR_Header{Name: "key.", Rrtype: dns.TypeTSIG, Class: dns.ClassANY, Ttl: 0},
		Algorithm: dns.HmacSHA256, Fudge: 300, OrigId: m.Id,
	})

	p, reason := prepare(m, ttlBounds{})
	if reason != "" {
		t.Fatalf("refused: %q", reason)
	}
	if p.ttl != 120*time.Second {
		t.Errorf("ttl = %v, want 2m0s (OPT and TSIG ignored)", p.ttl)
	}
	stored := new(dns.Msg)
	if err := stored.Unpack(p.wire()); err != nil {
		t.Fatal(err)
	}
	if len(stored.Extra) != 1 || stored.Extra[0].Header().Rrtype != dns.TypeA {
		t.Errorf("stored Extra = %v, want only the glue A", stored.Extra)
	}
	if len(m.Extra) != 3 {
		t.Errorf("caller's Extra changed to %d records, want 3", len(m.Extra))
	}

	// The stored message is a deep copy: the caller may reuse its reply.
	m.Answer[0].(*dns.A).A = net.IPv4(198, 51, 100, 1)
	m.Answer[0].Header().Ttl = 1
	if err := stored.Unpack(p.wire()); err != nil {
		t.Fatal(err)
	}
	got := stored.Answer[0].(*dns.A)
	if !got.A.Equal(net.IPv4(192, 0, 2, 1)) || got.Hdr.Ttl != 300 {
		t.Errorf("stored answer changed with the caller's message: %v", got)
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{Positive: "positive", NoData: "nodata", 0: "Kind(0)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", uint8(k), got, want)
		}
	}
}
