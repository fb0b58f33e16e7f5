package test

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/towerd/towerd/test/dnstest"
)

// TCP flood shape (issue 13): towerd runs with 256 file descriptors, and
// each flood holds tcpFloodConns connections to it at once, more than the
// descriptors it has, for tcpFloodRounds checks tcpFloodTick apart.
const (
	tcpFloodNofile = 256
	// upstream.max_inflight: the fd reserve (daemon/fds.go) is 64, 16×4
	// upstream sockets, 32+2 for the admin server and 16+2 for the control
	// socket (the Consul watch is off): 180, so the TCP cap is 256 − 180.
	tcpFloodInflight = 16
	tcpFloodCap      = tcpFloodNofile - (64 + tcpFloodInflight*4 + (32 + 2) + (16 + 2))
	tcpFloodConns    = 300
	tcpFloodRounds   = 30
	tcpFloodTick     = 100 * time.Millisecond
	// A flood client dials again tcpFloodRedial after towerd closed its
	// connection, and a flood dials at most tcpFloodMaxDials times: the
	// cap refuses fast, and an unpaced client would only measure how fast
	// this machine's two cores can open sockets.
	tcpFloodRedial   = 100 * time.Millisecond
	tcpFloodMaxDials = 30_000
	// After a flood, fds and goroutines must come back within this of
	// their baseline (an admin request being served, a health probe).
	baselineSlack = 3
	settleTimeout = 20 * time.Second
)

// RSS bound under a TCP flood, documented in docs/operating.md ("TCP limits"): at most
// tcpRSSPerConn for each connection of the cap above the idle RSS (a
// connection's goroutine, its 4 KiB query buffer and reply buffer, socket
// and bookkeeping: about 20 KiB; the rest is headroom for the garbage the
// churn leaves between collections). The race detector multiplies it.
const tcpRSSPerConn = 128 << 10

