package upstream

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/goleak"

	"github.com/towerd/towerd/test/dnstest"
)

// TestMain fails the package when a test leaves a goroutine behind, which is
// how a prober that outlives Close would show up.
func TestMain(m *testing.M) {
	// The reader of attempt sockets (udpsock_linux.go) is one goroutine for
	// the process, started with the first exchange and never ended.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/towerd/towerd/upstream.(*udpReader).run"))
}

// waitTimeout bounds every wait in these tests so a bug fails the test
// instead of hanging it; nothing waits for it to pass on the happy path.
const waitTimeout = 10 * time.Second

// scripted starts a test upstream (UDP and TCP on one 127.0.0.1 port) that
// answers every query with script, and returns its address.
func scripted(t *testing.T, script dnstest.Script) string {
	t.Helper()
	u := dnstest.NewUpstream(t)
	u.SetScript(script)
	return u.Addr
}

// syncMarker is a datagram no DNS parser accepts; rawServer treats it as
// "everything sent before me has been read".
var syncMarker = []byte("towerd-sync")

// rawServer is a UDP DNS server built on a bare socket, for replies miekg's
// server would refuse to send (wrong IDs, garbage, spoofed sources) and for
// exact packet counts. Datagrams are handled one at a time, in order.
type rawServer struct {
	conn    net.PacketConn
	addr    string
	respond func(q *dns.Msg, from net.Addr) [][]byte

	mu      sync.Mutex
	queries []*dns.Msg
	synced  chan struct{}
}

// startRaw serves respond on 127.0.0.1:0. respond returns the datagrams to
// send back, in order; nil drops the query (a black hole).
func startRaw(t *testing.T, respond func(q *dns.Msg, from net.Addr) [][]byte) *rawServer {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{conn: conn, addr: conn.LocalAddr().String(), respond: respond}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.loop(t)
	}()
	t.Cleanup(func() {
		conn.Close()
		<-done
	})
	return s
}

func (s *rawServer) loop(t *testing.T) {
	buf := make([]byte, maxMessageSize)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			t.Errorf("raw server read: %v", err)
			return
		}
		if bytes.Equal(buf[:n], syncMarker) {
			s.mu.Lock()
			close(s.synced)
			s.mu.Unlock()
			continue
		}
		q := new(dns.Msg)
		if err := q.Unpack(buf[:n]); err != nil {
			t.Errorf("raw server got an unparseable query: %v", err)
			continue
		}
		s.mu.Lock()
		s.queries = append(s.queries, q)
		s.mu.Unlock()
		for _, out := range s.respond(q, from) {
			if _, err := s.conn.WriteTo(out, from); err != nil {
				t.Errorf("raw server write: %v", err)
			}
		}
	}
}

// received returns the queries read so far, after making sure every datagram
// sent before the call has been read: the marker queues behind them.
func (s *rawServer) received(t *testing.T) []*dns.Msg {
	t.Helper()
	s.mu.Lock()
	s.synced = make(chan struct{})
	synced := s.synced
	s.mu.Unlock()
	c, err := net.Dial("udp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(syncMarker); err != nil {
		t.Fatal(err)
	}
	select {
	case <-synced:
	case <-time.After(waitTimeout):
		t.Fatal("raw server did not see the sync marker")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*dns.Msg(nil), s.queries...)
}

// count is len(received) without the probes, which tests count apart.
func (s *rawServer) count(t *testing.T) int {
	t.Helper()
	n := 0
	for _, q := range s.received(t) {
		if !isProbe(q) {
			n++
		}
	}
	return n
}

func isProbe(q *dns.Msg) bool {
	return len(q.Question) == 1 && q.Question[0].Name == "." && q.Question[0].Qtype == dns.TypeNS
}

// testQuery is the question every test asks unless it needs another.
func testQuery() *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion("www.example.org.", dns.TypeA)
	m.Id = 4321
	return m
}

// replyTo builds a reply to q with rcode and one A record per ip.
func replyTo(q *dns.Msg, rcode int, ips ...string) *dns.Msg {
	r := new(dns.Msg)
	r.SetRcode(q, rcode)
	for _, ip := range ips {
		r.Answer = append(r.Answer, &dns.A{
			Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
			A:   net.ParseIP(ip),
		})
	}
	return r
}

// mustPack packs m; it reports with Errorf because responders run on the
// server's goroutine, where Fatal is not allowed.
func mustPack(t *testing.T, m *dns.Msg) []byte {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Errorf("packing %v: %v", m, err)
	}
	return b
}

// answering returns a raw responder that replies with rcode (and, for
// NOERROR, one A record).
func answering(t *testing.T, rcode int) func(*dns.Msg, net.Addr) [][]byte {
	return func(q *dns.Msg, _ net.Addr) [][]byte {
		if rcode == dns.RcodeSuccess {
			return [][]byte{mustPack(t, replyTo(q, rcode, "192.0.2.1"))}
		}
		return [][]byte{mustPack(t, replyTo(q, rcode))}
	}
}

// blackHole reads queries and never answers.
func blackHole(*dns.Msg, net.Addr) [][]byte { return nil }

// firstA returns the address of reply's first A record, or "".
func firstA(reply *dns.Msg) string {
	if reply == nil {
		return ""
	}
	for _, rr := range reply.Answer {
		if a, ok := rr.(*dns.A); ok {
			return a.A.String()
		}
	}
	return ""
}
