// Package drill is `towerd drill`: a loopback upstream behind the fault
// proxy, a towerd started in this process through daemon.New (the same
// wiring as `towerd serve`), and simulated clients that ask the proxy
// directly and then through towerd, so an operator sees what a bad
// upstream day does to the node's clients with and without towerd.
package drill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/cmd/towerd/internal/daemon"
	"github.com/towerd/towerd/upstream/faultproxy"
)

// Bounds on a drill, so a typo cannot turn it into a flood or a day-long run.
const (
	maxDuration = 10 * time.Minute
	maxQueries  = 1_000_000 // per path
	maxNames    = 100_000
	zone        = "drill.test."
	// warmupTries bounds the warm-up's attempts per name.
	warmupTries = 5
)

// Options say how hard a drill pushes; `towerd drill`'s flags fill them.
type Options struct {
	// Faults are what the fault proxy does to the upstream's traffic.
	Faults faultproxy.Faults
	// Clients simulated, each asking Rate queries per second for Duration
	// on each path and waiting at most Timeout for a reply (no retries).
	Clients  int
	Rate     int
	Duration time.Duration
	Timeout  time.Duration
	// Names in the generated zone, asked round-robin; TTL of its records.
	Names int
	TTL   time.Duration
	// Seed of the fault proxy's random choices; 0 = from the clock.
	Seed uint64
	// Threshold is the minimum success rate through towerd, in percent.
	Threshold float64
	// Log receives the in-process towerd's lines.
	Log *slog.Logger
}

// Check rejects options outside the drill's bounds, naming the flag.
func (o *Options) Check() error {
	switch {
	case o.Duration <= 0 || o.Duration > maxDuration:
		return fmt.Errorf("-duration %v: want above 0 and at most %v", o.Duration, maxDuration)
	case o.Clients < 1 || o.Rate < 1 || o.Names < 1 || o.Names > maxNames:
		return errors.New("-clients, -rate and -names must be at least 1 (and -names at most 100000)")
	case int64(o.Clients)*int64(o.Rate)*int64(o.Duration/time.Second+1) > maxQueries:
		return fmt.Errorf("-clients × -rate × -duration asks more than %d queries per path", maxQueries)
	case o.Timeout <= 0 || o.TTL < time.Second || o.TTL > 24*time.Hour:
		return errors.New("-timeout must be above 0 and -ttl between 1s and 24h")
	case o.Faults.Loss < 0 || o.Faults.Loss > 1 || o.Faults.ServFail < 0 || o.Faults.ServFail > 1:
		return errors.New("-loss and -servfail are probabilities between 0 and 1")
	case o.Faults.Delay < 0 || o.Faults.Jitter < 0 || o.Threshold < 0 || o.Threshold > 100:
		return errors.New("-delay and -jitter must not be negative, -threshold is a percentage")
	}
	return nil
}

// load builds the clients' side from o: the names and their addresses.
func (o *Options) load() load {
	l := load{clients: o.Clients, rate: o.Rate, duration: o.Duration, timeout: o.Timeout, want: map[string]string{}}
	for i := range o.Names {
		name := fmt.Sprintf("n%05d.%s", i, zone)
		l.names = append(l.names, name)
		// 10.0.0.0/8 addresses, one per name, so a wrong answer shows.
		l.want[name] = fmt.Sprintf("10.%d.%d.%d", (i>>16)&255, (i>>8)&255, i&255)
	}
	return l
}

