package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/udpio"
	"github.com/towerd/towerd/test/faultproxy"
)

// The two helper servers run as child processes of the bench (the same
// binary with -serve-upstream, -serve-null or -serve-null-go), so each has its own PID whose
// CPU is read from /proc and which is stopped by that PID.

// controlName asks the synthetic upstream how many queries it has answered
// (TXT); it is never forwarded by the resolvers, the bench asks directly.
// The zone answers it on its own address (through the fault proxy, if any),
// which is how the bench knows the upstream is up; the counts are read on
// controlPort of the same host, where no fault proxy loses or counts the
// question: TXT "<answered by the zone>" "<read by the fault proxy>" (the
// second is the queries the resolver sent, lost ones included; without
// faults it equals the first).
const (
	controlName = "queries.control.bench."
	controlPort = "5301"
)

// upstreamServer answers every A question under any name with one address
// derived from the name, TTL ttl; AAAA gets NODATA; a name whose first
// label starts with "nx" gets NXDOMAIN (scenario 8). It counts queries.
type upstreamServer struct {
	ttl     uint32
	queries atomic.Uint64
	// search, for scenario 10, makes it a shared resolver behind search
	// lists: only searchZone's names exist, everything else is NXDOMAIN
	// with a negative TTL of 60 s.
	search bool
}

// searchZone are the names scenario 10's upstream knows (A only; AAAA is
// NODATA).
var searchZone = map[string]net.IP{
	"db.corp.example.":  net.IPv4(192, 0, 2, 10),
	"web.ec2.internal.": net.IPv4(192, 0, 2, 11),
}

// searchReply answers q as scenario 10's shared resolver.
func searchReply(m *dns.Msg, q dns.Question) {
	ip, exists := searchZone[strings.ToLower(q.Name)]
	if exists && q.Qtype == dns.TypeA {
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300}, A: ip}}
		return
	}
	if !exists {
		m.Rcode = dns.RcodeNameError
	}
	m.Ns = []dns.RR{&dns.SOA{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 60},
		Ns: "ns.bench.example.", Mbox: "h.bench.example.", Serial: 1, Refresh: 60, Retry: 60, Expire: 60, Minttl: 60}}
}

func (u *upstreamServer) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.RecursionAvailable = true
	if len(r.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		_ = w.WriteMsg(m)
		return
	}
	q := r.Question[0]
	if strings.EqualFold(q.Name, controlName) {
		m.Answer = []dns.RR{&dns.TXT{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeTXT, Class: dns.ClassINET},
			Txt: []string{fmt.Sprint(u.queries.Load())}}}
		_ = w.WriteMsg(m)
		return
	}
	u.queries.Add(1)
	if u.search {
		searchReply(m, q)
		_ = w.WriteMsg(m)
		return
	}
	nx := len(q.Name) > 2 && strings.EqualFold(q.Name[:2], "nx")
	if nx {
		m.Rcode = dns.RcodeNameError
	}
	if q.Qtype == dns.TypeA && !nx {
		h := fnv.New32a()
		h.Write([]byte(strings.ToLower(q.Name)))
		v := h.Sum32()
		m.Answer = []dns.RR{&dns.A{
			Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: u.ttl},
			A:   net.IPv4(10, byte(v>>16), byte(v>>8), byte(v)),
		}}
	} else {
		// The SOA of the zone every benchmark name lies in, as a real
		// upstream's negative answer carries: one of another zone is
		// dropped by towerd's scrubber (issue 11), and the answer would
		// measure that instead.
		m.Ns = []dns.RR{&dns.SOA{Hdr: dns.RR_Header{Name: "bench.example.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: u.ttl},
			Ns: "ns.bench.example.", Mbox: "h.bench.example.", Serial: 1, Refresh: 60, Retry: 60, Expire: 60, Minttl: u.ttl}}
	}
	_ = w.WriteMsg(m)
}

