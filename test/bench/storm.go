package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/towerd/towerd/test/faultproxy"
)

// Scenarios 7 and 8 (issue 17) share one fresh start of each server, with
// negative caching off in every peer (towerd never caches NXDOMAIN; dnsmasq
// --no-negcache, unbound cache-max-negative-ttl: 0), forwarding to an
// upstream of their own (stormUpstreamAddr) that answers 1 ms late, as a
// real upstream does: only then can identical questions overlap in flight.
//
//	cold     7. right after the start, coldNames unique names asked once
//	            each (dnsperf -n 1, 100 outstanding): answers/s, CPU µs per
//	            answer, upstream queries per name.
//	nxstorm  8. search-domain expansion: stormNames names × 4 suffixes, each
//	            question asked by stormClients clients at once (the lines of
//	            the query file come in runs of stormClients), every one
//	            NXDOMAIN from the upstream, dnsperf unlimited for -duration:
//	            NXDOMAIN answers/s, CPU µs per answer, and upstream queries
//	            per run of identical asks (1.000: every run coalesced into
//	            one upstream query; stormClients: none coalesced).

const (
	stormUpstreamAddr = "127.0.0.16:" + port
	coldNames         = 20000
	stormNames        = 1000
	stormClients      = 4
)

var stormSuffixes = []string{"svc.bench.example", "corp.bench.example", "lan.bench.example", "dev.bench.example"}

var stormFaults = faultproxy.Faults{Delay: time.Millisecond}

func (b *bench) storm(round int, s string) error {
	addr := serverAddr(s)
	p, err := b.startServer(s, round, serverSetup{phase: "storm", upstream: stormUpstreamAddr, cacheSize: b.cacheSize, noNegCache: true})
	if err != nil {
		return err
	}
	defer b.procs.stop(p)
	r := b.res[s]
	upCount := func() (uint64, error) { n, _, err := upstreamCounts(stormUpstreamAddr); return n, err }

	if b.want["cold"] {
		f := filepath.Join(b.dir, "cold.txt")
		if err := writeNames(f, fmt.Sprintf("c%d-%s-", round, s), coldNames); err != nil {
			return err
		}
		defer os.Remove(f)
		out, err := b.measure(p.cmd.Process.Pid, upCount, addr, f, "-n", "1", "-c", "4", "-t", "2")
		if err != nil {
			return err
		}
		usPer := out.usPer(out.noerror)
		perName := float64(out.upstream) / float64(max(out.sent, 1))
		r.add("cold.qps", out.qps)
		r.add("cold.us", usPer)
		r.add("cold.up", perName)
		fmt.Printf("  round %d %-8s cold:         %8.0f answered/s, %5.2f µs CPU/answer, lost %d of %d, %.3f upstream queries per name\n",
			round, s, out.qps, usPer, out.lost, out.sent, perName)
	}

	if b.want["nxstorm"] {
		f := filepath.Join(b.dir, "storm.txt")
		if err := writeStorm(f, fmt.Sprintf("nx%d-%s-", round, s)); err != nil {
			return err
		}
		defer os.Remove(f)
		out, err := b.measure(p.cmd.Process.Pid, upCount, addr, f, "-l", secs(b.duration), "-c", "4", "-t", "2")
		if err != nil {
			return err
		}
		qps := out.rawQPS * float64(out.nxdomain) / float64(max(out.completed, 1))
		usPer := out.usPer(out.nxdomain)
		perRun := float64(out.upstream) / (float64(max(out.completed, 1)) / stormClients)
		r.add("storm.qps", qps)
		r.add("storm.us", usPer)
		r.add("storm.up", perRun)
		fmt.Printf("  round %d %-8s nxstorm:      %8.0f NXDOMAIN/s, %5.2f µs CPU/answer, lost %d of %d, %.3f upstream queries per %d identical asks\n",
			round, s, qps, usPer, out.lost, out.sent, perRun, stormClients)
	}
	return nil
}

// writeStorm writes the storm's query file: for each name, each suffix in
// turn (a stub walking its search list), each question stormClients times
// in a row (that many clients asking at once).
func writeStorm(path, prefix string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<16)
	for i := range stormNames {
		for _, suffix := range stormSuffixes {
			for range stormClients {
				fmt.Fprintf(w, "%s%d.%s A\n", prefix, i, suffix)
			}
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
