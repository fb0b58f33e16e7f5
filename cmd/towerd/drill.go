package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/resolver"
	"github.com/towerd/towerd/upstream/faultproxy"
)

// Bounds on a drill, so a typo cannot turn it into a flood or a day-long run.
const (
	drillMaxDuration = 10 * time.Minute
	drillMaxQueries  = 1_000_000 // per path
	drillZone        = "drill.test."
	// drillWarmupTries bounds the warm-up's attempts per name.
	drillWarmupTries = 5
)

// drillOptions are the flags of towerd drill.
type drillOptions struct {
	faults    faultproxy.Faults
	load      drillLoad
	ttl       time.Duration
	seed      uint64
	threshold float64 // percent
	verbose   bool
}

func parseDrillFlags(args []string, stderr io.Writer) (*drillOptions, error) {
	o := &drillOptions{}
	var names int
	fs := flag.NewFlagSet("towerd drill", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&o.faults.Delay, "delay", 100*time.Millisecond, "upstream delay the fault proxy adds to every query")
	fs.DurationVar(&o.faults.Jitter, "jitter", 50*time.Millisecond, "the delay varies uniformly by ± this much")
	fs.Float64Var(&o.faults.Loss, "loss", 0.005, "probability a packet is lost, each way (0.005 = 0.5 %)")
	fs.Float64Var(&o.faults.ServFail, "servfail", 0, "probability the upstream answers SERVFAIL")
	fs.DurationVar(&o.load.duration, "duration", 20*time.Second, "how long the clients ask, on each path (direct, then through towerd)")
	fs.IntVar(&o.load.clients, "clients", 8, "simulated clients")
	fs.IntVar(&o.load.rate, "rate", 20, "queries per second of each client")
	fs.DurationVar(&o.load.timeout, "timeout", 2*time.Second, "a client's wait for one reply (Go's resolver: 2s; glibc: 5s); clients never retry")
	fs.IntVar(&names, "names", 50, "names in the generated zone, asked round-robin")
	fs.DurationVar(&o.ttl, "ttl", 10*time.Second, "TTL of the zone's records (short, so towerd refreshes during the run)")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the fault proxy's random choices; 0 = from the clock (printed, to replay a run)")
	fs.Float64Var(&o.threshold, "threshold", 99.9, "minimum success rate through towerd, in percent; below it towerd drill exits 1")
	fs.BoolVar(&o.verbose, "v", false, "log the in-process towerd's debug lines to stderr")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	l := o.load
	switch {
	case l.duration <= 0 || l.duration > drillMaxDuration:
		return nil, fmt.Errorf("-duration %v: want above 0 and at most %v", l.duration, drillMaxDuration)
	case l.clients < 1 || l.rate < 1 || names < 1 || names > 100_000:
		return nil, errors.New("-clients, -rate and -names must be at least 1 (and -names at most 100000)")
	case int64(l.clients)*int64(l.rate)*int64(l.duration/time.Second+1) > drillMaxQueries:
		return nil, fmt.Errorf("-clients × -rate × -duration asks more than %d queries per path", drillMaxQueries)
	case l.timeout <= 0 || o.ttl < time.Second || o.ttl > 24*time.Hour:
		return nil, errors.New("-timeout must be above 0 and -ttl between 1s and 24h")
	case o.faults.Loss < 0 || o.faults.Loss > 1 || o.faults.ServFail < 0 || o.faults.ServFail > 1:
		return nil, errors.New("-loss and -servfail are probabilities between 0 and 1")
	case o.faults.Delay < 0 || o.faults.Jitter < 0 || o.threshold < 0 || o.threshold > 100:
		return nil, errors.New("-delay and -jitter must not be negative, -threshold is a percentage")
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	o.load.want = map[string]string{}
	for i := range names {
		name := fmt.Sprintf("n%05d.%s", i, drillZone)
		o.load.names = append(o.load.names, name)
		// 10.0.0.0/8 addresses, one per name, so a wrong answer shows.
		o.load.want[name] = fmt.Sprintf("10.%d.%d.%d", (i>>16)&255, (i>>8)&255, i&255)
	}
	return o, nil
}

// drillCommand runs `towerd drill`: a loopback upstream behind the fault
// proxy, an in-process towerd in front of it, and simulated clients that ask
// the proxy directly and then through towerd. Exit status: 0 when towerd's
// success rate reaches the threshold, 1 below it or when the drill could not
// run, 2 for bad flags.
func drillCommand(args []string, stdout, stderr io.Writer) int {
	o, err := parseDrillFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "towerd drill: %v\n", err)
		return exitConfig
	}
	logOut := io.Discard
	if o.verbose {
		logOut = stderr
	}
	log := newLogger(logOut, "debug", "text")

	up, err := startDrillUpstream(o.load.want, o.ttl)
	if err != nil {
		fmt.Fprintf(stderr, "towerd drill: upstream: %v\n", err)
		return exitFail
	}
	defer up.close()
	proxy, err := faultproxy.New(faultproxy.Options{Target: up.addr, Faults: o.faults, Seed: o.seed})
	if err != nil {
		fmt.Fprintf(stderr, "towerd drill: %v\n", err)
		return exitFail
	}
	defer proxy.Close()
	tw, err := startDrillTowerd(proxy.Addr(), log)
	if err != nil {
		fmt.Fprintf(stderr, "towerd drill: towerd: %v\n", err)
		return exitFail
	}
	defer tw.stop()

	l := o.load
	fmt.Fprintf(stdout, "towerd drill  seed %d\n", o.seed)
	fmt.Fprintf(stdout, "upstream  %s, %d names with TTL %v, behind the fault proxy %s: delay %v ± %v, loss %.2f%% each way, SERVFAIL %.2f%%\n",
		up.addr, len(l.names), o.ttl, proxy.Addr(), o.faults.Delay, o.faults.Jitter, 100*o.faults.Loss, 100*o.faults.ServFail)
	fmt.Fprintf(stdout, "clients   %d × %d queries/s for %v on each path, timeout %v, no retries\n\n",
		l.clients, l.rate, l.duration, l.timeout)

	direct := summarizePath("direct", l.run(proxy.Addr()))
	if err := tw.warm(l); err != nil {
		fmt.Fprintf(stderr, "towerd drill: warming towerd's cache: %v\n", err)
		return exitFail
	}
	through := summarizePath("through towerd", l.run(tw.addr))
	printTable(stdout, direct, through)

	st := proxy.Stats()
	fmt.Fprintf(stdout, "\ncached names: p99 %s through towerd (target under 5ms), %s direct\n",
		drillDuration(through.p99), drillDuration(direct.p99))
	fmt.Fprintf(stdout, "fault proxy: %d queries, %d forwarded, %d lost queries, %d lost replies, %d SERVFAIL\n",
		st.Queries, st.Forwarded, st.LostQueries, st.LostReplies, st.ServFails)
	if through.successPercent < o.threshold {
		fmt.Fprintf(stdout, "FAIL: success through towerd %.3f%% is below the threshold %.3f%%\n", through.successPercent, o.threshold)
		return exitFail
	}
	fmt.Fprintf(stdout, "PASS: success through towerd %.3f%% reaches the threshold %.3f%%\n", through.successPercent, o.threshold)
	return exitOK
}