// TestTCPFloods is issue 13's test: three TCP floods above the connection
// cap and above towerd's file descriptor limit. During each one a cache
// miss over UDP is answered NOERROR from the upstream, the admin server
// answers /healthz, RSS stays within its bound and the connections within
// the cap; afterwards towerd's fds and goroutines return to their
// baseline. On a towerd without the limits (main before issue 13) the same
// floods take every fd: misses get SERVFAIL and /healthz does not answer.
func TestTCPFloods(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("needs util-linux prlimit to lower towerd's fd limit")
	}
	up := newTestUpstream(t)
	var big []string
	for i := range 100 { // ~1.6 KB a reply: the never-reading flood fills buffers fast
		big = append(big, fmt.Sprintf("big.tcpflood.example. 300 IN A 192.0.2.%d", i))
	}
	up.Add(t, big...)
	up.Add(t, "kept.tcpflood.example. 300 IN A 192.0.2.200")
	cfg := writeConfig(t, fmt.Sprintf(`[upstream]
max_inflight = %d
[tcp]
idle_timeout  = "2s"
read_timeout  = "1s"
write_timeout = "1s"
`, tcpFloodInflight))
	d := startTowerdVia(t, []string{"prlimit", fmt.Sprintf("--nofile=%d:%d", tcpFloodNofile, tcpFloodNofile)},
		"-config", cfg, "-listen", "127.0.0.1:0", "-upstream", up.Addr, "-consul-dns", up.Addr, "-log-level", "info")
	pid := d.cmd.Process.Pid
	if lim := fdLimit(t, pid); lim != tcpFloodNofile {
		t.Fatalf("towerd's fd limit is %d, want %d", lim, tcpFloodNofile)
	}

	// Warm up: the big answer is cached, TCP and UDP answer, then the
	// baseline is taken.
	for _, network := range []string{"udp", "tcp"} {
		r := mustExchange(t, d.UDP, network, query("big.tcpflood.example.", dns.TypeA, true))
		if r.Rcode != dns.RcodeSuccess || (network == "tcp" && len(r.Answer) != 100) {
			t.Fatalf("warm-up over %s: rcode %s, %d records", network, dns.RcodeToString[r.Rcode], len(r.Answer))
		}
	}
	m := scrapeNoKeepAlive(t, d.Admin)
	if got := m["towerd_tcp_connections_limit"]; got != tcpFloodCap {
		t.Fatalf("towerd_tcp_connections_limit = %v, want %d (256 fds less the reserve)", got, tcpFloodCap)
	}
	baseFDs, baseG := settle(t, d, -1, -1)
	idleRSS, err := processRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	bound := idleRSS + tcpFloodCap*tcpRSSPerConn
	if raceEnabled {
		bound = idleRSS * rssRaceFactor
	}
	t.Logf("baseline: %d fds, %d goroutines, RSS %.1f MiB; bound %.1f MiB", baseFDs, baseG, mib(idleRSS), mib(bound))

	misses := 0
	for _, flood := range []struct {
		name   string
		client func(c net.Conn)
		reason string // the close reason this flood must show
	}{
		{"length prefix only", lengthPrefixOnly, "oversize"},
		{"length prefix, body never sent", announceAndStall, "stalled"},
		{"never reading", neverReading, "write_timeout"},
		{"keep-alive", keepAlive, "cap"},
	} {
		t.Run(flood.name, func(t *testing.T) {
			before := scrapeNoKeepAlive(t, d.Admin)
			stop := runTCPFlood(t, d.TCP, flood.client)
			closedSince := func(m map[string]float64, reason string) float64 {
				key := `towerd_tcp_connections_closed_total{reason="` + reason + `"}`
				return m[key] - before[key]
			}
			waitFor(t, "the flood to take effect (a connection closed as "+flood.reason+")", func() bool {
				return closedSince(scrapeNoKeepAlive(t, d.Admin), flood.reason) > 0
			})
			var maxRSS int64
			maxFDs, maxConns := 0, 0.0
			tick := time.NewTicker(tcpFloodTick)
			for round := range tcpFloodRounds {
				misses++
				name := fmt.Sprintf("miss-%d.tcpflood.example.", misses)
				up.Add(t, fmt.Sprintf("%s 300 IN A 198.51.100.%d", name, misses%250+1))
				r, err := exchange(d.UDP, "udp", query(name, dns.TypeA, true))
				if err != nil || r.Rcode != dns.RcodeSuccess || !slices.Equal(addresses(r.Answer), []string{fmt.Sprintf("198.51.100.%d", misses%250+1)}) {
					t.Fatalf("round %d: cache miss over UDP during the flood: %v, err %v", round, r, err)
				}
				if err := healthz(d.Admin); err != nil {
					t.Fatalf("round %d: /healthz during the flood: %v", round, err)
				}
				rss, err := processRSS(pid)
				if err != nil {
					t.Fatal(err)
				}
				maxRSS = max(maxRSS, rss)
				maxFDs = max(maxFDs, countFDs(t, pid))
				maxConns = max(maxConns, scrapeNoKeepAlive(t, d.Admin)["towerd_tcp_connections"])
				<-tick.C
			}
			tick.Stop()
			stop()
			after := scrapeNoKeepAlive(t, d.Admin)
			closed := func(reason string) float64 { return closedSince(after, reason) }
			t.Logf("%s: max RSS %.1f MiB (bound %.1f), max %d fds, max %.0f TCP connections (cap %d); closed: cap %.0f, oversize %.0f, stalled %.0f, write_timeout %.0f, idle %.0f, client %.0f, error %.0f",
				flood.name, mib(maxRSS), mib(bound), maxFDs, maxConns, tcpFloodCap, closed("cap"), closed("oversize"),
				closed("stalled"), closed("write_timeout"), closed("idle"), closed("client"), closed("error"))
			if maxRSS > bound {
				t.Errorf("RSS reached %.1f MiB, bound %.1f MiB", mib(maxRSS), mib(bound))
			}
			if maxConns > tcpFloodCap {
				t.Errorf("%.0f TCP connections open, the cap is %d", maxConns, tcpFloodCap)
			}
			if closed(flood.reason) == 0 {
				t.Errorf("no connection closed for %q during the flood", flood.reason)
			}
			fds, g := settle(t, d, baseFDs, baseG)
			t.Logf("%s: after the flood %d fds, %d goroutines", flood.name, fds, g)
		})
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// runTCPFlood keeps tcpFloodConns clients connected to addr, each running
// client on a connection and dialling again once it returns, until stop
// is called; stop returns once every client has closed its connection.
func runTCPFlood(t *testing.T, addr string, client func(net.Conn)) (stop func()) {
	done := make(chan struct{})
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	var wg sync.WaitGroup
	var dials atomic.Int64
	for range tcpFloodConns {
		wg.Go(func() {
			pause := time.NewTimer(0)
			defer pause.Stop()
			for dials.Add(1) <= tcpFloodMaxDials {
				select {
				case <-done:
					return
				case <-pause.C:
				}
				pause.Reset(tcpFloodRedial)
				c, err := floodDialer.Dial("tcp", addr)
				if err != nil {
					continue // a full backlog; towerd is what is tested
				}
				mu.Lock()
				open[c] = true
				mu.Unlock()
				client(c)
				mu.Lock()
				delete(open, c)
				mu.Unlock()
				c.Close()
			}
		})
	}
	return func() {
		close(done)
		mu.Lock()
		for c := range open {
			c.Close() // ends a client blocked in a read or write
		}
		mu.Unlock()
		wg.Wait()
	}
}

// floodDialer gives each flood connection small socket buffers (which
// also turns off their autotuning): a client that does not read stops the
// replies after a few KB, and its writes then block instead of filling
// megabytes of kernel memory.
var floodDialer = net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
	var serr error
	rc.Control(func(fd uintptr) {
		for _, opt := range []int{syscall.SO_RCVBUF, syscall.SO_SNDBUF} {
			if err := syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, opt, 4096); err != nil {
				serr = err
			}
		}
	})
	return serr
}}

