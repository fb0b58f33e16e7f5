package resolver

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/consulcut"
	"github.com/towerd/towerd/test/dnstest"
)

// Cached and stale answers under the Consul domain take the fast path
// when the Consul cut (trim.go) leaves them whole (issue 34), and the
// general path, which cuts them, otherwise: these tests hold the fast
// path's bytes to ServeDNS's, byte for byte (letter case included), on
// both sides of every cut.

// consulUpstream answers nN.service.consul. A with N addresses, and
// sN.service.consul. SRV with N SRV records and their targets' addresses.
var consulUpstream = dnstest.ExchangeFunc(func(_ context.Context, q *dns.Msg) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetReply(q)
	m.Authoritative = true
	name, qtype := strings.ToLower(q.Question[0].Name), q.Question[0].Qtype
	var n int
	var kind byte
	if _, err := fmt.Sscanf(name, "%c%d.service.consul.", &kind, &n); err != nil {
		m.Rcode = dns.RcodeNameError
		return m, nil
	}
	for i := range n {
		switch {
		case kind == 'n' && qtype == dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
				A: netipAddr(10, 0, byte(i/250), byte(i%250+1))})
		case kind == 's' && qtype == dns.TypeSRV:
			target := fmt.Sprintf("node%d.node.dc1.consul.", i)
			m.Answer = append(m.Answer, &dns.SRV{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: 60},
				Priority: 1, Weight: 1, Port: 8080, Target: target})
			m.Extra = append(m.Extra, &dns.A{Hdr: dns.RR_Header{Name: target, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
				A: netipAddr(10, 1, byte(i/250), byte(i%250+1))})
		}
	}
	return m, nil
})

func netipAddr(a, b, c, d byte) []byte { return []byte{a, b, c, d} }

// consulTrim is a TrimUDP like the daemon's: the consul. domain, an answer
// limit of 3 without EDNS.
func consulTrim(name []byte) (int, bool) {
	return 3, bytes.HasSuffix(name, []byte(".consul."))
}

func consulHandler(tb testing.TB) (*Handler, *fakeClock) {
	return diffHandlerWith(tb, nil, func(c *Config) {
		c.Zones = append(c.Zones, Zone{Name: "consul.", Upstream: overLoopback(tb, "consul.", consulUpstream)})
		c.TrimUDP = consulTrim
	})
}

type consulVariant struct {
	name  string
	qtype uint16
	edns  bool
	size  uint16
	// whole: the cut leaves the answer as it is, so the fast path answers
	// it over UDP
	whole bool
	// cutAnswered: the cut does change it, and the fast path cuts it on
	// the bytes (issue 34)
	cutAnswered bool
}

func (v consulVariant) pack(tb testing.TB) []byte {
	return variant{name: v.name, qtype: v.qtype, edns: v.edns, size: v.size, rd: true}.pack(tb)
}

func consulVariants() []consulVariant {
	var out []consulVariant
	clients := []struct {
		edns bool
		size uint16
	}{{false, 0}, {true, 512}, {true, 1232}, {true, 4096}}
	for _, n := range []int{1, 3, 4, 8, 9, 30, 60, 200} {
		for _, kind := range []string{"n", "N", "s"} {
			qtype := dns.TypeA
			if kind == "s" {
				qtype = dns.TypeSRV
			}
			for _, c := range clients {
				// Counts: records over 3 are cut without EDNS (and at 512
				// bytes); sizes: each A record is 16 bytes compressed, each
				// SRV with its target's address well over 40.
				whole := n <= 3 || c.edns && c.size > 512 && (kind != "s" && n <= 60 || kind == "s" && n <= 9)
				// The cut is made on the bytes: for a client without
				// EDNS once, when the entry is made (cutForNarrow),
				// whatever its size; for the others per question, the
				// answer written first past the client's size
				// (writeLimit): SRV answers too (their additional
				// records chosen as Consul's syncExtra does), but for
				// one of more than maxCutRecords records.
				cut := !whole && (!c.edns || !(kind == "s" && 2*n > maxCutRecords))
				out = append(out, consulVariant{name: fmt.Sprintf("%s%d.Service.consul.", kind, n), qtype: qtype,
					edns: c.edns, size: c.size, whole: whole, cutAnswered: cut})
			}
		}
	}
	return out
}

