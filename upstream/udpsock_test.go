package upstream

import (
	"context"
	"encoding/binary"
	"net"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// acceptsQuery packs q with id and returns the match a socket checks
// replies with, as openUDP would build it.
func acceptsQuery(t testing.TB, q *dns.Msg, id uint16) *replyMatch {
	packed, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint16(packed, id)
	qend, err := questionEnd(packed)
	if err != nil {
		t.Fatal(err)
	}
	m := matchOf(packed, qend)
	return &m
}

func TestAcceptsOnTheWire(t *testing.T) {
	q := new(dns.Msg).SetQuestion("www.Example.org.", dns.TypeA)
	s := acceptsQuery(t, q, 0x1234)
	reply := func(change func(r *dns.Msg)) []byte {
		r := new(dns.Msg).SetReply(q)
		r.Id = 0x1234
		change(r)
		b, err := r.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name string
		raw  []byte
		want bool
	}{
		{"genuine", reply(func(*dns.Msg) {}), true},
		{"name case differs", reply(func(r *dns.Msg) { r.Question[0].Name = "WWW.EXAMPLE.ORG." }), true},
		{"wrong id", reply(func(r *dns.Msg) { r.Id++ }), false},
		{"not a response", reply(func(r *dns.Msg) { r.Response = false }), false},
		{"other name", reply(func(r *dns.Msg) { r.Question[0].Name = "www.example.com." }), false},
		{"longer name", reply(func(r *dns.Msg) { r.Question[0].Name = "www.example.org.evil." }), false},
		{"other type", reply(func(r *dns.Msg) { r.Question[0].Qtype = dns.TypeAAAA }), false},
		{"other class", reply(func(r *dns.Msg) { r.Question[0].Qclass = dns.ClassCHAOS }), false},
		{"no question", reply(func(r *dns.Msg) { r.Question = nil }), false},
		{"two questions", reply(func(r *dns.Msg) { r.Question = append(r.Question, r.Question[0]) }), false},
		{"short", []byte{0x12, 0x34, 0x80}, false},
		{"cut in the question", reply(func(*dns.Msg) {})[:20], false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := s.accepts(tt.raw); got != tt.want {
				t.Errorf("accepts = %v, want %v", got, tt.want)
			}
		})
	}
}

// FuzzAccepts holds the wire check to the unpacked one it replaced: for
// every reply that unpacks, accepts agrees with matches (ID, QR, question
// count, names case-insensitively, type and class).
func FuzzAccepts(f *testing.F) {
	q := new(dns.Msg).SetQuestion("www.example.org.", dns.TypeA)
	q.SetEdns0(1232, true)
	r := new(dns.Msg).SetReply(q)
	r.Id = 7
	r.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: "www.example.org.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}}}
	seed, _ := r.Pack()
	f.Add(seed)
	r.Question[0].Name = "WwW.ExAmPlE.oRg."
	seed, _ = r.Pack()
	f.Add(seed)
	r.Question[0].Name = "www.examplf.org."
	seed, _ = r.Pack()
	f.Add(seed)
	query := q.Copy()
	query.Id = 7
	s := acceptsQuery(f, query, 7)
	f.Fuzz(func(t *testing.T, raw []byte) {
		got := s.accepts(raw)
		reply := new(dns.Msg)
		if reply.Unpack(raw) != nil {
			return
		}
		if want := matches(query, reply); got != want {
			t.Errorf("accepts = %v, matches = %v for %v", got, want, reply.Question)
		}
	})
}

// matches is the check on unpacked messages that accepts replaced: a
// response with the query's ID and question (RFC 5452 section 9.1), names
// compared case-insensitively (RFC 4343).
func matches(query, reply *dns.Msg) bool {
	if !reply.Response || reply.Id != query.Id || len(reply.Question) != len(query.Question) {
		return false
	}
	for i, q := range query.Question {
		r := reply.Question[i]
		if r.Qtype != q.Qtype || r.Qclass != q.Qclass || !strings.EqualFold(r.Name, q.Name) {
			return false
		}
	}
	return true
}

// The raw socket path builds IPv6 socket addresses itself: an exchange with
// a server on ::1 must work as one on 127.0.0.1 does.
func TestPlainIPv6(t *testing.T) {
	pc, err := net.ListenPacket("udp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		pc.Close()
		<-done
	})
	go func() {
		defer close(done)
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			q := new(dns.Msg)
			if q.Unpack(buf[:n]) != nil {
				continue
			}
			if out, err := replyTo(q, dns.RcodeSuccess, "192.0.2.6").Pack(); err == nil {
				_, _ = pc.WriteTo(out, from)
			}
		}
	}()
	p := newPlain(t, pc.LocalAddr().String())
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	reply, err := p.Exchange(ctx, testQuery())
	if err != nil {
		t.Fatal(err)
	}
	if got := firstA(reply); got != "192.0.2.6" {
		t.Errorf("answer %q, want 192.0.2.6", got)
	}
}
