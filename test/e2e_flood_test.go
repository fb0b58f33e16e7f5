package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	dto "github.com/prometheus/client_model/go"
)

// Flood shape (issue 7, test 3): at most floodNames unique names, for at most
// floodDuration, from floodWorkers clients that each keep one query in
// flight, which is the highest rate this machine sustains without the
// kernel dropping packets on a full socket buffer (an open-loop sender
// would measure the kernel, not towerd).
const (
	floodNames     = 200_000
	floodDuration  = 20 * time.Second
	floodWorkers   = 48
	floodCacheSize = 10_000 // the default cache.size
	floodInflight  = 32     // upstream.max_inflight: below floodWorkers, so the cap is reached
	floodSlowEvery = 4      // one flood name in 4 is answered after floodSlowDelay
	floodSlowDelay = 80 * time.Millisecond
	cachedNames    = 50
)

// RSS bound, documented in docs/operating.md ("Memory"): rssBase for the Go runtime, the
// metrics registry and a flood's sockets and goroutines (an idle towerd sits
// near 15 MiB), plus rssPerEntry for each of cache.size entries (a one-record
// answer with its key, LRU element, name index and the garbage its
// replacement leaves until the next GC is 2-3 KiB; 5 KiB leaves headroom).
// For the default 10,000 entries that is 40 + 49 ≈ 89 MiB; measured: 45 MiB.
// The race detector (the daemon is built with it when the tests run with
// -race) multiplies memory: rssRaceFactor (measured: 227 MiB).
const (
	rssBase       = 40 << 20
	rssPerEntry   = 5 << 10
	rssRaceFactor = 5
)

// TestFlood is issue 7's test 3: a flood of unique random names must not push
// towerd's memory past a bound set by cache.size, must never run more
// upstream resolutions than upstream.max_inflight, and must not stop cached
// names from answering.
//
// Speed is measured, not asserted: the p99 of cached names during the flood
// is logged (the goal is under 1 ms), but make test runs on loaded
// machines where a wall-clock assertion would fail for reasons that are not
// towerd's, so only correctness and counts are asserted. Two figures are
// logged: what a client in its own process sees, and towerd's own time from
// reading a query to its reply (its duration histogram). On the 2-vCPU
// machine of issue 7 they were p99 1.55 ms (the flood sender, the checker,
// the upstream and towerd share two cores) and 99.7 % under 50 µs.
func TestFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("the flood runs for 20 s")
	}
	t.Parallel()
	up := newFloodUpstream(t)
	cfg := writeConfig(t, fmt.Sprintf("[cache]\nsize = %d\n[upstream]\nmax_inflight = %d\n", floodCacheSize, floodInflight))
	d := startTowerd(t, "-config", cfg, "-listen", "127.0.0.1:0", "-upstream", up.addr, "-consul-dns", up.addr,
		"-log-level", "info") // debug would log every refused store and cap hit

	for i := range cachedNames {
		r := mustExchange(t, d.UDP, "udp", query(cachedName(i), dns.TypeA, false))
		if r.Rcode != dns.RcodeSuccess || !slices.Equal(addresses(r.Answer), []string{cachedAddr(i)}) {
			t.Fatalf("warm-up %s: rcode %s, answer %v", cachedName(i), dns.RcodeToString[r.Rcode], r.Answer)
		}
	}

	idleRSS, err := processRSS(d.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	// The flood ends after floodDuration or once every name is sent,
	// whichever comes first.
	stop := make(chan struct{})
	var stopOnce sync.Once
	end := func() { stopOnce.Do(func() { close(stop) }) }
	deadline := time.AfterFunc(floodDuration, end)
	defer deadline.Stop()
	var wg sync.WaitGroup
	var sent, answered, servfail, noReply atomic.Int64
	var next atomic.Int64
	for range floodWorkers {
		wg.Go(func() {
			floodWorker(t, d.UDP, stop, &next, &sent, &answered, &servfail, &noReply)
		})
	}
	stopChecker := startCachedChecker(t, d.UDP)
	samples := sampleDaemon(t, d, stop)
	start := time.Now()
	wg.Wait()
	elapsed := time.Since(start)
	end()
	checker := stopChecker()
	s := <-samples

	_, mfs := scrape(t, d.Admin)
	rejections := sample(mfs, "towerd_inflight_rejections_total", nil)
	entries := sample(mfs, "towerd_cache_entries", nil)
	t.Logf("flood: %d unique names in %v (%.0f/s), %d answered (%d SERVFAIL), %d without reply; "+
		"cap rejections %.0f; upstream saw at most %d concurrent queries",
		sent.Load(), elapsed.Round(time.Millisecond), float64(sent.Load())/elapsed.Seconds(),
		answered.Load(), servfail.Load(), noReply.Load(), rejections, up.maxConcurrent.Load())
	t.Logf("cached names during the flood: %d queries, p50 %v, p99 %v, max %v (goal: p99 under 1 ms)",
		len(checker.Latencies), checker.quantile(0.50), checker.quantile(0.99), checker.quantile(1))
	t.Logf("towerd's own time for cache answers (read to reply ready): %.2f %% under 50 µs, %.2f %% under 1 ms",
		100*cacheShareUnder(mfs, 0.00005), 100*cacheShareUnder(mfs, 0.001))
	t.Logf("RSS idle %.1f MiB, max %.1f MiB over %d samples; in-flight max %d of %d (%d scrapes); cache %0.f of %d entries",
		float64(idleRSS)/(1<<20), float64(s.maxRSS)/(1<<20), s.rssSamples, s.maxInflight, floodInflight, s.scrapes, entries, floodCacheSize)

	if answered.Load() == 0 || sent.Load() < floodWorkers {
		t.Errorf("the flood got %d answers to %d queries; it did not run", answered.Load(), sent.Load())
	}
	if checker.Wrong > 0 || checker.Failed > 0 || len(checker.Latencies) == 0 {
		t.Errorf("cached names: %d answered correctly, %d wrong answers, %d unanswered after retries",
			len(checker.Latencies), checker.Wrong, checker.Failed)
	}
	if s.scrapes == 0 || s.rssSamples == 0 {
		t.Errorf("no samples of the daemon taken during the flood (%d scrapes, %d RSS reads)", s.scrapes, s.rssSamples)
	}
	if s.maxInflight > floodInflight {
		t.Errorf("in-flight upstream resolutions reached %d, the cap is %d", s.maxInflight, floodInflight)
	}
	if entries > floodCacheSize {
		t.Errorf("cache holds %.0f entries, cache.size is %d", entries, floodCacheSize)
	}
	bound := int64(rssBase + floodCacheSize*rssPerEntry)
	if raceEnabled {
		bound *= rssRaceFactor
	}
	if s.maxRSS > bound {
		t.Errorf("RSS reached %.1f MiB, bound %d MiB", float64(s.maxRSS)/(1<<20), bound>>20)
	}
}

