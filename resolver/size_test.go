package resolver

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/test/dnstest"
)

// manyUpstream answers every A question with 100 addresses: about 1,650
// bytes compressed, more than 1232.
var manyUpstream = dnstest.ExchangeFunc(func(_ context.Context, q *dns.Msg) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetReply(q)
	for i := range 100 {
		m.Answer = append(m.Answer, &dns.A{
			Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300},
			A:   net.IPv4(192, 0, 2, byte(i)),
		})
	}
	return m, nil
})

// sizeServer serves a handler over manyUpstream on loopback UDP and TCP.
func sizeServer(t *testing.T, maxUDP int) map[string]string {
	t.Helper()
	c, err := cache.New(cache.Config{Capacity: 100})
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHandler(Config{Zones: []Zone{{Name: ".", Upstream: overLoopback(t, ".", manyUpstream)}}, MaxUDPSize: maxUDP}, c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return serve(t, &Server{Handler: h})
}

// exchangeRaw sends m over network and returns the reply's bytes, read
// into a 64 KiB buffer so nothing the server sends is cut by the client.
func exchangeRaw(t *testing.T, network, addr string, m *dns.Msg) []byte {
	t.Helper()
	c := &dns.Client{Net: network, Timeout: 5 * time.Second, UDPSize: dns.MaxMsgSize}
	conn, err := c.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.UDPSize = dns.MaxMsgSize
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if err := conn.WriteMsg(m); err != nil {
		t.Fatal(err)
	}
	b, err := conn.ReadMsgHeader(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A client advertising 65,535 bytes gets at most 1232 over UDP, with TC,
// on the general path (the miss) and on the fast path (the hit); over TCP
// it gets the whole answer (issue 13, DNS Flag Day 2020).
func TestUDPAnswersStopAt1232(t *testing.T) {
	addrs := sizeServer(t, 0)
	q := new(dns.Msg)
	q.SetQuestion("many.example.", dns.TypeA)
	q.SetEdns0(dns.MaxMsgSize, false)
	for _, path := range []string{"general (miss)", "fast (hit)"} {
		b := exchangeRaw(t, "udp", addrs["udp"], q)
		r := new(dns.Msg)
		if err := r.Unpack(b); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(b) > DefaultMaxUDPSize || !r.Truncated || r.Rcode != dns.RcodeSuccess {
			t.Errorf("%s: %d bytes, TC %v, rcode %s; want at most %d bytes with TC", path, len(b), r.Truncated,
				dns.RcodeToString[r.Rcode], DefaultMaxUDPSize)
		}
	}
	r := new(dns.Msg)
	if err := r.Unpack(exchangeRaw(t, "tcp", addrs["tcp"], q)); err != nil {
		t.Fatal(err)
	}
	if r.Truncated || len(r.Answer) != 100 {
		t.Errorf("TCP: TC %v, %d answers; want all 100", r.Truncated, len(r.Answer))
	}
}

// MaxUDPSize raises the cap; the client's own size still bounds it.
func TestMaxUDPSize(t *testing.T) {
	addrs := sizeServer(t, 4096)
	for _, tc := range []struct {
		advertised uint16
		limit      int
		tc         bool
	}{{dns.MaxMsgSize, 4096, false}, {1232, 1232, true}} {
		q := new(dns.Msg)
		q.SetQuestion(fmt.Sprintf("many%d.example.", tc.advertised), dns.TypeA)
		q.SetEdns0(tc.advertised, false)
		for _, path := range []string{"general", "fast"} {
			b := exchangeRaw(t, "udp", addrs["udp"], q)
			r := new(dns.Msg)
			if err := r.Unpack(b); err != nil {
				t.Fatal(err)
			}
			if len(b) > tc.limit || r.Truncated != tc.tc {
				t.Errorf("advertised %d, %s path: %d bytes, TC %v; want at most %d, TC %v",
					tc.advertised, path, len(b), r.Truncated, tc.limit, tc.tc)
			}
		}
	}
	for _, bad := range []int{511, 65536, -1} {
		if _, err := newSettings(Config{Zones: []Zone{{Name: ".", Upstream: named(".")}}, MaxUDPSize: bad}); err == nil {
			t.Errorf("MaxUDPSize %d accepted", bad)
		}
	}
}

// twoOPTs is a query with two OPT records in its additional section.
func twoOPTs(name string) *dns.Msg {
	q := new(dns.Msg)
	q.SetQuestion(name, dns.TypeA)
	q.SetEdns0(1232, false)
	q.Extra = append(q.Extra, &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT, Class: 1232}})
	return q
}

// Two OPT records in a query get FORMERR (RFC 6891 §6.1.1) over UDP and
// TCP, with a warm cache for the question (so the fast path would hit it
// were the packet plain) and without.
func TestTwoOPTsFORMERR(t *testing.T) {
	addrs := sizeServer(t, 0)
	warm := new(dns.Msg)
	warm.SetQuestion("warm.example.", dns.TypeA)
	exchangeRaw(t, "udp", addrs["udp"], warm)
	for _, name := range []string{"warm.example.", "cold.example."} {
		for _, network := range []string{"udp", "tcp"} {
			r := new(dns.Msg)
			if err := r.Unpack(exchangeRaw(t, network, addrs[network], twoOPTs(name))); err != nil {
				t.Fatal(err)
			}
			if r.Rcode != dns.RcodeFormatError || len(r.Answer) != 0 {
				t.Errorf("%s over %s: rcode %s, %d answers; want FORMERR", name, network, dns.RcodeToString[r.Rcode], len(r.Answer))
			}
		}
	}
}
