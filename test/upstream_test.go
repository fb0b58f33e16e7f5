package test

import (
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
)

// testUpstream is the kit's scripted upstream; the e2e tests keep the
// short name.
type testUpstream = dnstest.Upstream

// testSOA is the SOA of the test upstream's negative answers.
const testSOA = dnstest.TestSOA

// newTestUpstream starts a test upstream on a free port of 127.0.0.1 and
// stops it when the test ends.
func newTestUpstream(t *testing.T) *testUpstream { return dnstest.NewUpstream(t) }

// newTestUpstreamOn is newTestUpstream on sockets the caller bound.
func newTestUpstreamOn(t *testing.T, pc net.PacketConn, l net.Listener) *testUpstream {
	return dnstest.NewUpstreamOn(t, pc, l)
}

// answerEveryA is an upstream script answering every question with one A
// record, addr, TTL 300, whatever the name.
func answerEveryA(addr net.IP) dnstest.Script {
	return func(q *dns.Msg, _ string) *dns.Msg {
		r := new(dns.Msg)
		r.SetReply(q)
		r.Answer = []dns.RR{&dns.A{
			Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300},
			A:   addr,
		}}
		return r
	}
}

// listenSamePort binds UDP and TCP on one free port of 127.0.0.1, closed
// when the test ends.
func listenSamePort(t *testing.T) (net.PacketConn, net.Listener) { return dnstest.ListenPair(t) }

// spoofUpstream answers every query with forgeries first and the genuine
// reply last: a wrong ID, a wrong question name, and the right ID and
// question sent from another port. A resolver that takes the first packet
// that arrives gets a forged address.
type spoofUpstream struct {
	Addr    string
	answer  string // the genuine A record's address
	forged  string // the address every forgery carries
	pc      net.PacketConn
	other   net.PacketConn // a second socket: its replies come from the wrong port
	queries atomic.Int64
	done    chan struct{}
}

func newSpoofUpstream(t *testing.T, answer, forged string) *spoofUpstream {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	other, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		pc.Close()
		t.Fatal(err)
	}
	s := &spoofUpstream{Addr: pc.LocalAddr().String(), answer: answer, forged: forged,
		pc: pc, other: other, done: make(chan struct{})}
	go s.serve(t)
	t.Cleanup(func() {
		pc.Close()
		other.Close()
		<-s.done // ReadFrom returns once pc is closed
	})
	return s
}

func (s *spoofUpstream) serve(t *testing.T) {
	defer close(s.done)
	buf := make([]byte, 65535)
	for {
		n, from, err := s.pc.ReadFrom(buf)
		if err != nil {
			return // closed by the cleanup
		}
		q := new(dns.Msg)
		if q.Unpack(buf[:n]) != nil || len(q.Question) != 1 {
			continue
		}
		s.queries.Add(1)
		reply := func(id uint16, name, addr string) []byte {
			m := new(dns.Msg)
			m.SetReply(q)
			m.Id = id
			m.Question[0].Name = name
			rr, _ := dns.NewRR(name + " 300 IN A " + addr)
			m.Answer = []dns.RR{rr}
			wire, err := m.Pack()
			if err != nil {
				t.Errorf("packing spoofed reply: %v", err)
			}
			return wire
		}
		qname := q.Question[0].Name
		_, _ = s.pc.WriteTo(reply(q.Id+1, qname, s.forged), from)
		_, _ = s.pc.WriteTo(reply(q.Id, "evil.example.", s.forged), from)
		_, _ = s.other.WriteTo(reply(q.Id, qname, s.forged), from)
		_, _ = s.pc.WriteTo(reply(q.Id, qname, s.answer), from)
	}
}

// blackhole is a UDP socket that reads queries and never answers. packets
// counts the queries; towerd's health probes (". NS", asked of a silent
// server whatever its clients do) are counted apart, in probes.
type blackhole struct {
	packets atomic.Int64
	probes  atomic.Int64
	done    chan struct{}

	mu     sync.Mutex
	byName map[string]int // queries by lower-cased name, probes excluded
}

// asked is how many queries for name (any case, any type) reached the hole.
func (b *blackhole) asked(name string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.byName[strings.ToLower(dns.Fqdn(name))]
}

// newBlackhole binds addr (typically the port of an upstream just stopped).
func newBlackhole(t *testing.T, addr string) *blackhole {
	t.Helper()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatalf("binding black hole on %s: %v", addr, err)
	}
	b := &blackhole{done: make(chan struct{}), byName: map[string]int{}}
	go func() {
		defer close(b.done)
		buf := make([]byte, 65535)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var q dns.Msg
			if q.Unpack(buf[:n]) == nil && len(q.Question) == 1 && q.Question[0].Name == "." && q.Question[0].Qtype == dns.TypeNS {
				b.probes.Add(1)
				continue
			}
			if len(q.Question) == 1 {
				b.mu.Lock()
				b.byName[strings.ToLower(q.Question[0].Name)]++
				b.mu.Unlock()
			}
			b.packets.Add(1)
		}
	}()
	t.Cleanup(func() {
		pc.Close()
		<-b.done
	})
	return b
}
