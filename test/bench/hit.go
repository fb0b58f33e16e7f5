package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Scenarios 1 to 4 share one start of each server, against the upstream with
// 1 h TTLs: warm the hit names, then hit CPU, hit latency, hit throughput,
// and last the misses (which evict the warm names from a full cache).

// latencyRate is scenario 2's offered rate, queries/s: far below what any
// server saturates at here, so the probe shows each one's own delay.
const latencyRate = 2000

// hit runs the selected scenarios of 1 to 4 against server s, started fresh
// and stopped after.
func (b *bench) hit(round int, s, hitFile string) error {
	addr := serverAddr(s)
	p, err := b.startServer(s, round, serverSetup{phase: "hit", upstream: upstreamAddr, cacheSize: b.cacheSize})
	if err != nil {
		return err
	}
	defer b.procs.stop(p)
	r := b.res[s]

	// Warm every name. Two passes: the second fills what the first lost.
	for pass := 0; s != "null" && pass < 2 && b.warmNames(); pass++ {
		if _, err := b.dnsperf(addr, hitFile, "-n", "1", "-Q", "20000", "-q", "200", "-c", "4"); err != nil {
			return fmt.Errorf("warming: %w", err)
		}
	}

	// Scenario 1, hit CPU: fixed offered rates.
	for _, rate := range b.rates {
		if !b.want["hitcpu"] {
			break
		}
		// A count that cannot be read is a zero here: the hit scenario
		// only reports the upstream queries, it does not judge them.
		upCount := func() (uint64, error) { n, _ := upstreamQueries(); return n, nil }
		out, err := b.measure(p.cmd.Process.Pid, upCount, addr, hitFile, "-l", secs(b.duration), "-Q", strconv.Itoa(rate), "-q", "2000", "-c", "4", "-t", "2")
		if err != nil {
			return err
		}
		us := out.usPer(out.noerror)
		r.add(fmt.Sprintf("hit%d.us", rate), us)
		r.add(fmt.Sprintf("hit%d.qps", rate), out.qps)
		r.add(fmt.Sprintf("hit%d.lost", rate), 100*float64(out.lost)/float64(max(out.sent, 1)))
		r.add(fmt.Sprintf("hit%d.up", rate), float64(out.upstream))
		fmt.Printf("  round %d %-8s hit @%6d/s: %8.0f answered/s, %5.2f µs CPU/query, lost %d, upstream queries %d\n",
			round, s, rate, out.qps, us, out.lost, out.upstream)
	}

	// Scenario 2, hit latency: the open-loop probe at a fixed rate over
	// the warm names, no EDNS (as dnsperf asks).
	if b.want["latency"] {
		upBefore, _ := upstreamQueries()
		pr := probe{addr: addr, names: hitNames(b.names), rate: latencyRate, duration: b.duration,
			timeout: 2 * time.Second, sockets: 4}
		out, err := pr.run()
		if err != nil {
			return fmt.Errorf("latency probe: %w", err)
		}
		upAfter, _ := upstreamQueries()
		r.add("lat.p50", us(out.percentile(0.5)))
		r.add("lat.p99", us(out.percentile(0.99)))
		r.add("lat.p999", us(out.percentile(0.999)))
		r.add("lat.lost", 100*float64(out.sent-out.answered)/float64(max(out.sent, 1)))
		fmt.Printf("  round %d %-8s latency @%d/s: p50 %.0f µs, p99 %.0f µs, p99.9 %.0f µs, lost %d of %d, sender behind by %v at worst, upstream queries %d\n",
			round, s, latencyRate, us(out.percentile(0.5)), us(out.percentile(0.99)), us(out.percentile(0.999)),
			out.sent-out.answered, out.sent, out.behind.Round(time.Microsecond), upAfter-upBefore)
	}

	// Scenario 3, hit throughput: dnsperf unlimited over the warm names,
	// 1,000 outstanding. dnsperf shares the 2 cores, so this is bound by the
	// client too. Not the null responder: one blocking thread, it is a CPU
	// floor, not a throughput ceiling.
	if b.want["throughput"] && s != "null" {
		out, err := b.dnsperf(addr, hitFile, "-l", secs(b.duration), "-q", "1000", "-c", "4", "-t", "2")
		if err != nil {
			return err
		}
		r.add("tput.qps", out.qps)
		fmt.Printf("  round %d %-8s throughput:   %8.0f answered/s, lost %d of %d\n", round, s, out.qps, out.lost, out.sent)
	}
	if s == "null" {
		return nil
	}
	for _, m := range []struct {
		scenario, key, label, prefix string
		args                         []string
	}{
		// Scenario 4, miss throughput: unique names never asked before,
		// dnsperf unlimited (100 outstanding per default), answered QPS.
		{"miss", "miss", "miss:        ", "m", nil},
		// Scenario 9, the same over TCP (issue 22): dnsperf's 4 clients
		// each keep one connection and send on it without waiting.
		{"tcpmiss", "tcpmiss", "tcp miss:    ", "t", []string{"-m", "tcp"}},
	} {
		if !b.want[m.scenario] {
			continue
		}
		missFile := filepath.Join(b.dir, m.key+".txt")
		// Enough names that no server runs out in the time given.
		n := int(b.duration.Seconds() * 150000)
		if err := writeNames(missFile, fmt.Sprintf("%s%d-%s-", m.prefix, round, s), n); err != nil {
			return err
		}
		args := append([]string{"-n", "1", "-l", secs(b.duration), "-c", "4", "-t", "2"}, m.args...)
		out, err := b.measure(p.cmd.Process.Pid, upstreamQueries, addr, missFile, args...)
		os.Remove(missFile)
		if err != nil {
			return err
		}
		missUs := out.usPer(out.noerror)
		perName := float64(out.upstream) / float64(max(out.sent, 1))
		r.add(m.key+".us", missUs)
		r.add(m.key+".qps", out.qps)
		r.add(m.key+".lost", 100*float64(out.lost)/float64(max(out.sent, 1)))
		r.add(m.key+".up", perName)
		fmt.Printf("  round %d %-8s %s %8.0f answered/s, %5.2f µs CPU/answer, lost %d of %d, NOERROR %d, %.3f upstream queries per name\n",
			round, s, m.label, out.qps, missUs, out.lost, out.sent, out.noerror, perName)
	}
	return nil
}

// hitNames are the names of the hit file, as the probe asks them.
func hitNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("h%d.bench.example.", i)
	}
	return names
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