// drain waits (up to 10 s) until the server closes c, reading nothing.
func drain(c net.Conn) {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	io.Copy(io.Discard, c)
}

// lengthPrefixOnly announces a 65,535-byte query and sends nothing else:
// miekg/dns allocated 64 KiB for each such connection.
func lengthPrefixOnly(c net.Conn) {
	c.Write([]byte{0xFF, 0xFF})
	drain(c)
}

// announceAndStall announces a query within the limit (4,000 bytes) and
// never sends it.
func announceAndStall(c net.Conn) {
	c.Write([]byte{0x0F, 0xA0})
	drain(c)
}

// neverReadingBatch is 8,000 pipelined queries for the big answer (~280 KB
// of queries, ~13 MB of replies), shared read-only by every client.
var neverReadingBatch = func() []byte {
	wire, _ := query("big.tcpflood.example.", dns.TypeA, false).Pack()
	one := binary.BigEndian.AppendUint16(nil, uint16(len(wire)))
	return slices.Repeat(append(one, wire...), 8000)
}()

// neverReading sends queries and reads nothing. With small socket buffers
// on its side, the write blocks once towerd stops reading (it is blocked
// writing replies nobody takes) and fails when towerd closes the
// connection.
func neverReading(c net.Conn) {
	c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	for range 3 {
		if _, err := c.Write(neverReadingBatch); err != nil {
			return
		}
	}
}

// keepAlive asks once, reads the answer and keeps the connection open.
func keepAlive(c net.Conn) {
	dc := &dns.Conn{Conn: c}
	m := query("kept.tcpflood.example.", dns.TypeA, false)
	if dc.WriteMsg(m) != nil {
		return
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := dc.ReadMsg(); err != nil {
		return
	}
	drain(c)
}

// fdLimit reads the soft "Max open files" of pid.
func fdLimit(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`Max open files\s+(\d+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no open files limit in /proc/%d/limits", pid)
	}
	var n int
	fmt.Sscan(string(m[1]), &n)
	return n
}

func countFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// settle waits until towerd's fd count and goroutines are back within
// baselineSlack of baseFDs and baseG and stay there for two readings in a
// row (-1: take the first steady readings as the baseline), and returns
// them.
func settle(t *testing.T, d *towerd, baseFDs, baseG int) (int, int) {
	t.Helper()
	var fds, g, lastFDs, lastG int
	steady := 0
	waitFor(t, "fds and goroutines to return to their baseline", func() bool {
		fds = countFDs(t, d.cmd.Process.Pid)
		g = int(scrapeNoKeepAlive(t, d.Admin)["go_goroutines"])
		if baseFDs >= 0 && (fds > baseFDs+baselineSlack || g > baseG+baselineSlack) {
			steady = 0
			return false
		}
		if fds == lastFDs && g == lastG {
			steady++
		} else {
			steady = 0
		}
		lastFDs, lastG = fds, g
		return steady >= 2
	})
	return fds, g
}

// waitFor waits until cond holds, for at most floodEffectTimeout: a
// condition on another process's state, which has no event to wait on.
// Under -race, with the whole suite on two cores, a never-reading flood
// can take a while to fill the buffers.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	dnstest.Eventually(t, cond, floodEffectTimeout, what)
}

// floodEffectTimeout bounds the wait for a flood to show its close reason.
const floodEffectTimeout = 90 * time.Second

// noKeepAlive is an admin client that leaves no connection open in towerd
// (which would count as an fd).
var noKeepAlive = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

func healthz(admin string) error {
	resp, err := noKeepAlive.Get("http://" + admin + "/healthz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /healthz: %s", resp.Status)
	}
	return nil
}

// scrapeNoKeepAlive reads /metrics into name{labels} → value.
func scrapeNoKeepAlive(t *testing.T, admin string) map[string]float64 {
	t.Helper()
	resp, err := noKeepAlive.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	out := map[string]float64{}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := name
			if len(m.GetLabel()) > 0 {
				var ls []string
				for _, lp := range m.GetLabel() {
					ls = append(ls, lp.GetName()+`="`+lp.GetValue()+`"`)
				}
				key += "{" + strings.Join(ls, ",") + "}"
			}
			switch {
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Untyped != nil:
				out[key] = m.Untyped.GetValue()
			}
		}
	}
	return out
}
