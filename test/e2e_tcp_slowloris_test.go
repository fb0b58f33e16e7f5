package test

import (
	"fmt"
	"io"
	"net"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Slow-loris shape (issue 21, item 8): slowLorisConns connections each send
// a query one byte a second, dialling again whenever towerd closes theirs,
// while realQueries real clients ask over TCP.
const (
	slowLorisConns = 500
	realQueries    = 50
	// slowLorisHold bounds how long the attack runs before the real
	// queries; the cap is full well before.
	slowLorisHold = 3 * time.Second
)

// TestTCPSlowLoris: 500 connections sending a byte a second held the TCP
// cap against real clients: 19 of 40 of their queries failed with the
// defaults, 30 of 60 at nofile 1024. Now a connection whose query is slow
// to arrive is the first to give its slot to a new one: every real query,
// a cached name and misses from the real upstream, is answered, the slow
// connections are closed as "slow", RSS stays within its bound, and towerd
// still reloads and stops on SIGTERM (the harness's cleanup).
func TestTCPSlowLoris(t *testing.T) {
	for _, tc := range []struct {
		name    string
		wrapper []string
	}{
		{"defaults", nil},
		{"nofile 1024", []string{"prlimit", "--nofile=1024:1024"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.wrapper != nil {
				if _, err := exec.LookPath("prlimit"); err != nil {
					t.Skip("needs util-linux prlimit")
				}
			}
			up := newTestUpstream(t)
			up.Add(t, "cached.slowloris.test. 300 IN A 192.0.2.1")
			cfg := writeConfig(t, "")
			d := startTowerdVia(t, tc.wrapper, "-config", cfg, "-listen", "127.0.0.1:0",
				"-upstream", up.Addr, "-consul-dns", up.Addr, "-log-level", "info")
			pid := d.cmd.Process.Pid
			if r := mustExchange(t, d.TCP, "tcp", query("cached.slowloris.test.", dns.TypeA, false)); r.Rcode != dns.RcodeSuccess {
				t.Fatalf("warm-up: %v", r)
			}
			limit := scrapeNoKeepAlive(t, d.Admin)["towerd_tcp_connections_limit"]
			idleRSS, err := processRSS(pid)
			if err != nil {
				t.Fatal(err)
			}
			bound := idleRSS + int64(limit)*tcpRSSPerConn
			if raceEnabled {
				bound = idleRSS * rssRaceFactor
			}

			stop, dials := runSlowLoris(t, d.TCP)
			defer stop()
			waitFor(t, "the slow connections to fill the TCP cap", func() bool {
				return scrapeNoKeepAlive(t, d.Admin)["towerd_tcp_connections"] >= limit
			})
			hold := time.NewTimer(slowLorisHold)
			<-hold.C // the attack runs a while: slots churn, reconnects come

			answered := 0
			for i := range realQueries {
				name, want := "cached.slowloris.test.", "192.0.2.1"
				if i%2 == 1 {
					name, want = fmt.Sprintf("miss-%d.slowloris.test.", i), fmt.Sprintf("198.51.100.%d", i)
					up.Add(t, name+" 300 IN A "+want)
				}
				c := &dns.Client{Net: "tcp", Timeout: 5 * time.Second}
				r, _, err := c.Exchange(query(name, dns.TypeA, false), d.TCP)
				if err != nil || r.Rcode != dns.RcodeSuccess || !slices.Equal(addresses(r.Answer), []string{want}) {
					t.Errorf("real query %d (%s) during the attack: %v, err %v", i, name, r, err)
					continue
				}
				answered++
			}
			if n := up.Count("cached.slowloris.test.", dns.TypeA); n != 1 {
				t.Errorf("the cached name reached the upstream %d times, want 1 (the warm-up)", n)
			}
			rss, err := processRSS(pid)
			if err != nil {
				t.Fatal(err)
			}
			m := scrapeNoKeepAlive(t, d.Admin)
			t.Logf("%s: %d of %d real TCP queries answered; %d slow-loris dials; cap %.0f, open %.0f; closed slow %.0f, cap %.0f, stalled %.0f; RSS %.1f MiB (idle %.1f, bound %.1f)",
				tc.name, answered, realQueries, dials.Load(), limit, m["towerd_tcp_connections"],
				m[`towerd_tcp_connections_closed_total{reason="slow"}`], m[`towerd_tcp_connections_closed_total{reason="cap"}`],
				m[`towerd_tcp_connections_closed_total{reason="stalled"}`], mib(rss), mib(idleRSS), mib(bound))
			if m[`towerd_tcp_connections_closed_total{reason="slow"}`] == 0 {
				t.Error("no slow connection lost its slot")
			}
			if rss > bound {
				t.Errorf("RSS %.1f MiB, bound %.1f MiB", mib(rss), mib(bound))
			}

			// Still reloads under the attack.
			d.signal(t, syscall.SIGHUP)
			waitFor(t, "the reload", func() bool {
				return scrapeNoKeepAlive(t, d.Admin)[`towerd_config_reloads_total{result="success"}`] == 1
			})
		})
	}
}

// runSlowLoris keeps slowLorisConns connections to addr, each sending a
// query for the cached name one byte a second and dialling again (after
// 100 ms) once towerd closed it, until stop, which returns once every
// client has closed its connection. dials counts the connections made.
func runSlowLoris(t *testing.T, addr string) (stop func(), dials *atomic.Int64) {
	t.Helper()
	wire, err := query("cached.slowloris.test.", dns.TypeA, false).Pack()
	if err != nil {
		t.Fatal(err)
	}
	msg := append([]byte{byte(len(wire) >> 8), byte(len(wire))}, wire...)
	done := make(chan struct{})
	dials = new(atomic.Int64)
	var wg sync.WaitGroup
	for range slowLorisConns {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				c, err := floodDialer.Dial("tcp", addr)
				if err != nil {
					if !pause(done, 100*time.Millisecond) {
						return
					}
					continue
				}
				dials.Add(1)
				slowLoris(c, msg, done)
				c.Close()
				if !pause(done, 100*time.Millisecond) {
					return
				}
			}
		})
	}
	return func() { close(done); wg.Wait() }, dials
}

// slowLoris writes msg to c one byte a second until towerd closes c, the
// message is out (then it waits for the close), or done.
func slowLoris(c net.Conn, msg []byte, done <-chan struct{}) {
	closed := make(chan struct{})
	go func() {
		io.Copy(io.Discard, c) // returns when towerd closes c, or c.Close below
		close(closed)
	}()
	defer func() { c.Close(); <-closed }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for _, b := range msg {
		if _, err := c.Write([]byte{b}); err != nil {
			return
		}
		select {
		case <-tick.C:
		case <-closed:
			return
		case <-done:
			return
		}
	}
	select {
	case <-closed:
	case <-done:
	}
}

// pause waits d, or reports false when done closes first.
func pause(done <-chan struct{}, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-done:
		return false
	}
}
