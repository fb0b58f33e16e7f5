package resolver

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/resolver/local"
)

// The differential tests of the fast path (TestFastPathMatchesServeDNS,
// TestFastRejectMatchesServeDNS, FuzzFastPath) vary what a rule could be
// keyed on besides the packet: the client's prefix, query types beyond A
// and AAAA, and the Records source (issue 16). These are the dimensions.

// diffAllow is the allow-list of the varied handlers: loopback and one
// documentation prefix.
var diffAllow = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("192.0.2.0/24"),
}

// diffClients are a loopback client, one inside diffAllow's other prefix,
// and two outside it (IPv4 and IPv6): REFUSED on every route.
var diffClients = []struct {
	name    string
	addr    netip.AddrPort
	allowed bool
}{
	{"loopback", netip.MustParseAddrPort("127.0.0.1:53000"), true},
	{"allowed prefix", netip.MustParseAddrPort("192.0.2.77:40000"), true},
	{"refused v4", netip.MustParseAddrPort("198.51.100.7:53000"), false},
	{"refused v6", netip.MustParseAddrPort("[2001:db8::7]:53000"), false},
}

// diffQtypes go beyond A and AAAA: common ones, ANY, a zone transfer
// (REFUSED) and a type without a name (65280, private use).
var diffQtypes = []uint16{dns.TypeMX, dns.TypeTXT, dns.TypeSRV, dns.TypePTR, dns.TypeANY, dns.TypeAXFR, 65280}

// diffRecords is a RecordSource covering names under "consul." and
// answering A for web.service.consul. only: db.service.consul. is covered
// but not answered (it takes the cache and upstream path in ServeDNS).
type diffRecords struct{}

func (diffRecords) Covers(name []byte) bool { return strings.HasSuffix(string(name), ".consul.") }

func (diffRecords) Answer(q dns.Question) (*dns.Msg, bool, string, bool) {
	if !strings.EqualFold(q.Name, "web.service.consul.") || q.Qtype != dns.TypeA {
		return nil, false, "", false
	}
	m := new(dns.Msg)
	m.SetQuestion(q.Name, q.Qtype)
	m.Response = true
	rr, _ := dns.NewRR("web.service.consul. 0 IN A 192.0.2.80")
	m.Answer = []dns.RR{rr}
	return m, false, "watch", true
}

var _ RecordSource = diffRecords{}

// diffLocal is a covering local source (issue 15): a static record, an
// address domain, domain_needed and bogus_priv. It answers some types of
// the names it covers and forwards others (foo. MX, x.ads.test. AAAA).
var diffLocal = func() *local.Source {
	rr, err := dns.NewRR("printer.lan. A 192.168.1.5")
	if err != nil {
		panic(err)
	}
	s, err := local.New(local.Options{
		Records:      []dns.RR{rr},
		Addresses:    []local.Address{{Domain: "ads.test.", Addrs: []netip.Addr{netip.MustParseAddr("0.0.0.0")}}},
		DomainNeeded: true,
		BogusPriv:    true,
	})
	if err != nil {
		panic(err)
	}
	return s
}()

// diffSources are the Records settings the tests run under: none, the
// Consul-like source, local data, and both chained as the daemon chains
// them.
var diffSources = []struct {
	name string
	rs   RecordSource
}{
	{"no records", nil},
	{"records", diffRecords{}},
	{"local", diffLocal},
	{"chain", Chain{{RecordSource: diffLocal, Label: SourceLocal}, {RecordSource: diffRecords{}, Label: SourceRecords}}},
}

// diffNames are the names of the varied tests: not covered by diffRecords,
// covered and answered, covered and not answered; then names diffLocal
// covers: a record, a dotless name, a private reverse name, an address
// domain.
var diffNames = []string{"www.example.", "MX.Example.", "web.service.consul.", "db.service.consul.",
	"printer.lan.", "foo.", "5.1.168.192.in-addr.arpa.", "x.ads.test."}

