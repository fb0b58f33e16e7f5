package resolver

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
)

// siteZone answers for corp.example.: www is a CNAME into consul., and the
// server adds its own (forged) address for the target, which no client may
// see (issue 11: a CNAME leaving the zone is chased, never believed).
func siteZone(t *testing.T, asked *sync.Map) dns.HandlerFunc {
	return func(w dns.ResponseWriter, r *dns.Msg) {
		name := strings.ToLower(r.Question[0].Name)
		asked.Store("site "+name, true)
		m := new(dns.Msg)
		m.SetReply(r)
		switch name {
		case "www.corp.example.":
			m.Answer = mustRRs(t, "www.corp.example. 300 IN CNAME web.service.consul.",
				"web.service.consul. 300 IN A 6.6.6.6")
		case "loop.corp.example.":
			m.Answer = mustRRs(t, "loop.corp.example. 300 IN CNAME loop.service.consul.")
		case "gone.corp.example.":
			m.Answer = mustRRs(t, "gone.corp.example. 300 IN CNAME gone.service.consul.")
		default:
			m.Rcode = dns.RcodeNameError
		}
		w.WriteMsg(m)
	}
}

// consulZone answers for consul.: the real address of web, a CNAME back into
// the site zone for loop, NXDOMAIN with an SOA for gone, SERVFAIL while
// failing is set.
func consulZone(t *testing.T, asked *sync.Map, failing *sync.Map) dns.HandlerFunc {
	return func(w dns.ResponseWriter, r *dns.Msg) {
		name := strings.ToLower(r.Question[0].Name)
		asked.Store("consul "+name, true)
		m := new(dns.Msg)
		m.SetReply(r)
		if _, fail := failing.Load(name); fail {
			m.Rcode = dns.RcodeServerFailure
			w.WriteMsg(m)
			return
		}
		switch name {
		case "web.service.consul.":
			m.Answer = mustRRs(t, "web.service.consul. 20 IN A 10.0.0.1")
		case "loop.service.consul.":
			m.Answer = mustRRs(t, "loop.service.consul. 300 IN CNAME loop.corp.example.")
		default:
			m.Rcode = dns.RcodeNameError
			m.Ns = mustRRs(t, "consul. 3600 IN SOA ns.consul. hostmaster.consul. 1 3600 600 86400 15")
		}
		w.WriteMsg(m)
	}
}

func newChaseEnv(t *testing.T) (*zonesEnv, *sync.Map, *sync.Map) {
	var asked, failing sync.Map
	e := newZonesEnv(t, map[string]dns.HandlerFunc{
		".":             answerWith(t, dns.RcodeRefused, nil),
		"corp.example.": siteZone(t, &asked),
		"consul.":       consulZone(t, &asked, &failing),
	}, cache.Config{MaxStaleAge: time.Hour}, nil)
	return e, &asked, &failing
}

func TestChaseJoinsAnswersAcrossZones(t *testing.T) {
	e, asked, _ := newChaseEnv(t)
	want := []string{
		"www.corp.example.\t20\tIN\tCNAME\tweb.service.consul.",
		"web.service.consul.\t20\tIN\tA\t10.0.0.1",
	}
	for i, from := range []string{"upstream", "cache"} {
		r := e.ask(t, "www.corp.example.", dns.TypeA)
		if r.Rcode != dns.RcodeSuccess || !slices.Equal(rrStrings(r.Answer), want) {
			t.Fatalf("answer %d (%s): %s %v, want NOERROR %v", i, from, dns.RcodeToString[r.Rcode], rrStrings(r.Answer), want)
		}
	}
	if _, ok := asked.Load("consul web.service.consul."); !ok {
		t.Error("the target was never asked of the consul. zone")
	}
	res, ok := e.cache.Get(cache.NewKey("www.corp.example.", dns.TypeA, dns.ClassINET, false, false))
	if !ok || !slices.Equal(rrStrings(res.Msg.Answer), want) {
		t.Fatalf("cached %v, want the joined answer", res.Msg)
	}
}

func TestChaseNXDOMAINTakesTheTargetZonesWord(t *testing.T) {
	e, _, _ := newChaseEnv(t)
	r := e.ask(t, "gone.corp.example.", dns.TypeA)
	if r.Rcode != dns.RcodeNameError {
		t.Fatalf("rcode %s, want NXDOMAIN from the consul. zone", dns.RcodeToString[r.Rcode])
	}
	// The chain is kept; the negative TTL (SOA MINIMUM 15) bounds it all.
	if len(r.Answer) != 1 || r.Answer[0].Header().Rrtype != dns.TypeCNAME || r.Answer[0].Header().Ttl != 15 {
		t.Errorf("answer %v, want the CNAME at TTL 15", r.Answer)
	}
	if len(r.Ns) != 1 || r.Ns[0].Header().Name != "consul." || r.Ns[0].Header().Ttl != 15 {
		t.Errorf("authority %v, want consul.'s SOA at TTL 15", r.Ns)
	}
}

