package main

import (
	"fmt"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/faultproxy"
)

// Scenario 6, jitter: a slow and lossy upstream and short TTLs, where
// serve-stale and prefetch earn their keep. Each server, with its own
// serve-stale and prefetch on (serverSetup.stale), forwards to an upstream
// of its own (jitterUpstreamAddr) whose records live 2 s and which answers
// through the fault proxy 100 ms ± 50 ms late and loses 0.5 % of packets each
// way. The open-loop probe asks 50 names in turn, 200 queries/s (each name
// 4 times a second, so each expires and is refreshed every 2 s while asked)
// with EDNS0, and gives up on a reply after 2 s, a stub resolver's timeout.
//
// Measured: the share of queries answered NOERROR within the 2 s, the
// latency of the answers (p50, p99, p99.9, max), the share of answers marked stale
// (EDE 3: towerd and dnsmasq 2.90 mark stale answers so when the client sent
// EDNS, unbound with ede and ede-serve-expired; isStale), and how many
// queries the server sent the upstream (read by the fault proxy, so lost
// ones count too), with the mean time between two upstream queries for one
// name that it implies; and the share of answers with TTL 0 (past their
// lifetime, marked stale or not).

const (
	jitterTTL     = 2 * time.Second
	jitterNames   = 50
	jitterRate    = 200 // queries/s
	jitterTimeout = 2 * time.Second
)

var jitterFaults = faultproxy.Faults{Delay: 100 * time.Millisecond, Jitter: 50 * time.Millisecond, Loss: 0.005}

func (b *bench) jitter(round int, s string) error {
	p, err := b.startServer(s, round, serverSetup{phase: "jitter", upstream: jitterUpstreamAddr, cacheSize: b.cacheSize, stale: true})
	if err != nil {
		return err
	}
	defer b.procs.stop(p)
	names := make([]string, jitterNames)
	for i := range names {
		// Fresh names for every server and round: nothing carried over.
		names[i] = fmt.Sprintf("j%d-%s-%d.bench.example.", round, s, i)
	}
	// Each name asked once, unmeasured, so the window starts with a warm
	// cache and measures refreshes, not first resolutions (scenario 4).
	warm := probe{addr: serverAddr(s), names: names, rate: 1000, duration: jitterNames * time.Millisecond,
		timeout: jitterTimeout, edns: true, sockets: 1}
	if _, err := warm.run(); err != nil {
		return fmt.Errorf("jitter warm-up: %w", err)
	}
	_, sent0, err := upstreamCounts(jitterUpstreamAddr)
	if err != nil {
		return err
	}
	pr := probe{addr: serverAddr(s), names: names, rate: jitterRate, duration: b.jitterWindow,
		timeout: jitterTimeout, edns: true, sockets: 4}
	out, err := pr.run()
	if err != nil {
		return fmt.Errorf("jitter probe: %w", err)
	}
	_, sent1, err := upstreamCounts(jitterUpstreamAddr)
	if err != nil {
		return err
	}
	ok := 100 * float64(out.noerror) / float64(max(out.sent, 1))
	stale := 100 * float64(out.stale) / float64(max(out.answered, 1))
	r := b.res[s]
	r.add("jit.ok", ok)
	r.add("jit.p50", ms(out.percentile(0.5)))
	r.add("jit.p99", ms(out.percentile(0.99)))
	r.add("jit.p999", ms(out.percentile(0.999)))
	r.add("jit.max", ms(out.maxLatency()))
	r.add("jit.stale", stale)
	r.add("jit.up", float64(sent1-sent0))
	ttl0 := 100 * float64(out.ttl0) / float64(max(out.answered, 1))
	r.add("jit.ttl0", ttl0)
	// How long each name went between upstream queries on average: a
	// resolver that keeps to the TTL and never answers past it refreshes
	// a 2 s record at least every TTL + round trip (about 2.1 s).
	interval := 0.0
	if up := sent1 - sent0; up > 0 {
		interval = b.jitterWindow.Seconds() * jitterNames / float64(up)
	}
	r.add("jit.interval", interval)
	fmt.Printf("  round %d %-8s jitter: %.2f %% of %d answered NOERROR within %v, p50 %.2f ms, p99 %.1f ms, p99.9 %.1f ms, max %.1f ms, "+
		"%.1f %% stale (%d), %.1f %% with TTL 0, %d upstream queries (one per name every %.2f s), sender behind by %v at worst\n",
		round, s, ok, out.sent, jitterTimeout, ms(out.percentile(0.5)), ms(out.percentile(0.99)), ms(out.percentile(0.999)), ms(out.maxLatency()),
		stale, out.stale, ttl0, sent1-sent0, interval, out.behind.Round(time.Microsecond))
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// isStale reports whether m carries EDE 3, Stale Answer (RFC 8914 §4.4):
// towerd and dnsmasq 2.90 add it to a stale answer when the client sent
// EDNS, unbound with ede and ede-serve-expired.
func isStale(m *dns.Msg) bool {
	opt := m.IsEdns0()
	if opt == nil {
		return false
	}
	for _, o := range opt.Option {
		if ede, ok := o.(*dns.EDNS0_EDE); ok && ede.InfoCode == dns.ExtendedErrorCodeStaleAnswer {
			return true
		}
	}
	return false
}
