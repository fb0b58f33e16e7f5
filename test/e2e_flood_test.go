package test

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
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

// RSS bound, documented in the README: rssBase for the Go runtime, the
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
// towerd's, so only correctness and counts are asserted.
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
	checker := &cachedChecker{addr: d.UDP}
	checkerDone := make(chan struct{})
	go func() {
		defer close(checkerDone)
		checker.run(stop)
	}()
	samples := sampleDaemon(t, d, stop)
	start := time.Now()
	wg.Wait()
	elapsed := time.Since(start)
	end()
	<-checkerDone
	s := <-samples

	_, mfs := scrape(t, d.Admin)
	rejections := sample(mfs, "towerd_inflight_rejections_total", nil)
	entries := sample(mfs, "towerd_cache_entries", nil)
	t.Logf("flood: %d unique names in %v (%.0f/s), %d answered (%d SERVFAIL), %d without reply; "+
		"cap rejections %.0f; upstream saw at most %d concurrent queries",
		sent.Load(), elapsed.Round(time.Millisecond), float64(sent.Load())/elapsed.Seconds(),
		answered.Load(), servfail.Load(), noReply.Load(), rejections, up.maxConcurrent.Load())
	t.Logf("cached names during the flood: %d queries, p50 %v, p99 %v, max %v (goal: p99 under 1 ms)",
		len(checker.latencies), checker.quantile(0.50), checker.quantile(0.99), checker.quantile(1))
	t.Logf("RSS idle %.1f MiB, max %.1f MiB over %d samples; in-flight max %d of %d (%d scrapes); cache %0.f of %d entries",
		float64(idleRSS)/(1<<20), float64(s.maxRSS)/(1<<20), s.rssSamples, s.maxInflight, floodInflight, s.scrapes, entries, floodCacheSize)

	if answered.Load() == 0 || sent.Load() < floodWorkers {
		t.Errorf("the flood got %d answers to %d queries; it did not run", answered.Load(), sent.Load())
	}
	if checker.wrong > 0 || checker.failed > 0 || len(checker.latencies) == 0 {
		t.Errorf("cached names: %d answered correctly, %d wrong answers, %d unanswered after retries",
			len(checker.latencies), checker.wrong, checker.failed)
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
type cachedChecker struct {
	addr      string
	latencies []time.Duration
	wrong     int
	failed    int
}

func (c *cachedChecker) run(stop <-chan struct{}) {
	client := &dns.Client{Timeout: 5 * time.Second}
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		idx := i % cachedNames
		var r *dns.Msg
		var rtt time.Duration
		var err error
		for range 2 {
			if r, rtt, err = client.Exchange(query(cachedName(idx), dns.TypeA, false), c.addr); err == nil {
				break
			}
		}
		switch {
		case err != nil:
			c.failed++
		case r.Rcode != dns.RcodeSuccess || !slices.Equal(addresses(r.Answer), []string{cachedAddr(idx)}):
			c.wrong++
		default:
			c.latencies = append(c.latencies, rtt)
		}
	}
}

func (c *cachedChecker) quantile(q float64) time.Duration {
	if len(c.latencies) == 0 {
		return 0
	}
	s := slices.Clone(c.latencies)
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
