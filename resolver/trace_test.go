package resolver

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
)

// passingRecords stands for the Consul watch: it answers nothing and says
// why for the names of its domain, as the watch does for a service it does
// not hold.
type passingRecords struct{}

const passingWhy = "not watched"

func (passingRecords) Answer(q dns.Question) (*dns.Msg, bool, string, bool) {
	if strings.HasSuffix(strings.ToLower(q.Name), ".consul.") {
		return nil, false, passingWhy, false
	}
	return nil, false, "", false
}
func (passingRecords) Covers(name []byte) bool { return bytes.HasSuffix(name, []byte(".consul.")) }

// Trace's observation names what answered, as the answer was made (issue
// 25): local data's rule, the request checks, the reason the watch passed
// a name on, and how the cache entry that answered came in.
func TestTraceNamesWhatAnswered(t *testing.T) {
	h, _ := diffHandlerWith(t, nil, func(c *Config) {
		c.Records = Chain{{RecordSource: diffLocal, Label: SourceLocal}, {RecordSource: passingRecords{}, Label: SourceRecords}}
	})
	client := netip.MustParseAddr("127.0.0.1")
	trace := func(name string, qtype uint16) Query {
		t.Helper()
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		reply, q := h.Trace(m, client)
		if reply == nil || reply.Rcode != q.Rcode {
			t.Fatalf("%s: reply %v, observed rcode %d", name, reply, q.Rcode)
		}
		return q
	}
	for _, tc := range []struct {
		name   string
		qtype  uint16
		source string
		rcode  int
		rule   string
		passed string
	}{
		{"printer.lan.", dns.TypeA, SourceLocal, dns.RcodeSuccess, "record", ""},
		{"x.ads.test.", dns.TypeA, SourceLocal, dns.RcodeSuccess, "address ads.test.", ""},
		{"foo.", dns.TypeA, SourceLocal, dns.RcodeNameError, "domain_needed", ""},
		{"5.1.168.192.in-addr.arpa.", dns.TypePTR, SourceLocal, dns.RcodeSuccess, "record", ""}, // printer.lan.'s
		{"6.1.168.192.in-addr.arpa.", dns.TypePTR, SourceLocal, dns.RcodeNameError, "bogus_priv", ""},
		{"www.example.", dns.TypeAXFR, SourceLocal, dns.RcodeRefused, RuleRequest, ""},
		{"db.service.consul.", dns.TypeA, SourceUpstream, dns.RcodeSuccess, "", passingWhy},
		{"www.example.", dns.TypeA, SourceUpstream, dns.RcodeSuccess, "", ""},
	} {
		q := trace(tc.name, tc.qtype)
		if q.Source != tc.source || q.Rcode != tc.rcode || q.Rule != tc.rule || q.Passed != tc.passed {
			t.Errorf("%s %s: source %s rcode %s rule %q passed %q; want %s %s %q %q", tc.name, dns.TypeToString[tc.qtype],
				q.Source, dns.RcodeToString[q.Rcode], q.Rule, q.Passed, tc.source, dns.RcodeToString[tc.rcode], tc.rule, tc.passed)
		}
	}

	// The entry an upstream's reply made, then the same entry loaded by an
	// operator's file.
	if q := trace("www.example.", dns.TypeA); q.Source != SourceCache || q.Entry != cache.OriginStored || q.Rule != "" {
		t.Errorf("cached: %+v, want a cache answer of an upstream's entry", q)
	}
	var snap bytes.Buffer
	if _, err := h.cache.Dump(&snap); err != nil {
		t.Fatal(err)
	}
	h.cache.Flush()
	if _, err := h.cache.LoadWith(&snap, cache.LoadOptions{Imported: true}); err != nil {
		t.Fatal(err)
	}
	if q := trace("www.example.", dns.TypeA); q.Source != SourceCache || q.Entry != cache.OriginImported {
		t.Errorf("after a load: %+v, want a cache answer of an imported entry", q)
	}
}
