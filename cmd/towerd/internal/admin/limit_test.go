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

	oldest, oldestReader := keepAlive(t, addr, "/")
	keepAlive(t, addr, "/")
	if n := lim.count(); n != 2 {
		t.Fatalf("%d connections held, want 2", n)
	}
	// A third client is answered: the oldest idle connection made room.
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + addr + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("third client at the cap: %v %v, want 200", resp, err)
	}
	resp.Body.Close()
	oldest.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := oldestReader.ReadByte(); err == nil {
		t.Errorf("the oldest idle connection is still open")
	}
	if lim.evicted.Load() < 1 {
		t.Errorf("evicted %d, want at least 1", lim.evicted.Load())
	}

	// Two requests in progress hold both slots: the next is refused.
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