// cacheShareUnder is the share of cache answers towerd's duration histogram
// puts at or under le seconds (le must be one of its bucket bounds).
func cacheShareUnder(mfs map[string]*dto.MetricFamily, le float64) float64 {
	for _, m := range mfs["towerd_request_duration_seconds"].GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() != "source" || lp.GetValue() != "cache" {
				continue
			}
			h := m.GetHistogram()
			for _, b := range h.GetBucket() {
				if b.GetUpperBound() == le && h.GetSampleCount() > 0 {
					return float64(b.GetCumulativeCount()) / float64(h.GetSampleCount())
				}
			}
		}
	}
	return 0
}

func cachedName(i int) string { return fmt.Sprintf("cached-%d.flood.example.", i) }
func cachedAddr(i int) string { return fmt.Sprintf("192.0.2.%d", 100+i) }

// floodWorker sends unique names until stop or until floodNames are taken,
// one query at a time. Replies are matched by ID so a late reply to an
// earlier query is not counted for the current one.
func floodWorker(t *testing.T, addr string, stop <-chan struct{}, next, sent, answered, servfail, noReply *atomic.Int64) {
	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Errorf("flood client: %v", err)
		return
	}
	defer conn.Close()
	buf := make([]byte, 1500)
	for {
		select {
		case <-stop:
			return
		default:
		}
		n := next.Add(1)
		if n > floodNames {
			return
		}
		m := new(dns.Msg)
		m.SetQuestion(fmt.Sprintf("%d-%x.flood.example.", n, rand.Uint64()), dns.TypeA)
		wire, _ := m.Pack()
		if _, err := conn.Write(wire); err != nil {
			t.Errorf("flood client write: %v", err)
			return
		}
		sent.Add(1)
		_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		for {
			k, err := conn.Read(buf)
			if err != nil {
				noReply.Add(1)
				break
			}
			r := new(dns.Msg)
			if r.Unpack(buf[:k]) != nil || r.Id != m.Id {
				continue
			}
			answered.Add(1)
			if r.Rcode == dns.RcodeServerFailure {
				servfail.Add(1)
			}
			break
		}
	}
}

