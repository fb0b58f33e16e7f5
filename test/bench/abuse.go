package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// Scenario 14, abuse (issue 35): the attacks of issue 35 on each server
// in turn, each forwarding to the same upstreams, every server with its
// limits as it comes (towerd: max_inflight 150, 256 TCP connections;
// unbound: 2 threads × num-queries-per-thread 1024, jostle-timeout 200 ms,
// incoming-num-tcp 10 per thread; dnsmasq: dns-forward-max 150,
// max-tcp-connections 20).
//
//   - in flight: 200 questions a second for random names under
//     silent.bench.example, which nobody answers, and beside them 10
//     first-time names a second of bench.example for the window, asked
//     from two seconds after the flood began (the cap is full by then).
//     Once through a shared resolver (a second unbound, on .40, whose
//     stub zone silent.bench.example points at an authoritative server on
//     .41 that reads and never answers, and which forwards the rest to
//     .42), once straight at .42, which answers every name but the
//     silent ones. Measured: of the fresh names, NOERROR, SERVFAIL,
//     other rcodes (dnsmasq's REFUSED at its cap) and no reply within 5 s
//     (a client's patience: glibc's timeout); of the flood, the share
//     answered at all within 5 s.
//   - TCP: 256 connections to the server, each with one question more
//     than it has answers for silent names (two pipelined, one more per
//     answer), upstream .42; once each has had its first answer, or after
//     5 s, 60 new TCP clients, 10 a second, each asking one first-time
//     name with 5 s to connect and be answered. Measured: how many were
//     answered NOERROR, and how many of the 256 got connected.
//
// The shared resolver is started fresh for each server, so what it
// learnt of the silent server under one never helps the next.

const (
	abuseSharedAddr = "127.0.0.40:" + port
	abuseSilentAddr = "127.0.0.41:" + port
	abuseDirectAddr = "127.0.0.42:" + port
	abuseSilentZone = "silent.bench.example."

	abuseFloodRate  = 200
	abuseFreshRate  = 10
	abuseFill       = 2 * time.Second // the flood alone, before the fresh names
	abusePatience   = 5 * time.Second // a client's wait for an answer
	abuseHogs       = 256
	abuseTCPClients = 60
)

// abuseSetups are the in-flight attack's upstream arrangements, by key.
var abuseSetups = []struct{ key, label, upstream string }{
	{"shared", "through a shared unbound", abuseSharedAddr},
	{"direct", "straight at the upstream", abuseDirectAddr},
}

// abuseUpstream answers as the synthetic upstream, except that a name
// under silent.bench.example gets nothing, over UDP or TCP.
type abuseUpstream struct {
	zone *upstreamServer
	// notA counts the questions of other types than A it answered
	// (scenario 16: what a search list's names asked ahead are).
	notA *atomic.Uint64
}

func (u abuseUpstream) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	if len(r.Question) == 1 && dns.IsSubDomain(abuseSilentZone, strings.ToLower(r.Question[0].Name)) {
		return
	}
	if len(r.Question) == 1 && r.Question[0].Qtype != dns.TypeA {
		u.notA.Add(1)
	}
	u.zone.ServeDNS(w, r)
}

// abuseServers are the scenario's in-process servers: the upstream that
// answers all but the silent names (.42) and the authoritative server that
// answers nothing (.41). They run through the whole scenario.
type abuseServers struct {
	// counts is the upstream's count of the questions it answered.
	counts     *atomic.Uint64
	notA       *atomic.Uint64
	udp, tcp   *dns.Server
	silentUDP  net.PacketConn
	silentTCP  net.Listener
	silentConn sync.WaitGroup
}

func startAbuseServers() (*abuseServers, error) {
	for _, a := range []string{abuseSharedAddr, abuseSilentAddr, abuseDirectAddr} {
		if err := addrFree(a); err != nil {
			return nil, err
		}
	}
	zone := &upstreamServer{ttl: 3600}
	h := abuseUpstream{zone: zone, notA: new(atomic.Uint64)}
	a := &abuseServers{counts: &zone.queries, notA: h.notA}
	pc, err := net.ListenPacket("udp", abuseDirectAddr)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", abuseDirectAddr)
	if err != nil {
		pc.Close()
		return nil, err
	}
	a.udp, a.tcp = &dns.Server{PacketConn: pc, Handler: h}, &dns.Server{Listener: ln, Handler: h}
	go func() { _ = a.udp.ActivateAndServe() }()
	go func() { _ = a.tcp.ActivateAndServe() }()
	if a.silentUDP, err = net.ListenPacket("udp", abuseSilentAddr); err != nil {
		a.close()
		return nil, err
	}
	if a.silentTCP, err = net.Listen("tcp", abuseSilentAddr); err != nil {
		a.close()
		return nil, err
	}
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, _, err := a.silentUDP.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	go func() {
		for {
			c, err := a.silentTCP.Accept()
			if err != nil {
				return
			}
			a.silentConn.Go(func() { _, _ = io.Copy(io.Discard, c); c.Close() })
		}
	}()
	return a, nil
}