// sourceRcode is the rcode ServeDNS gives an admitted question: the
// source's when it answers, else the upstream's (diffUpstream: NOERROR).
func sourceRcode(rs RecordSource, name string, qtype uint16) int {
	if rs != nil {
		if m, _, _, ok := rs.Answer(dns.Question{Name: name, Qtype: qtype, Qclass: dns.ClassINET}); ok {
			return m.Rcode
		}
	}
	return dns.RcodeSuccess
}

// variedHandler is diffHandler with diffAllow and rs as Records.
func variedHandler(tb testing.TB, rs RecordSource, tweak func(*Config)) (*Handler, *fakeClock) {
	return diffHandlerWith(tb, nil, func(c *Config) {
		c.Allow = diffAllow
		c.Records = rs
		if tweak != nil {
			tweak(c)
		}
	})
}

// fastMatches runs pkt from client through the fast path, over UDP and
// over TCP, and, when it answers, holds its reply to ServeDNS's for the same
// client and transport. It reports whether the fast path answered over UDP,
// and its rcode; over TCP it must answer whatever it answers over UDP (a
// TCP reply has no size limit to decline for).
func fastMatches(t *testing.T, h *Handler, pkt []byte, from netip.AddrPort, what string) (bool, int) {
	t.Helper()
	var q plainQuery
	udpOK, rcode := false, 0
	for _, tcp := range []bool{false, true} {
		reply, ok := h.answerPacket(nil, pkt, from, tcp, &q)
		if tcp && udpOK && !ok {
			t.Errorf("%s: answered by the fast path over UDP, not over TCP", what)
		}
		if !ok {
			continue
		}
		if diff, same := sameReply(reply, generalReplyOver(h, pkt, from, tcp)); !same {
			t.Errorf("%s (tcp %v): %s", what, tcp, diff)
		}
		if !tcp {
			udpOK, rcode = true, int(reply[3]&0xF)
		}
	}
	return udpOK, rcode
}

// Hits: every client, query type and Records source; the fast path answers
// only what it must (allowed clients, names the source does not cover, not
// AXFR), and then exactly as ServeDNS does.
func TestFastPathMatchesServeDNSVaried(t *testing.T) {
	for _, src := range diffSources {
		t.Run(src.name, func(t *testing.T) {
			h, clock := variedHandler(t, src.rs, nil)
			for _, name := range diffNames {
				for _, qtype := range append([]uint16{dns.TypeA}, diffQtypes...) {
					for _, edns := range []bool{false, true} {
						v := variant{name: name, qtype: qtype, edns: edns, do: edns, size: 1232, rd: true}
						pkt := v.pack(t)
						generalReplyFrom(h, pkt, diffClients[0].addr) // warm
						clock.Advance(10 * time.Millisecond)
						covered := src.rs != nil && src.rs.Covers([]byte(strings.ToLower(name)))
						for _, c := range diffClients {
							what := src.name + "/" + c.name + "/" + name + "/" + dns.TypeToString[qtype]
							want := c.allowed && !covered && qtype != dns.TypeAXFR
							if got, _ := fastMatches(t, h, pkt, c.addr, what); got != want {
								t.Errorf("%s: fast path answered %v, want %v", what, got, want)
							}
							general := new(dns.Msg)
							if err := general.Unpack(generalReplyFrom(h, pkt, c.addr)); err != nil {
								t.Fatalf("%s: %v", what, err)
							}
							wantRcode := sourceRcode(src.rs, name, qtype)
							if !c.allowed || qtype == dns.TypeAXFR {
								wantRcode = dns.RcodeRefused
							}
							if general.Rcode != wantRcode {
								t.Errorf("%s: ServeDNS rcode %s, want %s", what, dns.RcodeToString[general.Rcode], dns.RcodeToString[wantRcode])
							}
						}
					}
				}
			}
		})
	}
}

