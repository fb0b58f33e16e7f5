// Command bench is `make bench` (issue 6): towerd beside dnsmasq and unbound
// as caching forwarders to one synthetic upstream on loopback, the same
// scenarios for each in turn (A B C A B C), medians over the rounds, one
// table. Every process it starts is stopped by its PID, on failure and on
// Ctrl-C too. No packet leaves loopback: the peers are configured to forward
// only to the synthetic upstream, dnsmasq with --no-resolv, unbound with a
// forward-zone "." and no root hints in play.
//
// Usage: bench -towerd bin/towerd [-rounds 2] [-duration 10s] [-rates 30000,80000]
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/towerd/towerd/test/faultproxy"
)

// Loopback addresses: each server on its own, all on port 5300.
const (
	port         = "5300"
	upstreamAddr = "127.0.0.10:" + port
)

func main() {
	var (
		serveUp   = flag.String("serve-upstream", "", "internal: run the synthetic upstream on `ADDR`")
		serveNul  = flag.String("serve-null", "", "internal: run the null responder on `ADDR`")
		ttl       = flag.Duration("ttl", time.Hour, "TTL of the synthetic zone's records")
		delay     = flag.Duration("delay", 0, "upstream delay (through the fault proxy)")
		jitter    = flag.Duration("jitter", 0, "upstream jitter ± (through the fault proxy)")
		loss      = flag.Float64("loss", 0, "upstream loss probability each way (through the fault proxy)")
		seed      = flag.Uint64("seed", 1, "fault proxy seed")
		towerd    = flag.String("towerd", "bin/towerd", "towerd binary to measure")
		rounds    = flag.Int("rounds", 2, "rounds of A B C (the table shows medians)")
		duration  = flag.Duration("duration", 10*time.Second, "length of each measured load")
		rates     = flag.String("rates", "30000,80000", "offered rates of the hit CPU scenario, queries/s")
		names     = flag.Int("names", 10000, "warm names of the hit scenarios")
		cacheSize = flag.Int("cache-size", 20000, "cache size of every server, in entries (unbound: bytes sized to hold them)")
		only      = flag.String("servers", "towerd,dnsmasq,unbound", "servers to measure, in turn")
	)
	flag.Parse()
	faults := faultproxy.Faults{Delay: *delay, Jitter: *jitter, Loss: *loss}
	var err error
	switch {
	case *serveUp != "":
		err = serveUpstream(*serveUp, *ttl, faults, *seed)
	case *serveNul != "":
		err = serveNull(*serveNul)
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
		b := &bench{
			towerd: *towerd, rounds: *rounds, duration: *duration, rates: rs, names: *names,
			cacheSize: *cacheSize, servers: strings.Split(*only, ","), ttl: *ttl, faults: faults, seed: *seed,
		}
		err = b.run()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type bench struct {
	towerd    string
	rounds    int
	duration  time.Duration
	rates     []int
	names     int
	cacheSize int
	servers   []string
	ttl       time.Duration
	faults    faultproxy.Faults
	seed      uint64

	dir   string
	procs *procSet
	up    *proc
	res   map[string]*results // by server
}

func (b *bench) run() error {
	for _, tool := range []string{"dnsperf", "dnsmasq", "unbound"} {
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

	self, err := os.Executable()
	if err != nil {
		return err
	}
	upArgs := []string{"-serve-upstream", upstreamAddr, "-ttl", b.ttl.String(),
		"-delay", b.faults.Delay.String(), "-jitter", b.faults.Jitter.String(),
		"-loss", strconv.FormatFloat(b.faults.Loss, 'g', -1, 64), "-seed", strconv.FormatUint(b.seed, 10)}
	b.up, err = b.procs.start("upstream", filepath.Join(dir, "upstream.log"), self, upArgs...)
	if err != nil {
		return err
	}
	if err := waitAnswer(upstreamAddr, controlName, 10*time.Second); err != nil {
		return fmt.Errorf("synthetic upstream: %w", err)
	}
	hitFile := filepath.Join(dir, "hit.txt")
	if err := writeNames(hitFile, "h", b.names); err != nil {
		return err
	}

	b.res = map[string]*results{}
	all := append([]string{"null"}, b.servers...)
	for _, s := range all {
		b.res[s] = newResults()
	}
	fmt.Printf("towerd bench: %d round(s) of %s, %s per load, rates %v, %d warm names, cache %d entries\n",
		b.rounds, strings.Join(all, " "), b.duration, b.rates, b.names, b.cacheSize)
	for round := 1; round <= b.rounds; round++ {
		for _, s := range all {
			if err := b.one(round, s, self, hitFile); err != nil {
				return fmt.Errorf("round %d, %s: %w", round, s, err)
			}
		}
	}
	b.table(os.Stdout)
	return nil
}

// one runs every scenario against server s, started fresh and stopped after.
func (b *bench) one(round int, s, self, hitFile string) error {
	addr := serverAddr(s)
	var p *proc
	var err error
	logf := filepath.Join(b.dir, fmt.Sprintf("%s-%d.log", s, round))
	switch s {
	case "null":
		p, err = b.procs.start(s, logf, self, "-serve-null", addr)
	default:
		name, args, cerr := b.serverCommand(s, addr, round)
		if cerr != nil {
			return cerr
		}
		p, err = b.procs.start(s, logf, name, args...)
	}
	if err != nil {
		return err
	}
	defer b.procs.stop(p)
	if err := waitAnswer(addr, "ready.bench.example.", 15*time.Second); err != nil {
		return fmt.Errorf("%s did not answer: %w (log: %s)", s, err, tail(logf))
	}
	r := b.res[s]

	// Scenario 1, hit CPU: warm every name, then fixed offered rates.
	// Two passes: the second fills what the first lost.
	for pass := 0; s != "null" && pass < 2; pass++ {
		if _, err := dnsperf(addr, hitFile, "-n", "1", "-Q", "20000", "-q", "200", "-c", "4"); err != nil {
			return fmt.Errorf("warming: %w", err)
		}
	}
	for _, rate := range b.rates {
		upBefore, _ := upstreamQueries()
		cpu0, err := cpuTicks(p.cmd.Process.Pid)
		if err != nil {
			return err
		}
		out, err := dnsperf(addr, hitFile, "-l", secs(b.duration), "-Q", strconv.Itoa(rate), "-q", "2000", "-c", "4", "-t", "2")
		if err != nil {
			return err
		}
		cpu1, err := cpuTicks(p.cmd.Process.Pid)
		if err != nil {
			return err
		}
		upAfter, _ := upstreamQueries()
		us := float64(cpu1-cpu0) * 1e6 / float64(clockTicks) / float64(max(out.noerror, 1))
		r.add(fmt.Sprintf("hit%d.us", rate), us)
		r.add(fmt.Sprintf("hit%d.qps", rate), out.qps)
		r.add(fmt.Sprintf("hit%d.lost", rate), 100*float64(out.lost)/float64(max(out.sent, 1)))
		r.add(fmt.Sprintf("hit%d.up", rate), float64(upAfter-upBefore))
		fmt.Printf("  round %d %-8s hit @%6d/s: %8.0f answered/s, %5.2f µs CPU/query, lost %d, upstream queries %d\n",
			round, s, rate, out.qps, us, out.lost, upAfter-upBefore)
	}
	if s == "null" {
		return nil
	}

	// Scenario 4, miss throughput: unique names never asked before,
	// dnsperf unlimited (100 outstanding per default), answered QPS.
	missFile := filepath.Join(b.dir, "miss.txt")
	// Enough names that no server runs out in the time given.
	n := int(b.duration.Seconds() * 150000)
	if err := writeNames(missFile, fmt.Sprintf("m%d-%s-", round, s), n); err != nil {
		return err
	}
	defer os.Remove(missFile)
	upBefore, _ := upstreamQueries()
	out, err := dnsperf(addr, missFile, "-n", "1", "-l", secs(b.duration), "-c", "4", "-t", "2")
	if err != nil {
		return err
	}
	upAfter, uerr := upstreamQueries()
	if uerr != nil {
		return uerr
	}
	perName := float64(upAfter-upBefore) / float64(max(out.sent, 1))
	r.add("miss.qps", out.qps)
	r.add("miss.lost", 100*float64(out.lost)/float64(max(out.sent, 1)))
	r.add("miss.up", perName)
	fmt.Printf("  round %d %-8s miss:         %8.0f answered/s, lost %d of %d, NOERROR %d, %.3f upstream queries per name\n",
		round, s, out.qps, out.lost, out.sent, out.noerror, perName)
	return nil
}

func serverAddr(s string) string {
	switch s {
	case "towerd":
		return "127.0.0.11:" + port
	case "dnsmasq":
		return "127.0.0.12:" + port
	case "unbound":
		return "127.0.0.13:" + port
	default: // null
		return "127.0.0.14:" + port
	}
}

func secs(d time.Duration) string { return strconv.Itoa(max(1, int(d.Round(time.Second)/time.Second))) }

// serverCommand is how each server is started: in the foreground, caching
// b.cacheSize answers, forwarding everything to the synthetic upstream only.
func (b *bench) serverCommand(s, addr string, round int) (string, []string, error) {
	host, _, _ := strings.Cut(addr, ":")
	upHost, upPort, _ := strings.Cut(upstreamAddr, ":")
	switch s {
	case "towerd":
		return b.towerd, []string{"-config", "", "-listen", addr, "-upstream", upstreamAddr,
			"-consul-http", "off", "-admin", "", "-state-dir", "", "-log-level", "warn",
			"-cache-size", strconv.Itoa(b.cacheSize)}, nil
	case "dnsmasq":
		dnsmasq, _ := lookPath("dnsmasq")
		return dnsmasq, []string{"--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts",
			"--no-poll", "--bind-interfaces", "--listen-address=" + host, "--port=" + port,
			"--server=" + upHost + "#" + upPort, "--cache-size=" + strconv.Itoa(b.cacheSize),
			"--pid-file=", "--user=root", "--log-facility=-"}, nil
	case "unbound":
		conf := filepath.Join(b.dir, fmt.Sprintf("unbound-%d.conf", round))
		// About 400 bytes per cached answer in each cache (message and rrset),
		// doubled for unbound's slab and hash overhead: it holds cacheSize.
		mb := max(4, b.cacheSize*400*2/(1<<20))
		text := fmt.Sprintf(`server:
	interface: %[1]s@%[2]s
	port: %[2]s
	do-ip6: no
	do-tcp: yes
	num-threads: 2
	so-reuseport: yes
	access-control: 127.0.0.0/8 allow
	do-not-query-localhost: no
	username: ""
	chroot: ""
	directory: "%[3]s"
	pidfile: ""
	use-syslog: no
	logfile: ""
	verbosity: 0
	module-config: "iterator"
	msg-cache-size: %[4]dm
	rrset-cache-size: %[5]dm
	cache-min-ttl: 0
	prefetch: no
	serve-expired: no
	qname-minimisation: no
forward-zone:
	name: "."
	forward-addr: %[6]s@%[7]s
	forward-first: no
remote-control:
	control-enable: no
`, host, port, b.dir, mb, 2*mb, upHost, upPort)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			return "", nil, err
		}
		unbound, _ := lookPath("unbound")
		return unbound, []string{"-d", "-c", conf}, nil
	}
	return "", nil, fmt.Errorf("unknown server %q", s)
}
