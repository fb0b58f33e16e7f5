package resolver

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
)

// The pipelined TCP connection (tcppipe.go, issue 22): several queries of
// one connection in flight, answers written as they come.

// pipedEnv is a TCP server whose handler resolves through u.
func pipedEnv(t *testing.T, u *dnstest.Upstream, tweak func(*Server)) *tcpEnv {
	t.Helper()
	h, _ := wireHandler(t, u.Addr, nil, nil)
	return newTCPEnv(t, func(s *Server) {
		s.Handler = h
		if tweak != nil {
			tweak(s)
		}
	})
}

// sendTCP writes a query for name with id on c.
func sendTCP(t *testing.T, c *dns.Conn, name string, id uint16) {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.Id = id
	if err := c.WriteMsg(m); err != nil {
		t.Fatalf("writing %s: %v", name, err)
	}
}

// readTCP reads the next reply on c.
func readTCP(t *testing.T, c *dns.Conn) *dns.Msg {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	r, err := c.ReadMsg()
	if err != nil {
		t.Fatalf("reading a reply: %v", err)
	}
	return r
}

// A query whose upstream is slow does not hold up the ones sent after it
// on the same connection: their answers come first (RFC 7766 §6.2.1.1),
// each with its own ID.
func TestTCPPipelinedAnswersOutOfOrder(t *testing.T) {
	u := wireUpstream(t)
	arrived, release := u.Hold("slow.example.")
	defer release()
	e := pipedEnv(t, u, nil)
	c := dialTCP(t, e.addr)
	sendTCP(t, c, "slow.example.", 1)
	sendTCP(t, c, "quick.example.", 2)
	<-arrived
	if r := readTCP(t, c); r.Id != 2 || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("first reply %v; want quick.example.'s (ID 2) while slow.example. is held", r)
	}
	release()
	if r := readTCP(t, c); r.Id != 1 || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("second reply %v; want slow.example.'s (ID 1)", r)
	}
}

// A client that closes its side after sending its queries still gets
// every answer owed, then the connection closes (RFC 7766 §6.2.4).
func TestTCPHalfCloseGetsOwedAnswers(t *testing.T) {
	u := wireUpstream(t)
	arrived, release := u.Hold("held.example.")
	defer release()
	e := pipedEnv(t, u, nil)
	c := dialTCP(t, e.addr)
	sendTCP(t, c, "held.example.", 7)
	sendTCP(t, c, "other.example.", 8)
	<-arrived
	if err := c.Conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got := map[uint16]bool{readTCP(t, c).Id: true}
	release()
	got[readTCP(t, c).Id] = true
	if !got[7] || !got[8] {
		t.Fatalf("answers %v; want IDs 7 and 8", got)
	}
	expectClosed(t, c.Conn, "after its owed answers")
	if got := e.waitReleased(t); got != "client" {
		t.Errorf("released as %q, want client", got)
	}
}

// A connection owes an answer for longer than its idle timeout: it is not
// idle then, gets the answer, and only afterwards closes as idle.
func TestTCPOwedAnswerOutlivesIdleTimeout(t *testing.T) {
	u := wireUpstream(t)
	u.SetFault("late.example.", dnstest.Fault{Delay: 300 * time.Millisecond})
	e := pipedEnv(t, u, func(s *Server) { s.TCPIdleTimeout = 50 * time.Millisecond })
	c := dialTCP(t, e.addr)
	sendTCP(t, c, "late.example.", 9)
	if r := readTCP(t, c); r.Id != 9 || len(r.Answer) != 1 {
		t.Fatalf("reply %v; want late.example.'s", r)
	}
	expectClosed(t, c.Conn, "idle after its answer")
	if got := e.waitReleased(t); got != "idle" {
		t.Errorf("released as %q, want idle", got)
	}
}

// At the cap, a connection that owes an answer is not closed for a newer
// one (the newer is refused); once its answer is out it is idle, and the
// next newcomer takes its place.
func TestTCPCapSparesConnectionOwingAnswers(t *testing.T) {
	u := wireUpstream(t)
	arrived, release := u.Hold("owed.example.")
	defer release()
	e := pipedEnv(t, u, func(s *Server) { s.TCPMaxConnections = 1 })
	first := dialTCP(t, e.addr)
	e.waitIdle(t, 1) // idle on arrival
	sendTCP(t, first, "owed.example.", 3)
	<-arrived
	refused, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer refused.Close()
	expectClosed(t, refused, "a connection over the cap while the other owes an answer")
	release()
	if r := readTCP(t, first); r.Id != 3 {
		t.Fatalf("reply %v; want ID 3", r)
	}
	e.waitIdle(t, 1) // idle once the answer is out
	third := dialTCP(t, e.addr)
	if r := askTCP(t, third, "after.example."); len(r.Answer) != 1 {
		t.Fatalf("the newcomer: %v", r)
	}
	expectClosed(t, first.Conn, "the idle connection, for the newcomer")
}

// At most maxPipelined queries of one connection wait at once: the next
// is read only when one of them is answered.
func TestTCPPipelineBound(t *testing.T) {
	u := wireUpstream(t)
	var arrived []<-chan struct{}
	var releases []func()
	for i := range maxPipelined + 1 {
		a, r := u.Hold(fmt.Sprintf("h%d.example.", i))
		arrived, releases = append(arrived, a), append(releases, r)
		defer r()
	}
	e := pipedEnv(t, u, nil)
	c := dialTCP(t, e.addr)
	for i := range maxPipelined + 1 {
		sendTCP(t, c, fmt.Sprintf("h%d.example.", i), uint16(i))
	}
	for _, a := range arrived[:maxPipelined] {
		<-a
	}
	select {
	case <-arrived[maxPipelined]:
		t.Fatalf("query %d reached the upstream with %d owed", maxPipelined+1, maxPipelined)
	default:
	}
	releases[0]()
	if r := readTCP(t, c); r.Id != 0 {
		t.Fatalf("reply %v; want ID 0", r)
	}
	select {
	case <-arrived[maxPipelined]:
	case <-time.After(10 * time.Second):
		t.Fatal("the next query was not read once one was answered")
	}
}