func TestFastPathConsulAnswersMatchServeDNS(t *testing.T) {
	h, clock := consulHandler(t)
	from := netip.MustParseAddrPort("127.0.0.1:53000")
	var q plainQuery
	check := func(v consulVariant, pkt []byte, stale bool) {
		t.Helper()
		for _, tcp := range []bool{false, true} {
			reply, ok := h.answerPacket(nil, pkt, from, tcp, &q)
			want := tcp || v.whole || v.cutAnswered
			if ok != want {
				t.Errorf("%+v stale %v tcp %v: fast path answered %v, want %v", v, stale, tcp, ok, want)
			}
			if !ok {
				continue
			}
			general := generalReplyOver(h, pkt, from, tcp)
			if !bytes.Equal(reply, general) {
				diff, _ := sameReply(reply, general)
				t.Errorf("%+v stale %v tcp %v: bytes differ from ServeDNS's\n%s", v, stale, tcp, diff)
			}
		}
	}
	var pkts [][]byte
	for _, v := range consulVariants() {
		pkt := v.pack(t)
		generalReply(h, pkt) // warm
		pkts = append(pkts, pkt)
		check(v, pkt, false)
	}
	staleAfterFailure(t, h, clock, pkts)
	for i, v := range consulVariants() {
		check(v, pkts[i], true) // EDE 3 takes room too: Class.Cuts counts it

	}
}

// The wire miss path (route 6) cuts as ServeDNS does: a Consul answer the
// cut changes is written by ServeDNS's code, one it leaves whole from the
// prepared entry; both are ServeDNS's bytes.
func TestWireMissConsulAnswersMatchServeDNS(t *testing.T) {
	for _, v := range consulVariants() {
		h, _ := consulHandler(t)
		pkt := v.pack(t)
		rec := newMissRecorder()
		q := plainQuery{replier: rec}
		if _, ok := h.answerPacket(nil, pkt, netip.MustParseAddrPort("127.0.0.1:53000"), false, &q); !ok {
			t.Fatalf("%+v: no wire miss", v)
		}
		got := rec.next(t)
		general := generalReply(h, pkt) // a hit now, as the flight stored it
		if !bytes.Equal(got, general) {
			diff, _ := sameReply(got, general)
			t.Errorf("%+v: wire miss bytes differ from ServeDNS's\n%s", v, diff)
		}
	}
}

// BenchmarkAnswerConsulHit is a cached Consul answer (three addresses,
// forwarded to the agent's DNS and cached) answered from a UDP query's
// bytes: on the fast path now, like any cached name (issue 34); the
// general path's cost for the same answer beside it.
func BenchmarkAnswerConsulHit(b *testing.B) {
	h, _ := consulHandler(b)
	pkt := consulVariant{name: "n3.service.consul.", qtype: dns.TypeA, edns: true, size: 1232}.pack(b)
	generalReply(h, pkt)
	b.Run("fast", func(b *testing.B) { benchAnswerPacket(b, h, pkt) })
	b.Run("general", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			generalReply(h, pkt)
		}
	})
}

// packedRecords is a RecordSource and RecordAppender for names under
// rec.: nN.rec. A has N addresses, TTL 7; its byte answer is its dns.Msg
// packed once, as the Consul watch's is.
type packedRecords struct{}

func (packedRecords) Covers(name []byte) bool { return bytes.HasSuffix(name, []byte(".rec.")) }

func (packedRecords) Answer(q dns.Question) (*dns.Msg, bool, string, bool) {
	var n int
	if _, err := fmt.Sscanf(strings.ToLower(q.Name), "n%d.rec.", &n); err != nil || q.Qtype != dns.TypeA {
		return nil, false, "not mine", false
	}
	m := new(dns.Msg)
	name := dns.CanonicalName(q.Name)
	m.Question = []dns.Question{{Name: name, Qtype: dns.TypeA, Qclass: dns.ClassINET}}
	for i := range n {
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 7},
			A: netipAddr(10, 2, 0, byte(i+1))})
	}
	return m, false, "packed", true
}

func (p packedRecords) AppendAnswer(dst, name []byte, qtype uint16, limit int, _ uint32, _ uint16) ([]byte, [3]uint16, bool, bool, string, bool) {
	m, _, why, ok := p.Answer(dns.Question{Name: string(name), Qtype: qtype, Qclass: dns.ClassINET})
	if !ok {
		return dst, [3]uint16{}, false, false, "", false
	}
	m.Compress = true
	raw, err := m.Pack()
	if err != nil {
		panic(err)
	}
	records := raw[12+len(name)+1+4:]
	if len(dst)+len(records) > limit {
		return dst, [3]uint16{}, false, false, "", false
	}
	return append(dst, records...), [3]uint16{uint16(len(m.Answer))}, false, false, why, true
}

var _ RecordAppender = packedRecords{}

