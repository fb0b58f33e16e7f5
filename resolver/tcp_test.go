package resolver

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// tcpEnv is a Server with one TCP (and UDP) listener on loopback in front
// of diffHandler, with the TCP budget's hooks turned into channels.
type tcpEnv struct {
	srv      *Server
	addr     string
	idle     chan struct{} // a connection went idle
	released chan int      // a connection was released, with its reason
}

func newTCPEnv(t *testing.T, tweak func(*Server)) *tcpEnv {
	t.Helper()
	h, _ := diffHandler(t, nil)
	srv := &Server{Handler: h}
	if tweak != nil {
		tweak(srv) // may replace the handler
	}
	if err := srv.Listen([]string{"127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	e := &tcpEnv{srv: srv, idle: make(chan struct{}, 1000), released: make(chan int, 1000)}
	srv.tcpBudget.onIdle = func() {
		select { // never block the server: it holds the budget's lock
		case e.idle <- struct{}{}:
		default:
		}
	}
	srv.tcpBudget.onRelease = func(reason int) { e.released <- reason }
	ready := make(chan struct{})
	go srv.Serve(func() { close(ready) })
	<-ready
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	for _, a := range srv.Addrs() {
		if addr, ok := cutPrefix(a, "tcp/"); ok {
			e.addr = addr
		}
	}
	return e
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):], true
	}
	return s, false
}

// waitIdle waits until n more connections went idle.
func (e *tcpEnv) waitIdle(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-e.idle:
		case <-time.After(5 * time.Second):
			t.Fatal("no connection went idle within 5 s")
		}
	}
}

// waitReleased waits for the next released connection and returns its
// reason's label.
func (e *tcpEnv) waitReleased(t *testing.T) string {
	t.Helper()
	select {
	case r := <-e.released:
		return tcpClosedLabels[r]
	case <-time.After(10 * time.Second):
		t.Fatal("no connection was released within 10 s")
		return ""
	}
}

func (e *tcpEnv) closed(t *testing.T, reason string) uint64 {
	t.Helper()
	return e.srv.TCPStats().Closed[reason]
}

func dialTCP(t *testing.T, addr string) *dns.Conn {
	t.Helper()
	c, err := dns.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// askTCP sends name A on c and returns the reply.
func askTCP(t *testing.T, c *dns.Conn, name string) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	if err := c.WriteMsg(m); err != nil {
		t.Fatalf("writing %s: %v", name, err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	r, err := c.ReadMsg()
	if err != nil || r.Id != m.Id {
		t.Fatalf("reply to %s: %v %v", name, r, err)
	}
	return r
}

// expectClosed reads from c and wants the server's close (EOF or reset),
// not our own deadline.
func expectClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Read(make([]byte, 1))
	if errors.Is(err, os.ErrDeadlineExceeded) || err == nil {
		t.Fatalf("%s: read %v, want the server to close the connection", what, err)
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("%s: read %v, want EOF", what, err)
	}
}

// At the cap, a new connection closes the one idle longest and is served.
func TestTCPCapClosesOldestIdle(t *testing.T) {
	e := newTCPEnv(t, func(s *Server) { s.TCPMaxConnections = 2 })
	first := dialTCP(t, e.addr)
	askTCP(t, first, "one.example.")
	e.waitIdle(t, 2) // idle on arrival and again after the answer
	second := dialTCP(t, e.addr)
	askTCP(t, second, "two.example.")
	e.waitIdle(t, 2) // first is now the one idle longest
	third := dialTCP(t, e.addr)
	if r := askTCP(t, third, "three.example."); len(r.Answer) != 1 {
		t.Fatalf("third connection: %v", r)
	}
	expectClosed(t, first, "the oldest idle connection")
	if got := e.waitReleased(t); got != "cap" {
		t.Errorf("first connection released as %q, want cap", got)
	}
	askTCP(t, second, "two-again.example.") // the newer idle one stays
	if st := e.srv.TCPStats(); st.Connections != 2 || st.Limit != 2 {
		t.Errorf("stats: %d connections, limit %d; want 2 and 2", st.Connections, st.Limit)
	}
}

// At the cap with every connection inside a query, a new connection is
// closed at once: a query being answered is never cut for it.
func TestTCPCapRefusesWhenNoneIdle(t *testing.T) {
	arrived := make(chan struct{}, 2)
	release := make(chan struct{})
	hold := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		arrived <- struct{}{}
		<-release
		m := new(dns.Msg)
		m.SetReply(r)
		w.WriteMsg(m)
	})
	e := newTCPEnv(t, func(s *Server) {
		s.Handler = hold
		s.TCPMaxConnections = 2
	})
	defer close(release)
	for i := range 2 {
		c := dialTCP(t, e.addr)
		m := new(dns.Msg)
		m.SetQuestion("hold.example.", dns.TypeA)
		if err := c.WriteMsg(m); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
	<-arrived
	<-arrived // both connections are answering a query
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	expectClosed(t, c, "a connection over the cap")
	if got := e.closed(t, "cap"); got != 1 {
		t.Errorf("closed{cap} = %d, want 1", got)
	}
	select {
	case r := <-e.released:
		t.Errorf("a connection inside a query was released as %q", tcpClosedLabels[r])
	default:
	}
}

