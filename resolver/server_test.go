package resolver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/resolver/udpio"
)

// startTCP serves h with the given TCP idle timeout and returns the TCP
// address.
func startTCP(t *testing.T, h dns.Handler, idle time.Duration) string {
	t.Helper()
	return serve(t, &Server{Handler: h, TCPIdleTimeout: idle})["tcp"]
}

// RFC 7766 §6.2.1: one connection carries many queries, and a connection
// left idle is closed by the server.
func TestTCPManyQueriesThenIdleClose(t *testing.T) {
	e := newEnv(t, nil)
	addr := startTCP(t, e.h, 200*time.Millisecond)
	conn, err := dns.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for i, name := range []string{"one.example.", "two.example.", "three.example."} {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		if err := conn.WriteMsg(m); err != nil {
			t.Fatalf("query %d: %v", i, err)
		}
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		r, err := conn.ReadMsg()
		if err != nil || r.Id != m.Id || len(r.Answer) != 1 {
			t.Fatalf("query %d on the same connection: %v %v", i, r, err)
		}
	}
	// Now stay quiet: the server must close the connection (EOF), well
	// before our own 5 s read deadline.
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = conn.ReadMsg()
	if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("idle connection: %v, want EOF from the server closing it", err)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("idle connection was not closed by the server")
	}
}

func TestListenReportsBusyPort(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	srv := &Server{Handler: dns.HandlerFunc(func(dns.ResponseWriter, *dns.Msg) {})}
	err = srv.Listen([]string{pc.LocalAddr().String()})
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("Listen on a busy port: %v, want EADDRINUSE", err)
	}
}