func TestChaseFailureIsAnUpstreamFailure(t *testing.T) {
	e, _, failing := newChaseEnv(t)
	failing.Store("web.service.consul.", true)
	r := e.ask(t, "www.corp.example.", dns.TypeA)
	if r.Rcode != dns.RcodeServerFailure || len(r.Answer) != 0 {
		t.Fatalf("got %s %v, want SERVFAIL with no partial chain", dns.RcodeToString[r.Rcode], r.Answer)
	}
	if _, ok := e.cache.Get(cache.NewKey("www.corp.example.", dns.TypeA, dns.ClassINET, false, false)); ok {
		t.Fatal("a CNAME-only partial answer was cached")
	}
	// The failure is remembered (RFC 9520, failures.go): within its 5 s
	// the question is SERVFAIL although the target answers again.
	failing.Delete("web.service.consul.")
	if r := e.ask(t, "www.corp.example.", dns.TypeA); r.Rcode != dns.RcodeServerFailure {
		t.Fatalf("within the failure's lifetime: %s, want the remembered SERVFAIL", dns.RcodeToString[r.Rcode])
	}
	e.clock.Advance(failureTTL)
	// A good entry is served stale when a later chase fails.
	if r := e.ask(t, "www.corp.example.", dns.TypeA); len(r.Answer) != 2 {
		t.Fatalf("after recovery: %v", r)
	}
	failing.Store("web.service.consul.", true)
	e.clock.Advance(25 * time.Second)
	r = e.ask(t, "www.corp.example.", dns.TypeA)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2 || !hasEDE(r, dns.ExtendedErrorCodeStaleAnswer) {
		t.Fatalf("failed chase with an expired entry: %v, want the stale joined answer", r)
	}
}

func TestChaseLoopIsRefused(t *testing.T) {
	e, _, _ := newChaseEnv(t)
	r := e.ask(t, "loop.corp.example.", dns.TypeA)
	if r.Rcode != dns.RcodeServerFailure {
		t.Fatalf("loop answered %s %v, want SERVFAIL", dns.RcodeToString[r.Rcode], r.Answer)
	}
}

// The servers of "." know no other zone, so their scrubber keeps a chain
// into "consul."; the router does, and the chain is cut and chased there
// all the same.
func TestChaseFromRootIntoConfiguredZone(t *testing.T) {
	var asked, failing sync.Map
	e := newZonesEnv(t, map[string]dns.HandlerFunc{
		".": answerWith(t, dns.RcodeSuccess, []string{
			"www.example. 300 IN CNAME web.service.consul.",
			"web.service.consul. 300 IN A 6.6.6.6",
		}),
		"consul.": consulZone(t, &asked, &failing),
	}, cache.Config{MaxStaleAge: time.Hour}, nil)
	want := []string{
		"www.example.\t20\tIN\tCNAME\tweb.service.consul.",
		"web.service.consul.\t20\tIN\tA\t10.0.0.1",
	}
	r := e.ask(t, "www.example.", dns.TypeA)
	if r.Rcode != dns.RcodeSuccess || !slices.Equal(rrStrings(r.Answer), want) {
		t.Fatalf("got %s %v, want NOERROR %v", dns.RcodeToString[r.Rcode], rrStrings(r.Answer), want)
	}
}

// joinChase writes, from the two replies' views, the joined answer the
// chase settles: first's header, question and answer, then next's answer;
// next's rcode and authority; AD only when both had it; the additional
// records of both once each, without OPT.
func TestJoinChase(t *testing.T) {
	first := new(dns.Msg)
	first.SetQuestion("WWW.corp.example.", dns.TypeA)
	first.Id, first.Response, first.RecursionAvailable, first.AuthenticatedData = 77, true, true, true
	first.Answer = mustRRs(t, "WWW.corp.example. 300 IN CNAME web.service.consul.")
	first.Extra = mustRRs(t, "ns.corp.example. 60 IN A 192.0.2.53", "shared.example. 60 IN TXT \"x\"")
	first.SetEdns0(1232, true)
	next := new(dns.Msg)
	next.SetQuestion("web.service.consul.", dns.TypeA)
	next.Response, next.Rcode = true, dns.RcodeNameError
	next.Answer = mustRRs(t, "web.service.consul. 20 IN CNAME gone.service.consul.")
	next.Ns = mustRRs(t, "consul. 3600 IN SOA ns.consul. hostmaster.consul. 1 3600 600 86400 15")
	next.Extra = mustRRs(t, "SHARED.example. 5 IN TXT \"x\"", "other.example. 60 IN TXT \"y\"", "other.example. 9 IN TXT \"y\"")
	next.SetEdns0(4096, false)
	a, _ := first.Pack()
	next.Compress = true
	b, _ := next.Pack()
	raw, err := joinChase(a, b)
	if err != nil {
		t.Fatal(err)
	}
	got := new(dns.Msg)
	if err := got.Unpack(raw); err != nil {
		t.Fatal(err)
	}
	want := first.Copy()
	want.Rcode, want.AuthenticatedData = dns.RcodeNameError, false
	want.Answer = append(want.Answer, next.Answer...)
	want.Ns = next.Ns
	want.Extra = append(mustRRs(t, "ns.corp.example. 60 IN A 192.0.2.53", "shared.example. 60 IN TXT \"x\""),
		mustRRs(t, "other.example. 60 IN TXT \"y\"")...)
	if got.String() != want.String() {
		t.Fatalf("joined\n%v\nwant\n%v", got, want)
	}
	if _, err := joinChase(a, b[:len(b)-3]); err == nil {
		t.Error("a reply cut short was joined")
	}
}