// A length prefix over MaxTCPQuerySize closes the connection before
// anything is read or allocated for it; so does a query whose bytes stop.
func TestTCPOversizeAndStalledQueries(t *testing.T) {
	e := newTCPEnv(t, func(s *Server) { s.TCPReadTimeout = 200 * time.Millisecond })
	for _, tc := range []struct {
		name   string
		send   []byte
		reason string
	}{
		{"0xFFFF announced", []byte{0xFF, 0xFF}, "oversize"},
		{"4097 announced", []byte{0x10, 0x01, 0, 0, 0}, "oversize"},
		{"half a prefix", []byte{0x00}, "stalled"},
		{"32 announced, 3 sent", []byte{0, 32, 1, 2, 3}, "stalled"},
	} {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(tc.send)
		expectClosed(t, c, tc.name)
		c.Close()
		if got := e.waitReleased(t); got != tc.reason {
			t.Errorf("%s: released as %q, want %q", tc.name, got, tc.reason)
		}
	}
	// The largest query allowed is read and answered.
	c := dialTCP(t, e.addr)
	m := new(dns.Msg)
	m.SetQuestion("padded.example.", dns.TypeA)
	m.SetEdns0(1232, false)
	wire, _ := m.Pack()
	opt := m.IsEdns0()
	opt.Option = append(opt.Option, &dns.EDNS0_PADDING{Padding: make([]byte, MaxTCPQuerySize-len(wire)-4)})
	if wire, _ = m.Pack(); len(wire) != MaxTCPQuerySize {
		t.Fatalf("padded query is %d bytes", len(wire))
	}
	if err := c.WriteMsg(m); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if r, err := c.ReadMsg(); err != nil || r.Id != m.Id || r.Rcode != dns.RcodeSuccess {
		t.Fatalf("a %d-byte query: %v %v", MaxTCPQuerySize, r, err)
	}
}

// A client that sends queries and never reads the replies loses its
// connection once a reply cannot be written within the write timeout.
func TestTCPClientThatNeverReads(t *testing.T) {
	e := newTCPEnv(t, func(s *Server) { s.TCPWriteTimeout = 200 * time.Millisecond })
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		return serr
	}}
	c, err := d.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m := new(dns.Msg)
	m.SetQuestion("huge.example.", dns.TypeA) // 100 addresses, ~1.6 KB a reply
	wire, _ := m.Pack()
	one := binary.BigEndian.AppendUint16(nil, uint16(len(wire)))
	one = append(one, wire...)
	var batch []byte
	for range 4000 { // ~6 MB of replies: more than any socket buffer holds
		batch = append(batch, one...)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		c.SetWriteDeadline(time.Now().Add(15 * time.Second))
		c.Write(batch) // fails once the server closes; that is the point
	})
	if got := e.waitReleased(t); got != "write_timeout" {
		t.Errorf("released as %q, want write_timeout", got)
	}
	c.Close()
	wg.Wait()
}

// Shutdown closes idle connections at once and lets a query being
// answered finish.
func TestTCPShutdownDrains(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{})
	slow := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		close(arrived)
		<-release
		m := new(dns.Msg)
		m.SetReply(r)
		w.WriteMsg(m)
	})
	srv := &Server{Handler: slow}
	if err := srv.Listen([]string{"127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(func() { close(ready) }) }()
	<-ready
	addr, _ := cutPrefix(srv.Addrs()[1], "tcp/")
	idle := dialTCP(t, addr)
	busy := dialTCP(t, addr)
	m := new(dns.Msg)
	m.SetQuestion("slow.example.", dns.TypeA)
	if err := busy.WriteMsg(m); err != nil {
		t.Fatal(err)
	}
	<-arrived
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stopped <- srv.Shutdown(ctx)
	}()
	expectClosed(t, idle.Conn, "idle connection at shutdown")
	close(release)
	busy.SetReadDeadline(time.Now().Add(5 * time.Second))
	if r, err := busy.ReadMsg(); err != nil || r.Id != m.Id {
		t.Fatalf("the query being answered at shutdown: %v %v", r, err)
	}
	expectClosed(t, busy.Conn, "busy connection after its answer")
	if err := <-stopped; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// emfileListener fails its first accepts with EMFILE, as accept(2) does
// when the process is out of descriptors, then accepts for real.
type emfileListener struct {
	net.Listener
	mu    sync.Mutex
	fails int
}

func (l *emfileListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if l.fails > 0 {
		l.fails--
		l.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

// EMFILE is counted and backed off, and the listener serves on.
func TestTCPAcceptBacksOffOnEMFILE(t *testing.T) {
	h, _ := diffHandler(t, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &Server{Handler: h}
	srv.AddListener(&emfileListener{Listener: l, fails: 3})
	ready := make(chan struct{})
	go srv.Serve(func() { close(ready) })
	<-ready
	defer srv.Shutdown(context.Background())
	c := dialTCP(t, l.Addr().String())
	askTCP(t, c, "after-emfile.example.")
	st := srv.TCPStats()
	if st.AcceptErrors["emfile"] != 3 || st.AcceptErrors["other"] != 0 {
		t.Errorf("accept errors %v, want emfile 3", st.AcceptErrors)
	}
}