func TestPanicBecomesSERVFAIL(t *testing.T) {
	got := make(chan any, 1)
	srv := &Server{
		Handler: dns.HandlerFunc(func(dns.ResponseWriter, *dns.Msg) { panic("boom") }),
		OnPanic: func(v any, _ []byte) { got <- v },
	}
	if err := srv.Listen([]string{"127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go srv.Serve(func() { close(ready) })
	<-ready
	defer srv.Shutdown(context.Background())
	for _, edns := range []bool{false, true} {
		m := new(dns.Msg)
		m.SetQuestion("x.example.", dns.TypeA)
		if edns {
			m.SetEdns0(1232, true)
		}
		r, _, err := (&dns.Client{Timeout: 5 * time.Second}).Exchange(m, strings.TrimPrefix(srv.Addrs()[0], "udp/"))
		if err != nil || r.Rcode != dns.RcodeServerFailure {
			t.Fatalf("reply %v, err %v; want SERVFAIL", r, err)
		}
		if v := <-got; v != "boom" {
			t.Fatalf("OnPanic got %v", v)
		}
		// The reply core's SERVFAIL (issue 34): RA, and for an EDNS
		// client an OPT with its DO and EDE 22.
		if !r.RecursionAvailable {
			t.Errorf("edns %v: RA not set", edns)
		}
		opt := r.IsEdns0()
		if (opt != nil) != edns || edns && (!opt.Do() || !hasEDE(r, dns.ExtendedErrorCodeNoReachableAuthority)) {
			t.Errorf("edns %v: OPT %v; want one with DO and EDE 22 for an EDNS client, none otherwise", edns, opt)
		}
	}
}

// RFC 6891 §7: a FORMERR or NOTIMP to a query with an OPT carries one,
// with the query's DO bit; without an OPT, none (issue 34: a FORMERR to
// an EDNS query with no question carried none).
func TestRejectionsCarryOPT(t *testing.T) {
	h, _ := diffHandler(t, nil)
	for _, tc := range []struct {
		name   string
		edit   func(*dns.Msg)
		edns   bool
		do     bool
		rcode  int
		hasOPT bool
	}{
		{"no question, EDNS", func(m *dns.Msg) { m.Question = nil }, true, false, dns.RcodeFormatError, true},
		{"no question, EDNS DO", func(m *dns.Msg) { m.Question = nil }, true, true, dns.RcodeFormatError, true},
		{"no question", func(m *dns.Msg) { m.Question = nil }, false, false, dns.RcodeFormatError, false},
		{"opcode STATUS, EDNS", func(m *dns.Msg) { m.Opcode = dns.OpcodeStatus }, true, false, dns.RcodeNotImplemented, true},
		{"opcode STATUS", func(m *dns.Msg) { m.Opcode = dns.OpcodeStatus }, false, false, dns.RcodeNotImplemented, false},
	} {
		m := new(dns.Msg)
		m.SetQuestion("x.example.", dns.TypeA)
		m.Id = 0x4242
		if tc.edns {
			m.SetEdns0(1232, tc.do)
		}
		tc.edit(m)
		pkt, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		w := &memWriter{}
		servePacket(h, pkt, w, func(error) {})
		r := new(dns.Msg)
		if err := r.Unpack(w.reply); err != nil {
			t.Fatalf("%s: reply: %v", tc.name, err)
		}
		if r.Rcode != tc.rcode || r.Id != 0x4242 {
			t.Errorf("%s: rcode %s id %#x, want %s", tc.name, dns.RcodeToString[r.Rcode], r.Id, dns.RcodeToString[tc.rcode])
		}
		opt := r.IsEdns0()
		if (opt != nil) != tc.hasOPT || opt != nil && opt.Do() != tc.do {
			t.Errorf("%s: OPT %v, want present %v with DO %v", tc.name, opt, tc.hasOPT, tc.do)
		}
	}
}

// The UDP listener's own loop answers over IPv4 and IPv6 sockets: the first
// query misses and goes the general way, the second is a fast-path hit, and
// both carry the client's ID and question.
func TestUDPListenerFastAndGeneralPaths(t *testing.T) {
	for _, listen := range []string{"127.0.0.1:0", "[::1]:0"} {
		t.Run(listen, func(t *testing.T) {
			if strings.HasPrefix(listen, "[") {
				if pc, err := net.ListenPacket("udp", listen); err != nil {
					t.Skipf("no IPv6 loopback here: %v", err)
				} else {
					pc.Close()
				}
			}
			h, _ := diffHandler(t, nil)
			srv := &Server{Handler: h}
			if err := srv.Listen([]string{listen}); err != nil {
				t.Fatal(err)
			}
			ready := make(chan struct{})
			go srv.Serve(func() { close(ready) })
			<-ready
			t.Cleanup(func() { srv.Shutdown(context.Background()) })
			addr := strings.TrimPrefix(srv.Addrs()[0], "udp/")
			for i, want := range []cache.Stats{{Misses: 1, Stored: 1}, {Hits: 1, Misses: 1, Stored: 1}} {
				m := new(dns.Msg)
				m.SetQuestion("WWW.example.", dns.TypeA)
				r, _, err := (&dns.Client{Timeout: 5 * time.Second}).Exchange(m, addr)
				if err != nil || r.Id != m.Id || r.Question[0].Name != "WWW.example." || len(r.Answer) != 1 {
					t.Fatalf("query %d: %v, %v", i, r, err)
				}
				if got := h.cache.Stats(); got != want {
					t.Errorf("after query %d cache stats %+v, want %+v", i, got, want)
				}
			}
		})
	}
}

// A burst larger than one batch (udpio.Batch datagrams per recvmmsg/sendmmsg),
// mixing hits and misses from several clients, gets every query answered
// exactly once with its own ID.
func TestUDPListenerAnswersBursts(t *testing.T) {
	h, _ := diffHandler(t, nil)
	srv := &Server{Handler: h}
	addr := serve(t, srv)["udp"]
	warm := new(dns.Msg)
	warm.SetQuestion("www.example.", dns.TypeA)
	if _, _, err := (&dns.Client{Timeout: 5 * time.Second}).Exchange(warm, addr); err != nil {
		t.Fatal(err)
	}
	const clients, perClient = 3, 3 * udpio.Batch
	for c := range clients {
		conn, err := net.Dial("udp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		want := map[uint16]string{}
		for i := range perClient {
			m := new(dns.Msg)
			name := "www.example."
			if i%3 == 0 {
				name = fmt.Sprintf("miss-%d-%d.example.", c, i) // the general path
			}
			m.SetQuestion(name, dns.TypeA)
			m.Id = uint16(c*1000 + i)
			want[m.Id] = name
			b, _ := m.Pack()
			if _, err := conn.Write(b); err != nil {
				t.Fatal(err)
			}
		}
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 1500)
		for len(want) > 0 {
			n, err := conn.Read(buf)
			if err != nil {
				t.Fatalf("client %d: %d queries unanswered: %v", c, len(want), err)
			}
			r := new(dns.Msg)
			if err := r.Unpack(buf[:n]); err != nil {
				t.Fatal(err)
			}
			name, ok := want[r.Id]
			if !ok || r.Question[0].Name != name || len(r.Answer) != 1 {
				t.Fatalf("client %d: unexpected or repeated reply %v", c, r)
			}
			delete(want, r.Id)
		}
	}
}
