package resolver

import (
	"fmt"
	"net"
	"testing"
	"time"
)

// beginQuery opens a connection and sends the first byte of a length
// prefix, and no more (a slow-loris client after its first second), and
// waits until the server reads it. Reports from queries answered before
// are passed over first.
func beginQuery(t *testing.T, e *tcpEnv, reading chan struct{}) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for len(reading) > 0 {
		<-reading
	}
	if _, err := c.Write([]byte{0}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reading:
	case <-time.After(5 * time.Second):
		t.Fatal("the server did not begin reading the query")
	}
	return c
}

// TestTCPWaitingLongestLosesItsSlot is issue 21's rule: at the cap, the
// connection that has held its slot longest without bringing a whole
// query (slow to send one, or idle) gives it to the new connection, whose
// query is answered; a connection that asked and waits for its next
// query goes in its turn, after the slow ones that came before it.
func TestTCPWaitingLongestLosesItsSlot(t *testing.T) {
	reading := make(chan struct{}, 100)
	e := newTCPEnv(t, func(s *Server) {
		s.TCPMaxConnections = 3
		s.TCPReadTimeout = 10 * time.Second // only the cap closes a slow one here
	})
	e.srv.tcpBudget.mu.Lock()
	e.srv.tcpBudget.onReading = func() { reading <- struct{}{} }
	e.srv.tcpBudget.mu.Unlock()

	slow1 := beginQuery(t, e, reading)
	slow2 := beginQuery(t, e, reading)
	for len(e.idle) > 0 { // the slow ones' reports: they read after going idle
		<-e.idle
	}
	asked := dialTCP(t, e.addr)
	askTCP(t, asked, "asked.example.")
	e.waitIdle(t, 2) // on arrival and after its answer: it waits since then

	for i, want := range []struct {
		gone   net.Conn
		reason string
	}{{slow1, "slow"}, {slow2, "slow"}, {asked.Conn, "cap"}} {
		real := dialTCP(t, e.addr)
		if r := askTCP(t, real, "real.example."); len(r.Answer) != 1 {
			t.Fatalf("real client %d: %v", i, r)
		}
		expectClosed(t, want.gone, fmt.Sprintf("real client %d: the connection waiting longest", i))
		if got := e.waitReleased(t); got != want.reason {
			t.Errorf("real client %d: the connection waiting longest released as %q, want %q", i, got, want.reason)
		}
	}
	if st := e.srv.TCPStats(); st.Closed["slow"] != 2 || st.Closed["cap"] != 1 || st.Connections != 3 {
		t.Errorf("stats: %+v; want 2 slow, 1 cap, 3 open", st)
	}
}

// TestTCPNewConnectionWaitsFromAdmission: a connection that has sent
// nothing yet waits from the moment it is admitted, so an older slow one
// goes before it, and it goes before a newer one.
func TestTCPNewConnectionWaitsFromAdmission(t *testing.T) {
	reading := make(chan struct{}, 100)
	e := newTCPEnv(t, func(s *Server) {
		s.TCPMaxConnections = 2
		s.TCPReadTimeout = 10 * time.Second
	})
	e.srv.tcpBudget.mu.Lock()
	e.srv.tcpBudget.onReading = func() { reading <- struct{}{} }
	e.srv.tcpBudget.mu.Unlock()
	slow := beginQuery(t, e, reading)
	silent, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	e.waitIdle(t, 2) // both served: slow before its first byte, silent now
	third := dialTCP(t, e.addr)
	askTCP(t, third, "third.example.")
	expectClosed(t, slow, "the older, slow connection")
	fourth := dialTCP(t, e.addr)
	askTCP(t, fourth, "fourth.example.")
	expectClosed(t, silent, "the silent connection")
}