// A RecordSource's answer written as bytes (every answer of the Consul
// watch, issue 34) is ServeDNS's, byte for byte, framed by the reply core
// for every client, cut like Consul's on the bytes (an address answer) or
// by ServeDNS. TestWatchedAnswersMatchServeDNS holds the real watch's.
func TestFastPathRecordsMatchServeDNS(t *testing.T) {
	h, _ := diffHandlerWith(t, nil, func(c *Config) {
		c.Records = Chain{{RecordSource: packedRecords{}, Label: SourceRecords}}
		c.TrimUDP = func(name []byte) (int, bool) { return 3, bytes.HasSuffix(name, []byte(".rec.")) }
	})
	from := netip.MustParseAddrPort("127.0.0.1:53000")
	var q plainQuery
	answered := 0
	for _, n := range []int{1, 3, 4, 30, 100} {
		for _, name := range []string{fmt.Sprintf("n%d.rec.", n), fmt.Sprintf("N%d.ReC.", n)} {
			for _, c := range []struct {
				edns bool
				size uint16
				do   bool
			}{{false, 0, false}, {true, 512, false}, {true, 1232, true}, {true, 4096, false}} {
				v := variant{name: name, qtype: dns.TypeA, edns: c.edns, size: c.size, do: c.do, rd: true}
				pkt := v.pack(t)
				for _, tcp := range []bool{false, true} {
					reply, ok := h.answerPacket(nil, pkt, from, tcp, &q)
					// Cut without EDNS or at 512 bytes past 3 records, on
					// the bytes, the whole answer written first past the
					// client's size (writeLimit): every form on the fast
					// path.
					if !ok {
						t.Errorf("%s %+v tcp %v: fast path answered %v", name, c, tcp, ok)
					}
					if !ok {
						continue
					}
					answered++
					general := generalReplyOver(h, pkt, from, tcp)
					if !bytes.Equal(reply, general) {
						diff, _ := sameReply(reply, general)
						t.Errorf("%s %+v tcp %v: bytes differ from ServeDNS's\n%s", name, c, tcp, diff)
					}
				}
			}
		}
	}
	if answered < 40 {
		t.Errorf("only %d answers by the fast path", answered)
	}
}

// An answer the Consul cut changes is cut on the bytes without an
// allocation (issue 34): eight cached addresses, and eight SRV records
// with their targets' addresses, to a client without EDNS (the entry's
// cut answer, made when the entry was: cutForNarrow) and to one with EDNS
// at 512 bytes (cut per question: cutWritten, consulcut.Class.Keep).
func TestFastPathConsulCutAllocates(t *testing.T) {
	h, _ := consulHandler(t)
	for _, v := range []consulVariant{
		{name: "n8.Service.consul.", qtype: dns.TypeA}, {name: "s8.Service.consul.", qtype: dns.TypeSRV},
		{name: "n8.Service.consul.", qtype: dns.TypeA, edns: true, size: 512},
		{name: "s8.Service.consul.", qtype: dns.TypeSRV, edns: true, size: 512},
	} {
		pkt := v.pack(t)
		generalReply(h, pkt) // warm
		from := netip.MustParseAddrPort("127.0.0.1:53000")
		var q plainQuery
		out := make([]byte, 0, 4096)
		reply, ok := h.answerPacket(out[:0], pkt, from, false, &q)
		m := new(dns.Msg)
		if !ok || m.Unpack(reply) != nil || len(m.Answer) != 3 || m.Truncated {
			t.Fatalf("%+v: answered %v: %v; want 3 records (udp_answer_limit), no TC", v, ok, m)
		}
		// Without EDNS the cut was decided when the entry was made.
		name := []byte(dns.CanonicalName(v.name))
		_, hit, _ := h.cache.AppendFresh(nil, name, v.qtype, dns.ClassINET, false, false, 65535, consulcut.NarrowTag(3))
		if !hit.Cut || hit.Answer != 3 {
			t.Errorf("%+v: the entry holds no cut answer of 3 records for clients without EDNS: %+v", v, hit)
		}
		if n := testing.AllocsPerRun(200, func() {
			if _, ok := h.answerPacket(out[:0], pkt, from, false, &q); !ok {
				t.Fatal("declined")
			}
		}); n != 0 {
			t.Errorf("%+v: %v allocations per cut answer, want 0", v, n)
		}
	}
}

// BenchmarkAnswerConsulCut is a cached Consul answer the cut changes
// (eight SRV records with their targets' addresses, udp_answer_limit 3):
// to a client without EDNS, the entry's cut answer decided when it was
// made (issue 34: what the question costs is any hit's); to a client with
// EDNS at 512 bytes, cut per question (planned and written again).
func BenchmarkAnswerConsulCut(b *testing.B) {
	h, _ := consulHandler(b)
	for _, v := range []consulVariant{
		{name: "s8.service.consul.", qtype: dns.TypeSRV},
		{name: "s8.service.consul.", qtype: dns.TypeSRV, edns: true, size: 512},
		{name: "n8.service.consul.", qtype: dns.TypeA},
	} {
		pkt := v.pack(b)
		generalReply(h, pkt)
		b.Run(fmt.Sprintf("%s/%s/edns=%d", dns.TypeToString[v.qtype], v.name, v.size), func(b *testing.B) {
			benchAnswerPacket(b, h, pkt)
		})
	}
}