// drillUpstream is the loopback authoritative server of the generated zone.
type drillUpstream struct {
	addr    string
	servers []*dns.Server
}

func startDrillUpstream(want map[string]string, ttl time.Duration) (*drillUpstream, error) {
	pc, ln, err := listenLoopbackPair()
	if err != nil {
		return nil, err
	}
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if len(r.Question) != 1 {
			m.Rcode = dns.RcodeFormatError
		} else if addr, ok := want[dns.CanonicalName(r.Question[0].Name)]; !ok {
			m.Rcode = dns.RcodeNameError
		} else if r.Question[0].Qtype == dns.TypeA {
			m.Answer = []dns.RR{&dns.A{
				Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: uint32(ttl / time.Second)},
				A:   net.ParseIP(addr),
			}}
		}
		_ = w.WriteMsg(m)
	})
	u := &drillUpstream{addr: pc.LocalAddr().String()}
	u.servers = []*dns.Server{
		{PacketConn: pc, Handler: handler},
		{Listener: ln, Handler: handler},
	}
	var started sync.WaitGroup
	for _, s := range u.servers {
		started.Add(1)
		s.NotifyStartedFunc = started.Done
		go func() { _ = s.ActivateAndServe() }()
	}
	started.Wait()
	return u, nil
}

func (u *drillUpstream) close() {
	for _, s := range u.servers {
		_ = s.Shutdown()
	}
}

// drillTowerd is a towerd in this process, built by the daemon's own wiring
// (cacheConfig, resolverConfig, resolver.Server) from the built-in defaults
// with zone "." pointing at the fault proxy.
type drillTowerd struct {
	addr   string
	srv    *resolver.Server
	daemon *daemon
	served chan error
}

func startDrillTowerd(upstreamAddr string, log *slog.Logger) (*drillTowerd, error) {
	cfg := DefaultConfig()
	cfg.Listen = []string{"127.0.0.1:0"}
	cfg.Admin.Listen = ""
	cfg.Consul.Enabled = false
	zones := []ZoneConfig{{Name: ".", Servers: []string{upstreamAddr}}}
	c, err := cache.New(cacheConfig(cfg))
	if err != nil {
		return nil, err
	}
	d := &daemon{log: log, cfg: cfg}
	rcfg, groups, err := d.resolverConfig(cfg, zones)
	if err != nil {
		return nil, err
	}
	h, err := resolver.NewHandler(rcfg, c, log, nil)
	if err != nil {
		closeGroups(groups)
		return nil, err
	}
	d.handler, d.groups = h, groups
	srv := &resolver.Server{Handler: h}
	if err := srv.Listen(cfg.Listen); err != nil {
		closeGroups(groups)
		return nil, err
	}
	t := &drillTowerd{srv: srv, daemon: d, served: make(chan error, 1)}
	ready := make(chan struct{})
	go func() { t.served <- srv.Serve(func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-t.served:
		closeGroups(groups)
		return nil, err
	}
	for _, a := range srv.Addrs() {
		if udp, ok := strings.CutPrefix(a, "udp/"); ok {
			t.addr = udp
		}
	}
	return t, nil
}

// listenLoopbackPair binds UDP on a free loopback port and TCP on the same
// port, trying again when another process holds the TCP twin.
func listenLoopbackPair() (net.PacketConn, net.Listener, error) {
	var lastErr error
	for range 10 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
		lastErr = err
	}
	return nil, nil, lastErr
}

// warm asks every name through towerd until it answers, so the measured run
// shows what a node's clients see once their names are cached.
func (t *drillTowerd) warm(l drillLoad) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(l.names))
	limit := make(chan struct{}, 64)
	for _, name := range l.names {
		wg.Add(1)
		limit <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-limit }()
			for range drillWarmupTries {
				if l.ask(t.addr, name).ok {
					return
				}
			}
			errs <- fmt.Errorf("%s unanswered after %d tries", name, drillWarmupTries)
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// stop drains the listeners, then the upstream work, as the daemon does.
func (t *drillTowerd) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = t.srv.Shutdown(ctx)
	<-t.served
	t.daemon.handler.Close()
	closeGroups(t.daemon.groups)
}
