package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Scenario 5, memory per cached entry: each server is started with room for
// b.memNames answers, asked each of that many distinct names once, and its
// resident memory read before and after from /proc/<pid>/status (VmRSS).
// What it really holds is then measured, not assumed: a sample of the names
// is asked again, and the share the upstream did not see is the share still
// cached. Bytes per entry divide by that count, so a server that capped or
// evicted is not flattered.
//
// A second, earlier start with a minimal cache (smallCache entries) shows
// what a server allocates up front for a large cache: dnsmasq builds its
// whole entry array and hash table at start, so its filled − start delta
// alone would hide them. The table gives both quotients.

// smallCache is the cache size of the reference start: dnsmasq's default.
const smallCache = 150

// memSample is how many of the cached names are asked again to count what
// is held (every n/memSample-th name).
const memSample = 2000

func (b *bench) memory(round int, s string) error {
	addr := serverAddr(s)
	small, err := b.startServer(s, round, serverSetup{phase: "memory-small", upstream: upstreamAddr, cacheSize: smallCache})
	if err != nil {
		return err
	}
	rssSmall, err := vmRSS(small.cmd.Process.Pid)
	b.procs.stop(small)
	if err != nil {
		return err
	}

	// A margin over the names: the readiness question takes an entry too.
	size := b.memNames + b.memNames/100 + 100
	p, err := b.startServer(s, round, serverSetup{phase: "memory", upstream: upstreamAddr, cacheSize: size})
	if err != nil {
		return err
	}
	defer b.procs.stop(p)
	pid := p.cmd.Process.Pid
	rssStart, err := vmRSS(pid)
	if err != nil {
		return err
	}

	prefix := fmt.Sprintf("p%d-%s-", round, s)
	file := filepath.Join(b.dir, "memory.txt")
	if err := writeNames(file, prefix, b.memNames); err != nil {
		return err
	}
	defer os.Remove(file)
	up0, err := upstreamQueries()
	if err != nil {
		return err
	}
	// Each name once, 100 outstanding; -l only bounds a server that stalls.
	fill, err := b.dnsperf(addr, file, "-n", "1", "-l", "300", "-c", "4", "-t", "5")
	if err != nil {
		return fmt.Errorf("filling: %w", err)
	}
	up1, err := upstreamQueries()
	if err != nil {
		return err
	}
	rssFilled, err := vmRSS(pid)
	if err != nil {
		return err
	}
	if got := up1 - up0; got != uint64(b.memNames) {
		// Not fatal: the sample below counts what is held either way.
		fmt.Printf("  round %d %-8s memory: the upstream got %d queries for %d names (dnsperf lost %d)\n",
			round, s, got, b.memNames, fill.lost)
	}

	// Count what is held: ask every step-th name again; each one that
	// reaches the upstream was not cached any more.
	sampleFile := filepath.Join(b.dir, "memory-sample.txt")
	step := max(1, b.memNames/memSample)
	var sb strings.Builder
	for i := 0; i < b.memNames; i += step {
		fmt.Fprintf(&sb, "%s%d.bench.example A\n", prefix, i)
	}
	if err := os.WriteFile(sampleFile, []byte(sb.String()), 0o600); err != nil {
		return err
	}
	defer os.Remove(sampleFile)
	sample, err := b.dnsperf(addr, sampleFile, "-n", "1", "-l", "60", "-c", "4", "-t", "5")
	if err != nil {
		return fmt.Errorf("sampling: %w", err)
	}
	up2, err := upstreamQueries()
	if err != nil {
		return err
	}
	hits := max(0, sample.completed-int(up2-up1))
	held := float64(b.memNames) * float64(hits) / float64(max(sample.completed, 1))

	r := b.res[s]
	perEntry := float64(rssFilled-rssStart) / max(held, 1)
	withStart := float64(rssFilled-rssSmall) / max(held, 1)
	r.add("mem.small", mib(rssSmall))
	r.add("mem.start", mib(rssStart))
	r.add("mem.filled", mib(rssFilled))
	r.add("mem.held", held)
	r.add("mem.bpe", perEntry)
	r.add("mem.bpe0", withStart)
	fmt.Printf("  round %d %-8s memory: RSS %.1f MiB with a %d-entry cache, %.1f MiB at start with a %d-entry one, "+
		"%.1f MiB after %d names (upstream got %d, lost %d); sample %d/%d cached, so %.0f held: "+
		"%.0f B per entry, %.0f B with the start allocation\n",
		round, s, mib(rssSmall), smallCache, mib(rssStart), size, mib(rssFilled), b.memNames, up1-up0, fill.lost,
		hits, sample.completed, held, perEntry, withStart)
	return nil
}

// vmRSS is the resident set size of pid in bytes, from /proc/<pid>/status.
func vmRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest) // "1234", "kB"
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("unexpected VmRSS line %q", sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		return kb * 1024, err
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
