package admin

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/towerd/towerd/test/dnstest"
)

// startLimited serves handler on 127.0.0.1:0 through a connLimiter of max
// connections.
func startLimited(t *testing.T, max int, handler http.Handler) (string, *connLimiter) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler, IdleTimeout: time.Minute}
	lim := newConnLimiter(max)
	lim.track(srv)
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String(), lim
}

// keepAlive opens a connection, sends one request on it and reads the
// answer, leaving the connection idle and open.
func keepAlive(t *testing.T, addr, path string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := bufio.NewReader(c)
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n", path)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("request on a kept-alive connection: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return c, r
}

// waitIdle waits until the limiter holds exactly n connections, all idle.
func waitIdle(t *testing.T, lim *connLimiter, n int) {
	t.Helper()
	dnstest.Eventually(t, func() bool {
		lim.mu.Lock()
		defer lim.mu.Unlock()
		idle := 0
		for _, s := range lim.conns {
			if !s.active && !s.closing {
				idle++
			}
		}
		return lim.live() == n && idle == n
	}, 10*time.Second, fmt.Sprintf("exactly %d connections held, all idle", n))
}

// At the cap, the connection idle longest makes room for a new one; when
// every slot has a request in progress, the new one gets 503 at once
// (issue 21: 1,100 idle keep-alive connections took every descriptor).
func TestConnLimiterEvictsIdleThenRefuses(t *testing.T) {
	release := make(chan struct{})
	busy := make(chan struct{}, 4)
	addr, lim := startLimited(t, 2, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/busy" {
			busy <- struct{}{}
			<-release
		}
		fmt.Fprintln(w, "ok")
	}))

	first, firstReader := keepAlive(t, addr, "/")
	second, secondReader := keepAlive(t, addr, "/")
	// The server marks a connection idle once it has written the answer
	// the client may already have read.
	waitIdle(t, lim, 2)
	// A third client is answered: the oldest idle connection made room.
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + addr + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("third client at the cap: %v %v, want 200", resp, err)
	}
	resp.Body.Close()
	// Which of the two went idle first is the server's view (it marks a
	// connection idle after the client may have read its answer): exactly
	// one was closed, the other is open.
	closed := 0
	for _, kept := range []struct {
		c net.Conn
		r *bufio.Reader
	}{{first, firstReader}, {second, secondReader}} {
		kept.c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		_, err := kept.r.ReadByte()
		if err == io.EOF {
			closed++
		}
		kept.c.Close()
	}
	if closed != 1 || lim.evicted.Load() != 1 {
		t.Errorf("%d of the two idle connections closed, %d evicted; want 1 and 1", closed, lim.evicted.Load())
	}

	// Two requests in progress hold both slots: the next is refused. The
	// slots are emptied first: the server sees the clients' closes in its
	// own time, and a connection still finishing its answer is busy.
	dnstest.Eventually(t, func() bool { return lim.count() == 0 }, 10*time.Second,
		"every connection let go after the clients closed theirs")
	for range 2 {
		go func() {
			resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + addr + "/busy")
			if err == nil {
				resp.Body.Close()
			}
		}()
		<-busy
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
	refused, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || refused.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("every slot busy: %v %v, want 503", refused, err)
	}
	body, _ := io.ReadAll(refused.Body)
	if !strings.Contains(string(body), "busy") || lim.refused.Load() != 1 {
		t.Errorf("refusal %q, %d refused; want the reason and 1", body, lim.refused.Load())
	}
	close(release)
}