func (a *abuseServers) close() {
	if a.udp != nil {
		_ = a.udp.Shutdown()
		_ = a.tcp.Shutdown()
	}
	if a.silentUDP != nil {
		a.silentUDP.Close()
	}
	if a.silentTCP != nil {
		a.silentTCP.Close()
	}
}

// startSharedUnbound starts the shared resolver on .40: recursion for
// silent.bench.example to the silent server, everything else forwarded to
// the upstream on .42; unbound's defaults otherwise, one thread.
func (b *bench) startSharedUnbound(round int, s string) (*proc, error) {
	conf := filepath.Join(b.dir, fmt.Sprintf("shared-unbound-%s-%d.conf", s, round))
	unbound, args, err := b.sharedUnboundConf(round, s).write(conf)
	if err != nil {
		return nil, err
	}
	logf := filepath.Join(b.dir, fmt.Sprintf("shared-unbound-%s-%d.log", s, round))
	pr, err := b.procs.start("shared-unbound", logf, unbound, args...)
	if err != nil {
		return nil, err
	}
	if err := waitAnswer(abuseSharedAddr, "ready.bench.example.", 15*time.Second); err != nil {
		b.procs.stop(pr)
		return nil, fmt.Errorf("shared unbound did not answer: %w (log: %s)", err, tail(logf))
	}
	return pr, exited(pr, logf)
}

// sharedUnboundConf is the shared resolver's configuration: the bench's
// unbound with one thread, a stub zone for the silent server and its
// control socket on.
func (b *bench) sharedUnboundConf(round int, s string) unboundConf {
	silentHost, silentPort, _ := strings.Cut(abuseSilentAddr, ":")
	return unboundConf{
		addr:    abuseSharedAddr,
		dir:     b.dir,
		threads: "\tnum-threads: 1\n",
		zones: fmt.Sprintf("stub-zone:\n\tname: %q\n\tstub-addr: %s@%s\n", abuseSilentZone, silentHost, silentPort) +
			unboundForwardZone(".", abuseDirectAddr),
		control: fmt.Sprintf("\tcontrol-enable: yes\n\tcontrol-interface: \"%s\"\n", b.sharedControl(s, round)),
	}
}

// sharedControl is the shared unbound's control socket, for its counts.
func (b *bench) sharedControl(s string, round int) string {
	return filepath.Join(b.dir, fmt.Sprintf("shared-unbound-%s-%d.ctl", s, round))
}

// sharedStats reads the shared unbound's counts: the queries it was
// asked, and those it dropped because its request list was full.
func (b *bench) sharedStats(s string, round int) (queries, dropped float64, err error) {
	ctl, err := lookPath("unbound-control")
	if err != nil {
		return 0, 0, err
	}
	conf := filepath.Join(b.dir, fmt.Sprintf("shared-unbound-%s-%d.conf", s, round))
	out, err := exec.Command(ctl, "-c", conf, "stats_noreset").Output()
	if err != nil {
		return 0, 0, fmt.Errorf("unbound-control stats: %w", err)
	}
	for line := range strings.Lines(string(out)) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		switch k {
		case "total.num.queries":
			queries, _ = strconv.ParseFloat(v, 64)
		case "total.requestlist.exceeded":
			dropped, _ = strconv.ParseFloat(v, 64)
		}
	}
	return queries, dropped, nil
}

// abuse runs the scenario's attacks on server s.
func (b *bench) abuse(round int, s string) error {
	for _, set := range abuseSetups {
		if err := b.abuseInflight(round, s, set.key, set.label, set.upstream); err != nil {
			return fmt.Errorf("%s: %w", set.key, err)
		}
	}
	return b.abuseTCP(round, s)
}

