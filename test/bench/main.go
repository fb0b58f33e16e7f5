// Command bench is `make bench` (issue 6): towerd beside dnsmasq and unbound
// as caching forwarders to a synthetic upstream on loopback, the same
// scenarios for each in turn (A B C A B C), medians over the rounds, one
// table. Every process it starts is stopped by its PID, on failure and on
// Ctrl-C too. No packet leaves loopback: the peers are configured to forward
// only to the synthetic upstream, dnsmasq with --no-resolv, unbound with a
// forward-zone "." and no root hints in play.
//
// The scenarios of issue 6, each selectable with -scenarios:
//
//	hitcpu      1. CPU per cached answer at fixed dnsperf rates (hit.go)
//	latency     2. hit latency under a 2,000 qps open-loop probe (hit.go, prober.go)
//	throughput  3. cached answers per second, dnsperf unlimited (hit.go)
//	miss        4. unique names per second through to the upstream (hit.go)
//	memory      5. RSS per cached entry after 100,000 names (memory.go)
//	jitter      6. a slow, lossy upstream with 2 s TTLs: serve-stale (jitter.go)
//	cold        7. 20,000 unique names right after a start (storm.go)
//	nxstorm     8. search-domain NXDOMAIN storm, coalescing (storm.go)
//	tcpmiss     9. scenario 4 over TCP (hit.go; issue 22)
//	search     10. glibc lookups with a search list, ndots:1 and 5 (search.go; issue 28; needs root)
//	dot        12. first-time names forwarded over DNS over TLS: towerd, unbound (dot.go; issue 37)
//	pick       13. two site resolvers, one slow; a lossy one; one turning slow; an outage (pick.go; issue 36)
//	abuse      14. names nobody answers fill the in-flight cap; TCP connections that always owe an answer (abuse.go; issue 35)
//	consul     15. cached names of another zone, cached Consul names, a watched name; CPU per answer beside dnsmasq and unbound (consul.go; issue 34)
//	amplify    16. upstream queries per client question under a search list (amplify.go; issue 35)
//
// Usage: bench -towerd bin/towerd [-rounds 2] [-duration 10s] [-scenarios latency,memory]
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/towerd/towerd/test/faultproxy"
)

// Loopback addresses: each server on its own, all on port 5300; the
// upstreams answer their counts on controlPort of the same host.
const (
	port         = "5300"
	upstreamAddr = "127.0.0.10:" + port
	// jitterUpstreamAddr is scenario 6's own upstream: 2 s TTLs behind the
	// fault proxy, so its faults never touch the other scenarios.
	jitterUpstreamAddr = "127.0.0.15:" + port
)

// allScenarios in the order they run within a round.
var allScenarios = []string{"hitcpu", "latency", "throughput", "miss", "memory", "jitter", "cold", "nxstorm", "tcpmiss", "search", "dnstap", "dot", "pick", "abuse", "consul", "amplify"}