// serveUpstream runs the synthetic upstream on addr (UDP and TCP) until
// SIGTERM, and its counts on controlPort of the same host. With faults, the
// zone is served on a free port and the fault proxy takes addr in front of it.
func serveUpstream(addr string, ttl time.Duration, f faultproxy.Faults, seed uint64, zone string) error {
	u := &upstreamServer{ttl: uint32(ttl / time.Second), search: zone == "search"}
	// Bound first: once the zone answers, a count question waits in this
	// socket's buffer rather than meeting a closed port.
	host, _, _ := strings.Cut(addr, ":")
	cpc, err := net.ListenPacket("udp", host+":"+controlPort)
	if err != nil {
		return err
	}
	listen := addr
	faulty := f != (faultproxy.Faults{})
	if faulty {
		listen = "127.0.0.1:0"
	}
	pc, err := net.ListenPacket("udp", listen)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", pc.LocalAddr().String())
	if err != nil {
		return err
	}
	udp := &dns.Server{PacketConn: pc, Handler: u}
	tcp := &dns.Server{Listener: ln, Handler: u}
	go func() { _ = udp.ActivateAndServe() }()
	go func() { _ = tcp.ActivateAndServe() }()
	sent := u.queries.Load
	if faulty {
		p, err := faultproxy.New(faultproxy.Options{Target: pc.LocalAddr().String(), Listen: addr, Faults: f, Seed: seed})
		if err != nil {
			return err
		}
		defer p.Close()
		sent = func() uint64 { return p.Stats().Queries }
	}
	control := &dns.Server{PacketConn: cpc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if len(r.Question) != 1 || !strings.EqualFold(r.Question[0].Name, controlName) {
			m.Rcode = dns.RcodeRefused
		} else {
			m.Answer = []dns.RR{&dns.TXT{Hdr: dns.RR_Header{Name: controlName, Rrtype: dns.TypeTXT, Class: dns.ClassINET},
				Txt: []string{fmt.Sprint(u.queries.Load()), fmt.Sprint(sent())}}}
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = control.ActivateAndServe() }()
	waitForStop()
	_ = control.Shutdown()
	_ = udp.Shutdown()
	_ = tcp.Shutdown()
	return nil
}

// serveNull is the floor of the hit CPU scenario: it sends every UDP packet
// back with QR set. One thread in blocking recvfrom/sendto, no poller: two
// system calls per query and nothing else.
func serveNull(addr string) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return err
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM, 0)
	if err != nil {
		return err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}); err != nil {
		syscall.Close(fd)
		return err
	}
	go func() {
		runtime.LockOSThread()
		buf := make([]byte, 4096)
		for {
			n, from, err := syscall.Recvfrom(fd, buf, 0)
			if err != nil {
				if err == syscall.EINTR {
					continue
				}
				return
			}
			if n < 12 {
				continue
			}
			buf[2] |= 0x80
			_ = syscall.Sendto(fd, buf[:n], 0, from)
		}
	}()
	waitForStop()
	return nil // the process exits; the socket goes with it
}

// serveNullGo is scenario 15's Go floor: every UDP packet sent back with
// QR set through towerd's own reader and writer (resolver/udpio: the
// runtime's poller, recvmmsg and sendmmsg in batches), nothing else: what
// towerd's answer costs above its own I/O. On this loopback bench that is
// not only work: a server a little slower to answer wakes more often per
// answer (docs/benchmarks.md, "Against the floors").
func serveNullGo(addr string) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return err
	}
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
	if err != nil {
		return err
	}
	io, err := udpio.New(conn)
	if err != nil {
		conn.Close()
		return err
	}
	go func() {
		echo := func(n int) bool {
			for i := range n {
				pkt, from := io.Packet(i)
				if len(pkt) < 12 {
					continue
				}
				pkt[2] |= 0x80
				io.Queue(pkt, from) // sent by Flush, before the next read reuses the buffer
			}
			_ = io.Flush()
			return false
		}
		for {
			if err := io.ReadLoop(echo); errors.Is(err, net.ErrClosed) {
				return
			}
		}
	}()
	waitForStop()
	return conn.Close()
}

func waitForStop() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	<-ctx.Done()
}
