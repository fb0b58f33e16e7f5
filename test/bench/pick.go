package main

import (
	"fmt"
	"net"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/faultproxy"
)

// Scenario 13, pick (issue 36): which server a forwarder asks, and what a
// late or lost packet costs, when the site has two resolvers, or one that
// is slow and lossy. The upstreams run in this process, each behind a
// fault proxy whose faults the scenario changes as it goes; every name is
// asked once (first-time names only), so each question is a miss.
//
//   - two: the first listed server answers 300 ± 100 ms, the second
//     5 ± 2 ms; 40 queries/s. Measured: the share of upstream queries the
//     fast one got, the answers' p50 and p99.
//   - lossy: one server, 100 ± 50 ms, losing 1 % of packets each way (2 %
//     of exchanges); 50 queries/s for -pick-lossy-window (picklossy.go).
//     Measured: answered, p99 (each round's, and all rounds' pooled),
//     p99.9, and upstream queries per miss.
//   - turn: two servers at 5 ± 2 ms; halfway, the one that got most of
//     the queries turns 300 ± 100 ms. Measured: seconds from the turn
//     until it gets under 10 % of the queries in a second (what it still
//     gets is exploring and hedges).
//   - outage (towerd only, with hedging and with upstream.hedge_budget = 0,
//     as before issue 36): one server at 5 ± 2 ms for 10 s at 40 queries/s,
//     then silent for pickOutage. Measured: packets it was sent while
//     silent.

const (
	pickFirstAddr  = "127.0.0.30:" + port
	pickSecondAddr = "127.0.0.31:" + port
	pickTimeout    = 2 * time.Second
)

var (
	pickSlow  = faultproxy.Faults{Delay: 300 * time.Millisecond, Jitter: 100 * time.Millisecond}
	pickFast  = faultproxy.Faults{Delay: 5 * time.Millisecond, Jitter: 2 * time.Millisecond}
	pickLossy = faultproxy.Faults{Delay: 100 * time.Millisecond, Jitter: 50 * time.Millisecond, Loss: 0.01}
)

// pickUpstream is one of the scenario's upstreams: the synthetic zone
// behind a fault proxy on a fixed address.
type pickUpstream struct {
	proxy *faultproxy.Proxy
	srv   *dns.Server
}

func startPickUpstream(addr string, f faultproxy.Faults, seed uint64) (*pickUpstream, error) {
	if err := addrFree(addr); err != nil {
		return nil, err
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &dns.Server{PacketConn: pc, Handler: &upstreamServer{ttl: 3600}}
	go func() { _ = srv.ActivateAndServe() }()
	p, err := faultproxy.New(faultproxy.Options{Target: pc.LocalAddr().String(), Listen: addr, Faults: f, Seed: seed})
	if err != nil {
		_ = srv.Shutdown()
		return nil, err
	}
	return &pickUpstream{proxy: p, srv: srv}, nil
}

func (u *pickUpstream) sent() uint64 { return u.proxy.Stats().Queries }

func (u *pickUpstream) close() {
	_ = u.proxy.Close()
	_ = u.srv.Shutdown()
}

// pickNames are n names no server has seen: this server's, this round's,
// this day's.
func pickNames(round int, s, day string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("p%d-%s-%s-%d.bench.example.", round, day, s, i)
	}
	return names
}

// pickProbe asks names at rate, each once.
func pickProbe(addr string, names []string, rate int) (probeResult, error) {
	pr := probe{addr: addr, names: names, rate: rate, timeout: pickTimeout, edns: true, sockets: 4,
		duration: time.Duration(len(names)) * time.Second / time.Duration(rate)}
	return pr.run()
}

