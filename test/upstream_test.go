package test

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// testUpstream is an authoritative-looking DNS server on 127.0.0.1:0 (UDP
// and TCP on the same port) that answers from a small in-memory zone and
// counts the queries it gets. Switches per name make it answer NXDOMAIN or
// NODATA, hold an answer until the test releases it, or truncate over UDP.
type testUpstream struct {
	// Addr is "127.0.0.1:port", the same port for UDP and TCP.
	Addr string

	mu       sync.Mutex
	records  map[string][]dns.RR // lower-case owner name → records
	nxdomain map[string]bool
	nodata   map[string]bool
	truncate map[string]bool // over UDP: TC set, no records
	rcodes   map[string]int  // answer with this rcode and nothing else
	holds    map[string]*hold
	counts   map[countKey]int

	servers  []*dns.Server
	served   chan error    // one value per server when it stops
	stopped  chan struct{} // closed by Stop: held answers are let go
	stopOnce sync.Once
}

type countKey struct {
	name  string // lower case
	qtype uint16
	net   string // "udp" or "tcp"
}

// hold keeps the answers for one name until release is closed.
type hold struct {
	arrived     chan struct{} // closed when the first held query arrives
	arrivedOnce sync.Once
	release     chan struct{}
	releaseOnce sync.Once
}

// testSOA is the SOA of NXDOMAIN and NODATA replies: RFC 2308 negative TTL
// min(60, 60) = 60 s. Its owner is the root, which encloses every name the
// tests ask: the scrubber keeps only the SOA of a zone enclosing the
// question (issue 11).
const testSOA = ". 60 IN SOA ns.test. hostmaster.test. 1 3600 600 86400 60"

// newTestUpstream starts a server and stops it when the test ends.
func newTestUpstream(t *testing.T) *testUpstream {
	t.Helper()
	pc, l := listenSamePort(t)
	return newTestUpstreamOn(t, pc, l)
}

// newTestUpstreamOn is newTestUpstream on sockets the caller bound.
func newTestUpstreamOn(t *testing.T, pc net.PacketConn, l net.Listener) *testUpstream {
	t.Helper()
	u := &testUpstream{
		records:  map[string][]dns.RR{},
		nxdomain: map[string]bool{},
		nodata:   map[string]bool{},
		truncate: map[string]bool{},
		rcodes:   map[string]int{},
		holds:    map[string]*hold{},
		counts:   map[countKey]int{},
		served:   make(chan error, 2),
		stopped:  make(chan struct{}),
	}
	u.Addr = pc.LocalAddr().String()
	u.servers = []*dns.Server{
		{PacketConn: pc, Net: "udp", Handler: u},
		{Listener: l, Net: "tcp", Handler: u},
	}
	for _, srv := range u.servers {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() { u.served <- srv.ActivateAndServe() }()
		select {
		case <-started:
		case err := <-u.served:
			t.Fatalf("test upstream on %s: %v", u.Addr, err)
		case <-time.After(5 * time.Second):
			t.Fatalf("test upstream on %s did not start", u.Addr)
		}
	}
	t.Cleanup(u.Stop)
	return u
}

// listenSamePort binds UDP on 127.0.0.1:0 and TCP on the port it got. Another
// process may hold that TCP port, so a few fresh UDP ports are tried.
func listenSamePort(t *testing.T) (net.PacketConn, net.Listener) {
	t.Helper()
	var lastErr error
	for range 10 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, l
		}
		pc.Close()
		lastErr = err
	}
	t.Fatalf("no UDP port on 127.0.0.1 whose TCP twin was free: %v", lastErr)
	return nil, nil
}

// Stop shuts the server down; afterwards its port is closed (a query gets
// ICMP port unreachable). It is idempotent.
func (u *testUpstream) Stop() {
	u.stopOnce.Do(func() {
		close(u.stopped)
		for _, srv := range u.servers {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = srv.ShutdownContext(ctx)
			cancel()
		}
		for range u.servers {
			<-u.served
		}
	})
}

// Add puts records into the zone; each is a zone-file line such as
// "www.example. 300 IN A 192.0.2.1".
func (u *testUpstream) Add(t *testing.T, lines ...string) {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, line := range lines {
		rr, err := dns.NewRR(line)
		if err != nil {
			t.Fatalf("bad test record %q: %v", line, err)
		}
		name := strings.ToLower(rr.Header().Name)
		u.records[name] = append(u.records[name], rr)
	}
}

// SetNXDOMAIN makes the server answer NXDOMAIN for name, whatever the zone says.
func (u *testUpstream) SetNXDOMAIN(name string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.nxdomain[strings.ToLower(name)] = true
}

// SetNODATA makes the server answer NOERROR, no records, SOA in authority.
func (u *testUpstream) SetNODATA(name string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.nodata[strings.ToLower(name)] = true
}

// SetTTL changes the TTL of every record of name.
func (u *testUpstream) SetTTL(name string, ttl uint32) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, rr := range u.records[strings.ToLower(name)] {
		rr.Header().Ttl = ttl
	}
}

// SetRcode makes the server answer name with rcode (e.g. SERVFAIL) and no records.
func (u *testUpstream) SetRcode(name string, rcode int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.rcodes[strings.ToLower(name)] = rcode
}

// TruncateUDP makes UDP answers for name a bare TC reply; TCP gets the records.
func (u *testUpstream) TruncateUDP(name string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.truncate[strings.ToLower(name)] = true
}