// Rejects at the full in-flight cap: every client, query type and Records
// source; the fast path's SERVFAIL only where ServeDNS gives it, with the
// same bytes.
func TestFastRejectMatchesServeDNSVaried(t *testing.T) {
	for _, src := range diffSources {
		t.Run(src.name, func(t *testing.T) {
			h, _ := variedHandler(t, src.rs, func(c *Config) { c.MaxInflight = 1 })
			// A resolution that holds the one slot until the test ends.
			holdSlot(t, h, cache.NewKey("busy.example.", dns.TypeA, dns.ClassINET, false, false))
			for _, name := range []string{"new.example.", "new.service.consul.", "web.service.consul."} {
				for _, qtype := range append([]uint16{dns.TypeA, dns.TypeAAAA}, diffQtypes...) {
					pkt := variant{name: name, qtype: qtype, edns: true, size: 4096}.pack(t)
					covered := src.rs != nil && src.rs.Covers([]byte(name))
					for _, c := range diffClients {
						what := src.name + "/" + c.name + "/" + name + "/" + dns.TypeToString[qtype]
						want := c.allowed && !covered && qtype != dns.TypeAXFR
						got, rcode := fastMatches(t, h, pkt, c.addr, what)
						if got != want || (got && rcode != dns.RcodeServerFailure) {
							t.Errorf("%s: fast path answered %v (rcode %d), want %v (SERVFAIL)", what, got, rcode, want)
						}
					}
				}
			}
		})
	}
}

// A name cached before local data covered it (the hosts file gained it, or
// a reload added the rules) is answered locally from then on, on every
// route: the fast path declines it, with its cached answer in hand.
func TestFastPathDeclinesNamesLocalDataGained(t *testing.T) {
	h, clock := variedHandler(t, nil, nil)
	for _, name := range diffNames {
		for _, qtype := range append([]uint16{dns.TypeA, dns.TypeAAAA}, diffQtypes...) {
			generalReplyFrom(h, variant{name: name, qtype: qtype, edns: true, size: 1232}.pack(t), diffClients[0].addr)
		}
	}
	clock.Advance(10 * time.Millisecond)
	chain := Chain{{RecordSource: diffLocal, Label: SourceLocal}, {RecordSource: diffRecords{}, Label: SourceRecords}}
	if err := h.Reconfigure(Config{Zones: []Zone{{Name: ".", Upstream: overLoopback(t, ".", diffUpstream)}}, Allow: diffAllow,
		Records: chain, ServeStale: true, StaleClientTimeout: time.Second, StaleAnswerTTL: 30 * time.Second,
		FailureRecheck: 30 * time.Second, Now: clock.Now}); err != nil {
		t.Fatal(err)
	}
	local := 0
	for _, name := range diffNames {
		for _, qtype := range append([]uint16{dns.TypeA, dns.TypeAAAA}, diffQtypes...) {
			pkt := variant{name: name, qtype: qtype, edns: true, size: 1232}.pack(t)
			what := name + "/" + dns.TypeToString[qtype]
			_, _, answered := diffLocal.Lookup(dns.Question{Name: name, Qtype: qtype, Qclass: dns.ClassINET})
			got, _ := fastMatches(t, h, pkt, diffClients[0].addr, what)
			if answered {
				local++
				if got {
					t.Errorf("%s: the fast path answered from the cache a question local data answers", what)
				}
			}
			if qtype == dns.TypeA && name == "foo." {
				general := new(dns.Msg)
				if err := general.Unpack(generalReplyFrom(h, pkt, diffClients[0].addr)); err != nil {
					t.Fatal(err)
				}
				if general.Rcode != dns.RcodeNameError {
					t.Errorf("foo. A after the reload: %s, want NXDOMAIN from domain_needed over the cached answer", dns.RcodeToString[general.Rcode])
				}
			}
		}
	}
	if local < 5 {
		t.Errorf("only %d questions answered locally: the test checks nothing", local)
	}
}