// abuseInflight is the in-flight attack on s forwarding to upstream.
func (b *bench) abuseInflight(round int, s, key, label, upstream string) error {
	if key == "shared" {
		shared, err := b.startSharedUnbound(round, s)
		if err != nil {
			return err
		}
		defer b.procs.stop(shared)
	}
	p, err := b.startServer(s, round, serverSetup{phase: "abuse-" + key, upstream: upstream, cacheSize: b.cacheSize})
	if err != nil {
		return err
	}
	defer b.procs.stop(p)
	addr := serverAddr(s)
	tag := rand.Uint32()
	floodNames := make([]string, int((abuseFill+b.abuseWindow+abusePatience).Seconds())*abuseFloodRate)
	for i := range floodNames {
		floodNames[i] = fmt.Sprintf("r%d-%x.%s", i, tag, abuseSilentZone)
	}
	freshNames := make([]string, int(b.abuseWindow.Seconds())*abuseFreshRate)
	for i := range freshNames {
		freshNames[i] = fmt.Sprintf("f%d-%x.bench.example.", i, tag)
	}
	// The flood runs on until the last fresh name has had its patience.
	flood := probe{addr: addr, names: floodNames, rate: abuseFloodRate, timeout: abusePatience, sockets: 4,
		duration: abuseFill + b.abuseWindow + abusePatience}
	var floodOut probeResult
	var floodErr error
	done := make(chan struct{})
	go func() { floodOut, floodErr = flood.run(); close(done) }()
	time.Sleep(abuseFill) // the flood's head start, a load's schedule
	fresh, err := probe{addr: addr, names: freshNames, rate: abuseFreshRate, timeout: abusePatience, sockets: 2,
		duration: b.abuseWindow}.run()
	<-done
	if err == nil {
		err = floodErr
	}
	if err != nil {
		return err
	}
	r := b.res[s]
	k := "abuse." + key
	if key == "shared" {
		queries, dropped, err := b.sharedStats(s, round)
		if err != nil {
			return err
		}
		r.add(k+".upq", queries/float64(max(fresh.sent+floodOut.sent, 1)))
		r.add(k+".dropped", dropped)
		fmt.Printf("  round %d %-8s abuse: the shared unbound was asked %.0f queries for %d, and dropped %.0f at its full request list\n",
			round, s, queries, fresh.sent+floodOut.sent, dropped)
	}
	r.add(k+".sent", float64(fresh.sent))
	r.add(k+".ok", float64(fresh.noerror))
	r.add(k+".pct", 100*float64(fresh.noerror)/float64(max(fresh.sent, 1)))
	r.add(k+".servfail", float64(fresh.servfail))
	r.add(k+".other", float64(fresh.answered-fresh.noerror-fresh.servfail))
	r.add(k+".lost", float64(fresh.sent-fresh.answered))
	r.add(k+".flood", 100*float64(floodOut.answered)/float64(max(floodOut.sent, 1)))
	fmt.Printf("  round %d %-8s abuse in flight, %s: fresh names %d of %d NOERROR (%.1f %%), %d SERVFAIL, %d other rcodes, %d no reply in %v; flood %d sent, %d answered in %v (%d SERVFAIL)\n",
		round, s, label, fresh.noerror, fresh.sent, 100*float64(fresh.noerror)/float64(max(fresh.sent, 1)),
		fresh.servfail, fresh.answered-fresh.noerror-fresh.servfail, fresh.sent-fresh.answered, abusePatience, floodOut.sent, floodOut.answered, abusePatience, floodOut.servfail)
	return nil
}

func (b *bench) abuseRows() []row {
	var rs []row
	for _, set := range abuseSetups {
		k := "abuse." + set.key
		rs = append(rs,
			row{measure: "in flight, " + set.label + ": fresh names asked", key: k + ".sent", format: "%.0f"},
			row{measure: "… answered NOERROR", key: k + ".ok", format: "%.0f"},
			row{measure: "… answered NOERROR, share", key: k + ".pct", format: "%.1f %%"},
			row{measure: "… SERVFAIL", key: k + ".servfail", format: "%.0f"},
			row{measure: "… another rcode (REFUSED at a cap)", key: k + ".other", format: "%.0f"},
			row{measure: "… no reply within 5 s", key: k + ".lost", format: "%.0f"},
			row{measure: "… flood questions answered (any rcode) within 5 s", key: k + ".flood", format: "%.1f %%"})
		if set.key == "shared" {
			rs = append(rs,
				row{measure: "… the shared unbound's queries per client question", key: k + ".upq", format: "%.2f"},
				row{measure: "… of them dropped at its full request list", key: k + ".dropped", format: "%.0f"})
		}
	}
	return append(rs,
		row{measure: fmt.Sprintf("TCP: of %d new clients, answered", abuseTCPClients), key: "abuse.tcp.ok", format: "%.0f"},
		row{measure: fmt.Sprintf("TCP: of %d hogs, connected", abuseHogs), key: "abuse.tcp.hogs", format: "%.0f"})
}