// Run runs a checked drill and prints its report to stdout. passed says
// whether towerd's success rate reached the threshold; err that the drill
// could not run.
func Run(o Options, stdout io.Writer) (passed bool, err error) {
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	l := o.load()
	up, err := startUpstream(l.want, o.TTL)
	if err != nil {
		return false, fmt.Errorf("upstream: %w", err)
	}
	defer up.close()
	proxy, err := faultproxy.New(faultproxy.Options{Target: up.addr, Faults: o.Faults, Seed: o.Seed})
	if err != nil {
		return false, err
	}
	defer proxy.Close()
	tw, err := startTowerd(proxy.Addr(), o.Log)
	if err != nil {
		return false, fmt.Errorf("towerd: %w", err)
	}
	defer tw.stop()

	fmt.Fprintf(stdout, "towerd drill  seed %d\n", o.Seed)
	fmt.Fprintf(stdout, "upstream  %s, %d names with TTL %v, behind the fault proxy %s: delay %v ± %v, loss %.2f%% each way, SERVFAIL %.2f%%\n",
		up.addr, len(l.names), o.TTL, proxy.Addr(), o.Faults.Delay, o.Faults.Jitter, 100*o.Faults.Loss, 100*o.Faults.ServFail)
	fmt.Fprintf(stdout, "clients   %d × %d queries/s for %v on each path, timeout %v, no retries\n\n",
		l.clients, l.rate, l.duration, l.timeout)

	direct := summarizePath("direct", l.run(proxy.Addr()))
	if err := tw.warm(l); err != nil {
		return false, fmt.Errorf("warming towerd's cache: %w", err)
	}
	through := summarizePath("through towerd", l.run(tw.addr))
	printTable(stdout, direct, through)

	st := proxy.Stats()
	fmt.Fprintf(stdout, "\ncached names: p99 %s through towerd (target under 5ms), %s direct\n",
		formatLatency(through.p99), formatLatency(direct.p99))
	fmt.Fprintf(stdout, "fault proxy: %d queries, %d forwarded, %d lost queries, %d lost replies, %d SERVFAIL\n",
		st.Queries, st.Forwarded, st.LostQueries, st.LostReplies, st.ServFails)
	if through.successPercent < o.Threshold {
		fmt.Fprintf(stdout, "FAIL: success through towerd %.3f%% is below the threshold %.3f%%\n", through.successPercent, o.Threshold)
		return false, nil
	}
	fmt.Fprintf(stdout, "PASS: success through towerd %.3f%% reaches the threshold %.3f%%\n", through.successPercent, o.Threshold)
	return true, nil
}

// towerd is the drill's towerd: the daemon's own New and Run over the
// built-in defaults, with zone "." pointing at the fault proxy and nothing
// that reaches outside the drill (no admin server, Consul watch, saved
// cache, systemd sockets or signals).
type towerd struct {
	addr string
	d    *daemon.Daemon
	done chan error
}

func startTowerd(upstreamAddr string, log *slog.Logger) (*towerd, error) {
	cfg := config.DefaultConfig()
	cfg.Listen = []string{"127.0.0.1:0"}
	cfg.Admin.Listen = ""
	cfg.Consul.Enabled = false
	cfg.StateDir = ""
	cfg.Zones = []config.ZoneConfig{{Name: ".", Servers: []string{upstreamAddr}}}
	d, err := daemon.New(daemon.Options{
		Config: cfg,
		Zones:  []config.ZoneConfig{{Name: ".", Servers: []string{upstreamAddr}}},
		Log:    log,
	})
	if err != nil {
		return nil, err
	}
	t := &towerd{d: d, done: make(chan error, 1)}
	go func() { t.done <- d.Run(context.Background()) }()
	select {
	case <-d.Ready():
	case err := <-t.done:
		return nil, err
	}
	for _, a := range d.Addrs() {
		if udp, ok := strings.CutPrefix(a, "udp/"); ok {
			t.addr = udp
		}
	}
	return t, nil
}

// stop drains the listeners, then the upstream work, as the daemon does
// on SIGTERM.
func (t *towerd) stop() {
	t.d.Shutdown()
	<-t.done
}

// upstream is the loopback authoritative server of the generated zone.
type upstream struct {
	addr    string
	servers []*dns.Server
}

func startUpstream(want map[string]string, ttl time.Duration) (*upstream, error) {
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
	u := &upstream{addr: pc.LocalAddr().String()}
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

func (u *upstream) close() {
	for _, s := range u.servers {
		_ = s.Shutdown()
	}
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
func (t *towerd) warm(l load) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(l.names))
	limit := make(chan struct{}, 64)
	for _, name := range l.names {
		wg.Add(1)
		limit <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-limit }()
			for range warmupTries {
				if l.ask(t.addr, name).ok {
					return
				}
			}
			errs <- fmt.Errorf("%s unanswered after %d tries", name, warmupTries)
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}
