package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/test/dnstest"
)

// watchedRecords stands for the daemon's local data and Consul watch: it
// covers one name.
type watchedRecords struct{}

func (watchedRecords) Answer(dns.Question) (*dns.Msg, bool, string, bool) {
	return nil, false, "", false
}
func (watchedRecords) Covers(name []byte) bool { return string(name) == "web.service.consul." }

// reply builds an upstream reply to name/qtype from presentation records.
func forgedReply(t *testing.T, name string, qtype uint16, answer, ns, extra []string) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.Response = true
	for _, sec := range []struct {
		rrs []string
		to  *[]dns.RR
	}{{answer, &m.Answer}, {ns, &m.Ns}, {extra, &m.Extra}} {
		for _, s := range sec.rrs {
			rr, err := dns.NewRR(s)
			if err != nil {
				t.Fatal(err)
			}
			*sec.to = append(*sec.to, rr)
		}
	}
	return m
}

// A snapshot loaded through the control socket gets the daemon's checks:
// only what an upstream of the running configuration could have given
// towerd goes in, marked as loaded (issue 21: a forged file put
// web.service.consul, another zone's names under ".", DO entries and
// unscrubbed records in, and lookup called them "upstream").
func TestCacheLoadChecksEveryEntryAgainstTheConfig(t *testing.T) {
	ta := newTestAdminWith(t, watchedRecords{})
	forger, err := cache.New(cache.Config{Capacity: 100, MaxStaleAge: 24 * time.Hour, Now: ta.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	a := func(name string) cache.Key { return cache.NewKey(name, dns.TypeA, dns.ClassINET, false, false) }
	for _, e := range []struct {
		key cache.Key
		m   *dns.Msg
	}{
		{a("www.example.org."), forgedReply(t, "www.example.org.", dns.TypeA, []string{"www.example.org. 300 IN A 192.0.2.1"}, nil, nil)},
		{a("y.corp."), forgedReply(t, "y.corp.", dns.TypeA, []string{"y.corp. 300 IN A 192.0.2.7"}, nil, nil)},
		// Rejected, one reason each.
		{cache.NewKey("www.example.org.", dns.TypeA, dns.ClassINET, true, false),
			forgedReply(t, "www.example.org.", dns.TypeA, []string{"www.example.org. 300 IN A 6.6.6.6"}, nil, nil)},
		{a("web.service.consul."), forgedReply(t, "web.service.consul.", dns.TypeA, []string{"web.service.consul. 300 IN A 6.6.6.6"}, nil, nil)},
		{a("www2.example.org."), forgedReply(t, "www2.example.org.", dns.TypeA, []string{"www2.example.org. 300 IN A 192.0.2.2"},
			nil, []string{"bank.example. 300 IN A 6.6.6.6"})},
		{a("www3.example.org."), forgedReply(t, "www3.example.org.", dns.TypeA, []string{"www3.example.org. 300 IN A 192.0.2.3"},
			[]string{"bank.example. 300 IN NS ns.evil.example."}, nil)},
		{a("alias.example.org."), forgedReply(t, "alias.example.org.", dns.TypeA,
			[]string{"alias.example.org. 300 IN CNAME x.corp.", "x.corp. 300 IN A 6.6.6.6"}, nil, nil)},
		{a("z.corp."), forgedReply(t, "z.corp.", dns.TypeA, []string{"z.corp. 300 IN CNAME w.example.org.", "w.example.org. 300 IN A 6.6.6.6"}, nil, nil)},
	} {
		if ok, why := dnstest.SetMsg(forger, e.key, e.m); !ok {
			t.Fatalf("%s: %s", e.key, why)
		}
	}
	var snapshot bytes.Buffer
	if _, err := forger.Dump(&snapshot); err != nil {
		t.Fatal(err)
	}

	body, err := Call(Target{Socket: ta.control}, http.MethodPost, "/cache/load", nil, &snapshot, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Loaded, Rejected int
		Rejections       map[string]int
	}
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatal(err)
	}
	// alias.example.org's chain enters corp. (a zone configured below "."),
	// z.corp's leaves corp.: both are the chain leaving the zone, whatever
	// the scrubber also drops after the exit.
	want := map[string]int{rejectDNSSECKey: 1, rejectRecords: 1, rejectScrubbed: 2, rejectChainLeaves: 2}
	if res.Loaded != 2 || res.Rejected != 6 || len(res.Rejections) != len(want) {
		t.Errorf("load: %s\nwant 2 loaded, 6 rejected: %v", body, want)
	}
	for why, n := range want {
		if res.Rejections[why] != n {
			t.Errorf("rejected for %q: %d, want %d", why, res.Rejections[why], n)
		}
	}
	for name, wantZone := range map[string]string{"www.example.org.": ".", "y.corp.": "corp."} {
		infos := ta.cache.Inspect(name)
		if len(infos) != 1 {
			t.Fatalf("%s: %d entries, want 1", name, len(infos))
		}
		e := ta.describe(infos[0])
		if e.Origin != "cache load" || e.Source != "towerd cache load (zone "+wantZone+")" || strings.Contains(e.Source, "upstream") {
			t.Errorf("%s shown as %q / %q, want loaded, zone %s", name, e.Origin, e.Source, wantZone)
		}
	}
	for _, name := range []string{"web.service.consul.", "www2.example.org.", "www3.example.org.", "alias.example.org.", "z.corp."} {
		if n := len(ta.cache.Inspect(name)); n != 0 {
			t.Errorf("%s: %d entries loaded, want none", name, n)
		}
	}

	// A file that is not a snapshot is refused whole.
	if _, err := Call(Target{Socket: ta.control}, http.MethodPost, "/cache/load", nil, strings.NewReader("junk"), 10*time.Second); err == nil ||
		errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "400") {
		t.Errorf("junk: %v, want 400", err)
	}
}