func main() {
	var (
		serveUp   = flag.String("serve-upstream", "", "internal: run the synthetic upstream on `ADDR`")
		serveNul  = flag.String("serve-null", "", "internal: run the null responder on `ADDR`")
		zone      = flag.String("zone", "", "internal: the synthetic upstream's zone: \"\" (every name) or \"search\" (scenario 10's)")
		ttl       = flag.Duration("ttl", time.Hour, "TTL of the synthetic zone's records")
		delay     = flag.Duration("delay", 0, "upstream delay (through the fault proxy)")
		jitter    = flag.Duration("jitter", 0, "upstream jitter ± (through the fault proxy)")
		loss      = flag.Float64("loss", 0, "upstream loss probability each way (through the fault proxy)")
		seed      = flag.Uint64("seed", 1, "fault proxy seed")
		towerd    = flag.String("towerd", "bin/towerd", "towerd binary to measure")
		rounds    = flag.Int("rounds", 2, "rounds of A B C (the table shows medians)")
		duration  = flag.Duration("duration", 10*time.Second, "length of each measured load of scenarios 1 to 4")
		rates     = flag.String("rates", "30000,80000", "offered rates of the hit CPU scenario, queries/s")
		names     = flag.Int("names", 10000, "warm names of the hit scenarios")
		cacheSize = flag.Int("cache-size", 20000, "cache size of every server in scenarios 1 to 4, in entries (unbound: bytes sized to hold them)")
		only      = flag.String("servers", "towerd,dnsmasq,unbound", "servers to measure, in turn")
		scen      = flag.String("scenarios", strings.Join(allScenarios, ","), "scenarios to run: "+strings.Join(allScenarios, ","))
		memNames  = flag.Int("memory-names", 100000, "distinct names cached in the memory scenario")
		jitWindow = flag.Duration("jitter-window", 30*time.Second, "length of the jitter scenario's probe")
		searchN   = flag.Int("search-lookups", 100, "lookups per name of the search scenario after the first, one every 100 ms")
		consul    = flag.String("consul", "test/consulagent/bin/consul", "Consul agent binary for the search scenario's Consul rows (make consul-agent)")
		coredns   = flag.String("coredns", "test/corednsbuild/bin/coredns", "CoreDNS binary for the dot scenario's CoreDNS row (make coredns)")
		dotCmp    = flag.String("dot-compare", "", "another towerd binary (before a change) measured in the dot scenario beside -towerd, as the row towerd-tls-cmp")
		pickWin   = flag.Duration("pick-window", 30*time.Second, "length of each day of the pick scenario")
		pickOut   = flag.Duration("pick-outage", 60*time.Second, "length of the pick scenario's outage")
		pickLossy = flag.Duration("pick-lossy-window", 90*time.Second, "length of the pick scenario's lossy day (its p99 is also read from all rounds pooled)")
		abuseWin  = flag.Duration("abuse-window", 20*time.Second, "how long the abuse scenario asks fresh names beside its flood")
		consulQPS = flag.Int("consul-rate", 20000, "offered rate of each load of the consul scenario, queries/s")
		consulFl  = flag.Bool("consul-floor", false, "scenario 15 also asks two floors that send every query back with QR set: the null responder (one blocking thread) and towerd's own UDP I/O with no DNS (resolver/udpio)")
		serveNulG = flag.String("serve-null-go", "", "internal: run the Go floor (towerd's UDP I/O, no DNS) on `ADDR`")
		consulSl  = flag.Duration("consul-slice", 4*time.Second, "length of each load of the consul scenario: each server is asked each set 8 s a round, in loads this long")
	)
	flag.Parse()
	faults := faultproxy.Faults{Delay: *delay, Jitter: *jitter, Loss: *loss}
	var err error
	switch {
	case *serveUp != "":
		err = serveUpstream(*serveUp, *ttl, faults, *seed, *zone)
	case *serveNul != "":
		err = serveNull(*serveNul)
	case *serveNulG != "":
		err = serveNullGo(*serveNulG)
	default:
		var rs []int
		for _, f := range strings.Split(*rates, ",") {
			r, perr := strconv.Atoi(strings.TrimSpace(f))
			if perr != nil || r <= 0 {
				fmt.Fprintf(os.Stderr, "bench: bad -rates %q\n", *rates)
				os.Exit(2)
			}
			rs = append(rs, r)
		}
		want := map[string]bool{}
		for _, f := range strings.Split(*scen, ",") {
			f = strings.TrimSpace(f)
			if !slices.Contains(allScenarios, f) {
				fmt.Fprintf(os.Stderr, "bench: unknown scenario %q in -scenarios (known: %s)\n", f, strings.Join(allScenarios, ","))
				os.Exit(2)
			}
			want[f] = true
		}
		b := &bench{
			towerd: *towerd, rounds: *rounds, duration: *duration, rates: rs, names: *names,
			cacheSize: *cacheSize, servers: strings.Split(*only, ","), ttl: *ttl, faults: faults, seed: *seed,
			want: want, memNames: *memNames, jitterWindow: *jitWindow, searchCount: *searchN, consul: *consul,
			coredns:    *coredns,
			dotCompare: *dotCmp,
			pickWindow: *pickWin, pickLossyWindow: *pickLossy, pickOutageLen: *pickOut, abuseWindow: *abuseWin, consulRate: *consulQPS,
			consulSlice: *consulSl, consulFloor: *consulFl,
		}
		err = b.run()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type bench struct {
	towerd       string
	rounds       int
	duration     time.Duration
	rates        []int
	names        int
	cacheSize    int
	servers      []string
	ttl          time.Duration
	faults       faultproxy.Faults
	seed         uint64
	want         map[string]bool // selected scenarios
	memNames     int
	jitterWindow time.Duration
	searchCount  int    // lookups per name in scenario 10, after the first
	consul       string // Consul agent binary; "" once it is found missing
	coredns      string // CoreDNS binary (scenario 12); "" once it is found missing
	dotCompare   string // a second towerd binary for scenario 12 (-dot-compare)
	// dotLat holds each scenario 12 row's latencies of every round so far,
	// pooled.
	dotLat     map[string][]time.Duration
	pickWindow time.Duration
	// pickLossyWindow is scenario 13's lossy day, longer than the others:
	// its p99 is the middle of the lost packets' answers, about 2 % of
	// the queries, so a 30 s day's p99 is read from some 30 of them.
	pickLossyWindow time.Duration
	// pickLossy holds each server's lossy-day latencies of every round so
	// far, pooled.
	pickLossy map[string][]time.Duration
	// pickOutageLen is scenario 13's outage.
	pickOutageLen time.Duration
	// abuseWindow is how long scenario 14 asks its fresh names.
	abuseWindow time.Duration
	// abuseServers are scenarios 14 and 15's upstreams.
	abuseServers *abuseServers
	// consulRate is scenario 15's offered rate, queries/s.
	consulRate int
	// consulSlice is the length of each of scenario 15's loads.
	consulSlice time.Duration
	// consulFloor adds the two floors to scenario 15's rows.
	consulFloor bool

	dir   string
	self  string // this binary: the upstreams and the null responder
	procs *procSet
	res   map[string]*results // by server
}

// hitPhase reports whether any scenario that runs on the long-TTL upstream
// with one server start for all of them (1 to 4, 9) is selected.
func (b *bench) hitPhase() bool {
	return b.want["hitcpu"] || b.want["latency"] || b.want["throughput"] || b.want["miss"] || b.want["tcpmiss"] ||
		b.want["dnstap"]
}

// warmNames reports whether a scenario on the warm names (1 to 3) is
// selected: they need the warm-up.
func (b *bench) warmNames() bool {
	return b.want["hitcpu"] || b.want["latency"] || b.want["throughput"]
}

// withNull reports whether the null responder runs: the floor of scenarios
// 1 and 2.
func (b *bench) withNull() bool { return b.want["hitcpu"] || b.want["latency"] }

func (b *bench) run() error {
	lock, err := lockBench(benchLock)
	if err != nil {
		return err
	}
	defer lock.Close()
	tools := []string{"dnsperf", "dnsmasq", "unbound"}
	if b.want["dnstap"] {
		tools = append(tools, "fstrm_capture")
	}
	for _, tool := range tools {
		if _, err := lookPath(tool); err != nil {
			return fmt.Errorf("%s is missing: run test/bench/install-peers.sh (make bench does)", tool)
		}
	}
	if _, err := os.Stat(b.towerd); err != nil {
		return fmt.Errorf("towerd binary: %w (make build)", err)
	}
	dir, err := os.MkdirTemp("", "towerd-bench-")
	if err != nil {
		return err
	}
	b.dir = dir
	defer os.RemoveAll(dir)
	b.procs = newProcSet()
	defer b.procs.stopAll()
	// Ctrl-C or SIGTERM: stop what was started, by PID, then exit.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "bench: %v: stopping everything\n", s)
		b.procs.stopAll()
		os.RemoveAll(dir)
		os.Exit(130)
	}()

	if b.self, err = os.Executable(); err != nil {
		return err
	}
	if b.hitPhase() || b.want["memory"] {
		if err := b.startUpstream("upstream", upstreamAddr, b.ttl, b.faults); err != nil {
			return err
		}
	}
	if b.want["jitter"] {
		if err := b.startUpstream("jitter-upstream", jitterUpstreamAddr, jitterTTL, jitterFaults); err != nil {
			return err
		}
	}
	if b.want["cold"] || b.want["nxstorm"] {
		if err := b.startUpstream("storm-upstream", stormUpstreamAddr, b.ttl, stormFaults); err != nil {
			return err
		}
	}
	if b.want["search"] {
		if err := b.searchSetUp(); err != nil { // search.go
			return err
		}
	}
	if b.want["abuse"] || b.want["amplify"] {
		a, err := startAbuseServers() // abuse.go
		if err != nil {
			return err
		}
		defer a.close()
		b.abuseServers = a
	}
	hitFile := filepath.Join(dir, "hit.txt")
	if err := writeNames(hitFile, "h", b.names); err != nil {
		return err
	}

	hitServers := b.servers
	if b.withNull() {
		hitServers = append([]string{"null"}, b.servers...)
	}
	b.res = map[string]*results{}
	for _, s := range append([]string{"null"}, b.servers...) {
		b.res[s] = newResults()
	}
	var chosen []string
	for _, s := range allScenarios {
		if b.want[s] {
			chosen = append(chosen, s)
		}
	}
	fmt.Printf("towerd bench: %d round(s) of %s; scenarios %s; %s per load, rates %v, %d warm names, cache %d entries\n",
		b.rounds, strings.Join(hitServers, " "), strings.Join(chosen, ","), b.duration, b.rates, b.names, b.cacheSize)
	began := time.Now()
	if b.want["consul"] {
		// Scenario 15 keeps every server running through its rounds, so
		// that its loads interleave (consul.go).
		if err := b.consulScenario(); err != nil {
			return fmt.Errorf("consul: %w", err)
		}
	}
	for round := 1; round <= b.rounds; round++ {
		for _, s := range hitServers {
			if !b.hitPhase() {
				break
			}
			if err := b.hit(round, s, hitFile); err != nil {
				return fmt.Errorf("round %d, %s: %w", round, s, err)
			}
		}
		for _, s := range b.servers {
			if !b.want["memory"] {
				break
			}
			if err := b.memory(round, s); err != nil {
				return fmt.Errorf("round %d, %s, memory: %w", round, s, err)
			}
		}
		for _, s := range b.servers {
			if !b.want["jitter"] {
				break
			}
			if err := b.jitter(round, s); err != nil {
				return fmt.Errorf("round %d, %s, jitter: %w", round, s, err)
			}
		}
		for _, s := range b.servers {
			if !b.want["cold"] && !b.want["nxstorm"] {
				break
			}
			if err := b.storm(round, s); err != nil {
				return fmt.Errorf("round %d, %s, cold/nxstorm: %w", round, s, err)
			}
		}
		if b.want["dot"] {
			if err := b.dot(round); err != nil {
				return fmt.Errorf("round %d, dot: %w", round, err)
			}
		}
		if b.want["dnstap"] && slices.Contains(b.servers, "towerd") {
			if err := b.dnstap(round, hitFile); err != nil { // dnstap.go
				return fmt.Errorf("round %d, towerd, dnstap: %w", round, err)
			}
		}
		for _, s := range b.servers {
			if !b.want["pick"] {
				break
			}
			if err := b.pick(round, s); err != nil { // pick.go
				return fmt.Errorf("round %d, %s, pick: %w", round, s, err)
			}
		}
		if b.want["pick"] && slices.Contains(b.servers, "towerd") {
			if err := b.pickOutage(round); err != nil {
				return fmt.Errorf("round %d, towerd, pick outage: %w", round, err)
			}
		}
		for _, s := range b.servers {
			if !b.want["abuse"] {
				break
			}
			if err := b.abuse(round, s); err != nil { // abuse.go
				return fmt.Errorf("round %d, %s, abuse: %w", round, s, err)
			}
		}
		for _, s := range b.servers {
			if !b.want["amplify"] {
				break
			}
			if err := b.amplify(round, s); err != nil { // amplify.go
				return fmt.Errorf("round %d, %s, amplify: %w", round, s, err)
			}
		}
		for _, s := range b.servers {
			if !b.want["search"] {
				break
			}
			if err := b.search(round, s); err != nil {
				return fmt.Errorf("round %d, %s, search: %w", round, s, err)
			}
		}
	}
	b.table(os.Stdout)
	if b.want["dot"] {
		b.dotTable(os.Stdout)
	}
	fmt.Printf("\nmeasured in %v\n", time.Since(began).Round(time.Second))
	return nil
}

// startUpstream starts a synthetic upstream (this binary) on addr and waits
// until it answers; it runs until the bench ends.
func (b *bench) startUpstream(label, addr string, ttl time.Duration, f faultproxy.Faults) error {
	args := []string{"-serve-upstream", addr, "-ttl", ttl.String(),
		"-delay", f.Delay.String(), "-jitter", f.Jitter.String(),
		"-loss", strconv.FormatFloat(f.Loss, 'g', -1, 64), "-seed", strconv.FormatUint(b.seed, 10)}
	host, _, _ := strings.Cut(addr, ":")
	for _, a := range []string{addr, host + ":" + controlPort} {
		if err := addrFree(a); err != nil {
			return fmt.Errorf("%s: %w", label, err)
		}
	}
	logf := filepath.Join(b.dir, label+".log")
	p, err := b.procs.start(label, logf, b.self, args...)
	if err != nil {
		return err
	}
	if err := waitAnswer(addr, controlName, 10*time.Second); err != nil {
		return fmt.Errorf("%s: %w (log: %s)", label, err, tail(logf))
	}
	return exited(p, logf)
}

func secs(d time.Duration) string { return strconv.Itoa(max(1, int(d.Round(time.Second)/time.Second))) }