func (b *bench) pick(round int, s string) error {
	r := b.res[s]
	rate, window := 40, b.pickWindow
	n := int(window.Seconds()) * rate

	// Day one: the first listed is slow.
	first, err := startPickUpstream(pickFirstAddr, pickSlow, b.seed)
	if err != nil {
		return err
	}
	defer first.close()
	second, err := startPickUpstream(pickSecondAddr, pickFast, b.seed+1)
	if err != nil {
		return err
	}
	defer second.close()
	both := pickFirstAddr + "," + pickSecondAddr
	out, err := b.pickDay(round, s, "two", both, "", pickNames(round, s, "two", n), rate, nil)
	if err != nil {
		return err
	}
	slowSent, fastSent := first.sent(), second.sent()
	share := 100 * float64(fastSent) / float64(max(slowSent+fastSent, 1))
	r.add("pick.fast", share)
	r.add("pick.p50", ms(out.percentile(0.5)))
	r.add("pick.p99", ms(out.percentile(0.99)))
	fmt.Printf("  round %d %-8s pick two: %.1f %% of %d upstream queries to the fast server, %d of %d answered, p50 %.1f ms, p99 %.1f ms\n",
		round, s, share, slowSent+fastSent, out.answered, out.sent, ms(out.percentile(0.5)), ms(out.percentile(0.99)))

	// Day two: one server, slow and lossy, for its own, longer window.
	first.proxy.SetFaults(pickLossy)
	first.proxy.Reseed(b.seed + 1000*uint64(round))
	if err := b.pickLossyDay(round, s, first); err != nil {
		return err
	}

	// Day three: both fast, then the favourite turns slow.
	first.proxy.SetFaults(pickFast)
	second.proxy.SetFaults(pickFast)
	leftc := make(chan time.Duration, 1)
	turn := func() {
		// The favourite so far is the one that turns.
		fav, other := first, second
		if second.sent() > first.sent() {
			fav, other = second, first
		}
		fav.proxy.SetFaults(pickSlow)
		turned := time.Now()
		go func() {
			f0, o0 := fav.sent(), other.sent()
			for time.Since(turned) < window/2 {
				time.Sleep(time.Second)
				f1, o1 := fav.sent(), other.sent()
				if df, do := f1-f0, o1-o0; do > 0 && float64(df) < 0.1*float64(df+do) {
					leftc <- time.Since(turned).Round(time.Second)
					return
				}
				f0, o0 = f1, o1
			}
			leftc <- -time.Second
		}()
	}
	if _, err := b.pickDay(round, s, "turn", both, "", pickNames(round, s, "turn", n), rate, turn); err != nil {
		return err
	}
	left := <-leftc
	r.add("pick.left", left.Seconds())
	fmt.Printf("  round %d %-8s pick turn: the server that turned slow was left (under 10 %% of a second's queries) after %.0f s (-1: never)\n",
		round, s, left.Seconds())
	return nil
}

// pickDay starts server s forwarding to upstreams, asks names at rate
// (calling midway, if set, halfway through), and stops it.
func (b *bench) pickDay(round int, s, day, upstreams, towerdConfig string, names []string, rate int, midway func()) (probeResult, error) {
	p, err := b.startServer(s, round, serverSetup{phase: "pick-" + day, upstream: upstreams, cacheSize: b.cacheSize, towerdConfig: towerdConfig})
	if err != nil {
		return probeResult{}, err
	}
	defer b.procs.stop(p)
	if midway == nil {
		return pickProbe(serverAddr(s), names, rate)
	}
	half := len(names) / 2
	out, err := pickProbe(serverAddr(s), names[:half], rate)
	if err != nil {
		return out, err
	}
	midway()
	_, err = pickProbe(serverAddr(s), names[half:], rate)
	return out, err
}

// pickOutage is the outage day, towerd only: packets sent to a silent
// zone with hedging on and off.
func (b *bench) pickOutage(round int) error {
	for _, c := range []struct {
		key, label, config string
	}{{"pick.outage", "hedging", ""}, {"pick.outage0", "hedge_budget = 0", "[upstream]\nhedge_budget = 0\n"}} {
		u, err := startPickUpstream(pickFirstAddr, pickFast, b.seed)
		if err != nil {
			return err
		}
		outage := func() { u.proxy.SetBlackhole(true) }
		names := pickNames(round, "towerd", "outage-"+c.key, 10*40+int(b.pickOutageLen.Seconds())*40)
		before := uint64(0)
		mark := func() { outage(); before = u.sent() }
		p, err := b.startServer("towerd", round, serverSetup{phase: "pick-outage", upstream: pickFirstAddr, cacheSize: b.cacheSize, towerdConfig: c.config})
		if err != nil {
			u.close()
			return err
		}
		_, err = pickProbe(serverAddr("towerd"), names[:400], 40)
		if err == nil {
			mark()
			_, err = pickProbe(serverAddr("towerd"), names[400:], 40)
		}
		sent := u.sent() - before
		b.procs.stop(p)
		u.close()
		if err != nil {
			return err
		}
		b.res["towerd"].add(c.key, float64(sent))
		fmt.Printf("  round %d towerd   pick outage (%s): %d packets to the silent server in %v\n", round, c.label, sent, b.pickOutageLen)
	}
	return nil
}

func (b *bench) pickRows() []row {
	return []row{
		{measure: "two servers, first slow: upstream queries to the fast one", key: "pick.fast", format: "%.1f %%"},
		{measure: "two servers: p50 ms", key: "pick.p50", format: "%.1f"},
		{measure: "two servers: p99 ms", key: "pick.p99", format: "%.1f"},
		{measure: "lossy server: NOERROR", key: "pick.lossy.ok", format: "%.2f %%"},
		{measure: "lossy server: p99 ms", key: "pick.lossy.p99", format: "%.1f"},
		{measure: "lossy server: p99 ms, all rounds pooled", key: "pick.lossy.p99all", format: "%.1f"},
		{measure: "lossy server: p99.9 ms", key: "pick.lossy.p999", format: "%.1f"},
		{measure: "lossy server: upstream queries per miss", key: "pick.lossy.up", format: "%.3f"},
		{measure: "a server turned slow left after, s", key: "pick.left", format: "%.0f"},
		{measure: "silent zone: packets in the outage (hedging)", key: "pick.outage", format: "%.0f"},
		{measure: "silent zone: packets in the outage (hedge_budget = 0)", key: "pick.outage0", format: "%.0f"},
	}
}
