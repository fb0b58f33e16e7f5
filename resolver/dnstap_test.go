package resolver

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// recordingTap keeps copies of what the hook hands it.
type recordingTap struct {
	mu        sync.Mutex
	client    []ClientExchange
	forwarder []ForwarderExchange
}

var _ Tap = (*recordingTap)(nil)

func (r *recordingTap) Client(e ClientExchange) {
	c := e
	c.Query, c.Response = bytes.Clone(e.Query), bytes.Clone(e.Response)
	r.mu.Lock()
	r.client = append(r.client, c)
	r.mu.Unlock()
}

func (r *recordingTap) Forwarder(e ForwarderExchange) {
	c := e
	c.Query, c.Response = bytes.Clone(e.Query), bytes.Clone(e.Response)
	r.mu.Lock()
	r.forwarder = append(r.forwarder, c)
	r.mu.Unlock()
}

func (r *recordingTap) counts() (client, forwarder int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.client), len(r.forwarder)
}

func (r *recordingTap) lastClient() ClientExchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.client[len(r.client)-1]
}

// udpRaw sends pkt and returns the reply's bytes.
func udpRaw(t *testing.T, addr string, pkt []byte) []byte {
	t.Helper()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(pkt); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

func packed(t *testing.T, name string, qtype, qclass uint16) []byte {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.Question[0].Qclass = qclass
	m.SetEdns0(1232, false)
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTapEveryRoute holds every answer route to the hook: the wire miss
// (with its forwarder exchange), the fast hit over UDP and pipelined over
// TCP, and the general path; each client exchange carries the bytes the
// client sent and got (the general path's query as packed again), the
// client's address and what answered.
func TestTapEveryRoute(t *testing.T) {
	tap := &recordingTap{}
	var srv *Server
	e := buildEnv(t, func(c *Config) { c.Tap = tap }, nil, func(_ *Handler, s *Server) { srv = s })
	tcpAddr := ""
	for _, a := range srv.Addrs() {
		if network, addr, _ := strings.Cut(a, "/"); network == "tcp" {
			tcpAddr = addr
		}
	}

	check := func(what string, q, reply []byte, source string, tcp bool) {
		t.Helper()
		c := tap.lastClient()
		if !bytes.Equal(c.Query, q) || !bytes.Equal(c.Response, reply) || c.Source != source || c.TCP != tcp ||
			!c.Client.Addr().IsLoopback() || c.Client.Port() == 0 || c.Zone != "." || c.ResponseTime.Before(c.QueryTime) {
			t.Errorf("%s: tap got source %q tcp %v client %v zone %q, query equal %v, response equal %v; want %q",
				what, c.Source, c.TCP, c.Client, c.Zone, bytes.Equal(c.Query, q), bytes.Equal(c.Response, reply), source)
		}
	}

	q := packed(t, "tap.example.", dns.TypeA, dns.ClassINET)
	check("wire miss", q, udpRaw(t, e.addr, q), SourceUpstream, false)
	if _, fw := tap.counts(); fw != 1 {
		t.Fatalf("%d forwarder exchanges after one miss, want 1", fw)
	}
	f := tap.forwarder[0]
	var fq, fr dns.Msg
	if fq.Unpack(f.Query) != nil || fr.Unpack(f.Response) != nil || fq.Id != fr.Id || fq.Question[0].Name != "tap.example." ||
		f.Server.String() != e.up.addr || f.TCP || f.QueryTime.IsZero() || f.ResponseTime.Before(f.QueryTime) {
		t.Errorf("forwarder exchange: server %v tcp %v, query %v, response %v", f.Server, f.TCP, &fq, &fr)
	}

	q = packed(t, "tap.example.", dns.TypeA, dns.ClassINET)
	check("fast hit", q, udpRaw(t, e.addr, q), SourceCache, false)

	// Two queries in one write: the pipelined TCP loop answers both.
	conn, err := net.Dial("tcp", tcpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	q1, q2 := packed(t, "tap.example.", dns.TypeA, dns.ClassINET), packed(t, "tap.example.", dns.TypeA, dns.ClassINET)
	binary.BigEndian.PutUint16(q2, 0x4242)
	var both []byte
	for _, q := range [][]byte{q1, q2} {
		both = binary.BigEndian.AppendUint16(both, uint16(len(q)))
		both = append(both, q...)
	}
	before, _ := tap.counts()
	if _, err := conn.Write(both); err != nil {
		t.Fatal(err)
	}
	replies := map[uint16][]byte{}
	for range 2 {
		var l [2]byte
		if _, err := io.ReadFull(conn, l[:]); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(conn, b); err != nil {
			t.Fatal(err)
		}
		replies[binary.BigEndian.Uint16(b)] = b
	}
	if after, _ := tap.counts(); after != before+2 {
		t.Fatalf("%d client exchanges for two pipelined TCP queries", after-before)
	}
	tap.mu.Lock()
	for _, c := range tap.client[before:] {
		if id := binary.BigEndian.Uint16(c.Query); !c.TCP || c.Source != SourceCache || !bytes.Equal(c.Response, replies[id]) {
			t.Errorf("pipelined TCP query %#x: tcp %v source %q, response equal %v", id, c.TCP, c.Source, bytes.Equal(c.Response, replies[id]))
		}
	}
	tap.mu.Unlock()

	// A CHAOS question: REFUSED by the general path (ServeDNS), whose query
	// bytes are the unpacked query packed again.
	q = packed(t, "tap.example.", dns.TypeA, dns.ClassCHAOS)
	reply := udpRaw(t, e.addr, q)
	c := tap.lastClient()
	var cq dns.Msg
	if cq.Unpack(c.Query) != nil || cq.Question[0].Qclass != dns.ClassCHAOS || !bytes.Equal(c.Response, reply) ||
		c.Source != SourceLocal || c.Client.Port() == 0 {
		t.Errorf("general path: source %q client %v, response equal %v, query %v", c.Source, c.Client, bytes.Equal(c.Response, reply), &cq)
	}
	if n, fw := tap.counts(); n != 5 || fw != 1 {
		t.Errorf("%d client and %d forwarder exchanges, want 5 and 1", n, fw)
	}
}

// discardTap is a Tap that keeps nothing: the hook's own cost.
type discardTap struct{}

func (discardTap) Client(ClientExchange)       {}
func (discardTap) Forwarder(ForwarderExchange) {}

// BenchmarkAnswerPacketHitTap is BenchmarkAnswerPacketHit with a Tap that
// keeps nothing: what the hook adds to a fast hit besides the Tap's own
// work (the dnstap writer's is BenchmarkClientTap).
func BenchmarkAnswerPacketHitTap(b *testing.B) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	h, _ := diffHandler(b, m)
	s := *h.settings.Load()
	s.Tap = discardTap{}
	h.settings.Store(&s)
	benchHit(b, h)
}