// cachedChecker asks the warmed names round-robin during the flood, as the
// node's services keep asking their usual names, and records each answer's
// latency. A query without a reply is tried once more, as a stub resolver
// would; both tries failing counts as failed.
//
// It runs in a process of its own (this test binary started again with
// checkerEnv set, see runMain): inside the test process its queries would
// wait behind the 48 flood workers' goroutines in the same Go scheduler, and
// the latency measured would be the test's own, not towerd's.
type cachedChecker struct {
	Latencies []time.Duration
	Wrong     int
	Failed    int
}

// checkerEnv names the address the checker process asks.
const checkerEnv = "TOWERD_E2E_CACHED_CHECKER"

// startCachedChecker starts the checker process against addr; stop ends it
// and returns what it measured.
func startCachedChecker(t *testing.T, addr string) (stop func() cachedChecker) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), checkerEnv+"="+addr)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return func() cachedChecker {
		stdin.Close() // the checker stops at end of input
		var c cachedChecker
		if err := cmd.Wait(); err != nil {
			t.Errorf("cached-name checker: %v", err)
			return c
		}
		if err := json.Unmarshal(out.Bytes(), &c); err != nil {
			t.Errorf("cached-name checker output: %v: %q", err, out.String())
		}
		return c
	}
}

// runCachedChecker is the checker process: it asks until its standard input
// closes, then prints what it measured as JSON.
func runCachedChecker(addr string) int {
	stop := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	var c cachedChecker
	conn, err := net.Dial("udp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer conn.Close()
	buf := make([]byte, 1500)
	for i := 0; ; i++ {
		select {
		case <-stop:
			if err := json.NewEncoder(os.Stdout).Encode(c); err != nil {
				return 1
			}
			return 0
		default:
		}
		idx := i % cachedNames
		var r *dns.Msg
		var rtt time.Duration
		for range 2 {
			if r, rtt = askOnce(conn, buf, cachedName(idx)); r != nil {
				break
			}
		}
		switch {
		case r == nil:
			c.Failed++
		case r.Rcode != dns.RcodeSuccess || !slices.Equal(addresses(r.Answer), []string{cachedAddr(idx)}):
			c.Wrong++
		default:
			c.Latencies = append(c.Latencies, rtt)
		}
	}
}

// askOnce sends one A question on conn and waits up to 2 s for the reply
// with its ID; nil when none came.
func askOnce(conn net.Conn, buf []byte, name string) (*dns.Msg, time.Duration) {
	m := query(name, dns.TypeA, false)
	wire, err := m.Pack()
	if err != nil {
		return nil, 0
	}
	start := time.Now()
	if _, err := conn.Write(wire); err != nil {
		return nil, 0
	}
	_ = conn.SetReadDeadline(start.Add(2 * time.Second))
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return nil, 0
		}
		r := new(dns.Msg)
		if r.Unpack(buf[:n]) == nil && r.Id == m.Id {
			return r, time.Since(start)
		}
	}
}

func (c *cachedChecker) quantile(q float64) time.Duration {
	if len(c.Latencies) == 0 {
		return 0
	}
	s := slices.Clone(c.Latencies)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// daemonSamples are the largest values seen while the flood ran.
type daemonSamples struct {
	maxRSS      int64
	maxInflight int
	rssSamples  int
	scrapes     int
}

// sampleDaemon reads towerd's RSS from /proc and its in-flight gauge from
// /metrics every 100 ms until stop, then sends what it saw.
func sampleDaemon(t *testing.T, d *towerd, stop <-chan struct{}) <-chan daemonSamples {
	out := make(chan daemonSamples, 1)
	go func() {
		var s daemonSamples
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if rss, err := processRSS(d.cmd.Process.Pid); err == nil {
				s.rssSamples++
				s.maxRSS = max(s.maxRSS, rss)
			}
			if v, err := metricValue(d.Admin, "towerd_inflight_resolutions"); err == nil {
				s.scrapes++
				s.maxInflight = max(s.maxInflight, int(v))
			} else {
				t.Logf("scraping in-flight: %v", err)
			}
			select {
			case <-stop:
				out <- s
				return
			case <-tick.C:
			}
		}
	}()
	return out
}

// processRSS returns VmRSS of pid in bytes.
func processRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}