// Hold makes queries for name wait until release is called (or the server
// stops). arrived is closed when the first of them reaches the server.
func (u *testUpstream) Hold(name string) (arrived <-chan struct{}, release func()) {
	h := &hold{arrived: make(chan struct{}), release: make(chan struct{})}
	u.mu.Lock()
	u.holds[strings.ToLower(name)] = h
	u.mu.Unlock()
	return h.arrived, func() { h.releaseOnce.Do(func() { close(h.release) }) }
}

// Count returns the queries for (name, qtype) over UDP and TCP together.
func (u *testUpstream) Count(name string, qtype uint16) int {
	return u.CountNet(name, qtype, "udp") + u.CountNet(name, qtype, "tcp")
}

// CountNet returns the queries for (name, qtype) over one transport.
func (u *testUpstream) CountNet(name string, qtype uint16, network string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.counts[countKey{strings.ToLower(dns.Fqdn(name)), qtype, network}]
}

// ServeDNS implements dns.Handler.
func (u *testUpstream) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	reply := new(dns.Msg)
	if len(r.Question) != 1 {
		reply.SetRcodeFormatError(r)
		_ = w.WriteMsg(reply)
		return
	}
	q := r.Question[0]
	name := strings.ToLower(q.Name)
	network := "udp"
	if _, ok := w.LocalAddr().(*net.TCPAddr); ok {
		network = "tcp"
	}

	u.mu.Lock()
	u.counts[countKey{name, q.Qtype, network}]++
	h := u.holds[name]
	nxdomain, nodata, truncate := u.nxdomain[name], u.nodata[name], u.truncate[name]
	rcode, failing := u.rcodes[name]
	var answer []dns.RR
	_, exists := u.records[name]
	for _, rr := range u.records[name] {
		if rr.Header().Rrtype == q.Qtype {
			answer = append(answer, dns.Copy(rr))
		}
	}
	u.mu.Unlock()

	if h != nil {
		h.arrivedOnce.Do(func() { close(h.arrived) })
		select {
		case <-h.release:
		case <-u.stopped:
			return
		}
	}

	reply.SetReply(r)
	reply.Authoritative = true
	reply.RecursionAvailable = true
	if opt := r.IsEdns0(); opt != nil {
		reply.SetEdns0(1232, opt.Do())
	}
	soa, _ := dns.NewRR(testSOA)
	switch {
	case failing:
		reply.Rcode = rcode
	case truncate && network == "udp":
		reply.Truncated = true
	case nxdomain || !exists:
		reply.Rcode = dns.RcodeNameError
		reply.Ns = []dns.RR{soa}
	case nodata || len(answer) == 0:
		reply.Ns = []dns.RR{soa}
	default:
		reply.Answer = answer
	}
	_ = w.WriteMsg(reply)
}

// spoofUpstream answers every query with forgeries first and the genuine
// reply last: a wrong ID, a wrong question name, and the right ID and
// question sent from another port. A resolver that takes the first packet
// that arrives gets a forged address.
type spoofUpstream struct {
	Addr    string
	answer  string // the genuine A record's address
	forged  string // the address every forgery carries
	pc      net.PacketConn
	other   net.PacketConn // a second socket: its replies come from the wrong port
	queries atomic.Int64
	done    chan struct{}
}

func newSpoofUpstream(t *testing.T, answer, forged string) *spoofUpstream {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	other, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		pc.Close()
		t.Fatal(err)
	}
	s := &spoofUpstream{Addr: pc.LocalAddr().String(), answer: answer, forged: forged,
		pc: pc, other: other, done: make(chan struct{})}
	go s.serve(t)
	t.Cleanup(func() {
		pc.Close()
		other.Close()
		<-s.done // ReadFrom returns once pc is closed
	})
	return s
}

func (s *spoofUpstream) serve(t *testing.T) {
	defer close(s.done)
	buf := make([]byte, 65535)
	for {
		n, from, err := s.pc.ReadFrom(buf)
		if err != nil {
			return // closed by the cleanup
		}
		q := new(dns.Msg)
		if q.Unpack(buf[:n]) != nil || len(q.Question) != 1 {
			continue
		}
		s.queries.Add(1)
		reply := func(id uint16, name, addr string) []byte {
			m := new(dns.Msg)
			m.SetReply(q)
			m.Id = id
			m.Question[0].Name = name
			rr, _ := dns.NewRR(name + " 300 IN A " + addr)
			m.Answer = []dns.RR{rr}
			wire, err := m.Pack()
			if err != nil {
				t.Errorf("packing spoofed reply: %v", err)
			}
			return wire
		}
		qname := q.Question[0].Name
		_, _ = s.pc.WriteTo(reply(q.Id+1, qname, s.forged), from)
		_, _ = s.pc.WriteTo(reply(q.Id, "evil.example.", s.forged), from)
		_, _ = s.other.WriteTo(reply(q.Id, qname, s.forged), from)
		_, _ = s.pc.WriteTo(reply(q.Id, qname, s.answer), from)
	}
}

// blackhole is a UDP socket that reads queries and never answers.
type blackhole struct {
	packets atomic.Int64
	done    chan struct{}
}

// newBlackhole binds addr (typically the port of an upstream just stopped).
func newBlackhole(t *testing.T, addr string) *blackhole {
	t.Helper()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatalf("binding black hole on %s: %v", addr, err)
	}
	b := &blackhole{done: make(chan struct{})}
	go func() {
		defer close(b.done)
		buf := make([]byte, 65535)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			b.packets.Add(1)
		}
	}()
	t.Cleanup(func() {
		pc.Close()
		<-b.done
	})
	return b
}
