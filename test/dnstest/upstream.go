package dnstest

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Upstream is a DNS server on 127.0.0.1 (UDP and TCP on one port) that a
// test scripts: it answers from a small zone the test fills (Add) or from a
// Script, misbehaves per name (SetFault, Hold), and counts every query by
// name, type and transport. Each server has its own handler, never miekg's
// global mux, so tests running in parallel do not share answers. Its
// methods are safe for concurrent use.
type Upstream struct {
	// Addr is "127.0.0.1:port", the same port for UDP and TCP.
	Addr string

	mu      sync.Mutex
	records map[string][]dns.RR // lower-case owner name → records
	script  Script
	faults  map[string]Fault // lower-case name → its fault
	holds   map[string]*hold
	counts  map[countKey]int
	waits   []*wait // Arrived
	answers []*wait // Answered

	servers  []*dns.Server
	served   chan error    // one value per server when it stops
	stopped  chan struct{} // closed by Stop: held and delayed answers are let go
	stopOnce sync.Once
}

// Script answers one query in place of the zone: it returns the reply to
// send, or nil to send none. network is "udp" or "tcp". It runs on the
// server's goroutine, so it reports with t.Errorf, never t.Fatal; one that
// blocks must also watch Stopped.
type Script func(q *dns.Msg, network string) *dns.Msg

// Fault is how the server misbehaves for one name. The zero value is none.
// Hold comes first, then Drop, then Delay, then the answer.
type Fault struct {
	// Drop reads and counts the query and never answers it.
	Drop bool
	// Delay holds the answer this long (the fault under test, never a way to
	// order events; Stop cuts it short).
	Delay time.Duration
	// Rcode, when not 0 (NOERROR), is the answer's rcode, with no records.
	Rcode int
	// TruncateUDP answers over UDP with TC set and no records; TCP is
	// answered as usual.
	TruncateUDP bool
	// NXDOMAIN and NODATA answer so with the zone's SOA (TestSOA), whatever
	// the zone or the Script would say.
	NXDOMAIN, NODATA bool
}

// TestSOA is the SOA of the zone's negative answers: RFC 2308 negative TTL
// min(60, 60) = 60 s. Its owner is the root, which encloses every name the
// tests ask: the scrubber keeps only the SOA of a zone enclosing the
// question (issue 11).
const TestSOA = ". 60 IN SOA ns.test. hostmaster.test. 1 3600 600 86400 60"

type countKey struct {
	name    string // lower case
	qtype   uint16
	network string
}

// hold keeps the answers for one name until release is closed.
type hold struct {
	arrived     chan struct{} // closed when the first held query arrives
	arrivedOnce sync.Once
	release     chan struct{}
	releaseOnce sync.Once
}

// wait is one Arrived call: ch closes once left more queries for name came.
type wait struct {
	name string
	left int
	ch   chan struct{}
}

// NewUpstream starts a server with an empty zone on a free port and stops
// it when the test ends.
func NewUpstream(t testing.TB) *Upstream {
	t.Helper()
	pc, ln := ListenPair(t)
	return NewUpstreamOn(t, pc, ln)
}

// NewUpstreamOn is NewUpstream on sockets the caller bound (for a fixed
// address, or a port known before the server starts). Either may be nil to
// serve one transport only.
func NewUpstreamOn(t testing.TB, pc net.PacketConn, ln net.Listener) *Upstream {
	t.Helper()
	u := &Upstream{
		records: map[string][]dns.RR{},
		faults:  map[string]Fault{},
		holds:   map[string]*hold{},
		counts:  map[countKey]int{},
		stopped: make(chan struct{}),
	}
	if pc != nil {
		u.Addr = pc.LocalAddr().String()
		u.servers = append(u.servers, &dns.Server{PacketConn: pc, Net: "udp", Handler: u})
	}
	if ln != nil {
		u.Addr = ln.Addr().String()
		u.servers = append(u.servers, &dns.Server{Listener: ln, Net: "tcp", Handler: u})
	}
	u.served = make(chan error, len(u.servers))
	for _, srv := range u.servers {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() { u.served <- srv.ActivateAndServe() }()
		select {
		case <-started:
		case err := <-u.served:
			t.Fatalf("test upstream on %s: %v", u.Addr, err)
		}
	}
	t.Cleanup(u.Stop)
	return u
}

// Stop shuts the server down and returns once it has: afterwards its port
// is closed (a UDP query meets ICMP port unreachable). Held and delayed
// answers are abandoned. It is idempotent and runs at the test's end.
func (u *Upstream) Stop() {
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

// Stopped is closed when Stop begins; a Script that blocks watches it.
func (u *Upstream) Stopped() <-chan struct{} { return u.stopped }

// Add puts records into the zone; each is a zone-file line such as
// "www.example. 300 IN A 192.0.2.1".
func (u *Upstream) Add(t testing.TB, lines ...string) {
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

// SetTTL changes the TTL of every record of name in the zone.
func (u *Upstream) SetTTL(name string, ttl uint32) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, rr := range u.records[canonical(name)] {
		rr.Header().Ttl = ttl
	}
}

// SetScript makes s answer every query in place of the zone; nil goes back
// to the zone. Faults still apply first.
func (u *Upstream) SetScript(s Script) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.script = s
}

// SetFault sets name's fault, replacing any before; Fault{} clears it.
func (u *Upstream) SetFault(name string, f Fault) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.faults[canonical(name)] = f
}

// Hold makes queries for name wait until release is called (or the server
// stops). arrived is closed when the first of them reaches the server.
func (u *Upstream) Hold(name string) (arrived <-chan struct{}, release func()) {
	h := &hold{arrived: make(chan struct{}), release: make(chan struct{})}
	u.mu.Lock()
	u.holds[canonical(name)] = h
	u.mu.Unlock()
	return h.arrived, func() { h.releaseOnce.Do(func() { close(h.release) }) }
}

// Arrived returns a channel that is closed once n more queries for name
// (any type, either transport) have reached the server after the call.
func (u *Upstream) Arrived(name string, n int) <-chan struct{} { return u.await(&u.waits, name, n) }

// Answered returns a channel that is closed once n more replies for name
// have been written after the call: what a test waits on before it asks
// something that depends on a late reply having been sent.
func (u *Upstream) Answered(name string, n int) <-chan struct{} {
	return u.await(&u.answers, name, n)
}

// await adds a wait for n more events of name to list (Arrived's or
// Answered's).
func (u *Upstream) await(list *[]*wait, name string, n int) <-chan struct{} {
	w := &wait{name: canonical(name), left: n, ch: make(chan struct{})}
	if n <= 0 {
		close(w.ch)
		return w.ch
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	*list = append(*list, w)
	return w.ch
}

// Count returns the queries for (name, qtype) over UDP and TCP together.
func (u *Upstream) Count(name string, qtype uint16) int {
	return u.CountNet(name, qtype, "udp") + u.CountNet(name, qtype, "tcp")
}

// CountNet returns the queries for (name, qtype) over network ("udp" or
// "tcp").
func (u *Upstream) CountNet(name string, qtype uint16, network string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.counts[countKey{canonical(name), qtype, network}]
}

// Total returns every query the server has read.
func (u *Upstream) Total() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	total := 0
	for _, n := range u.counts {
		total += n
	}
	return total
}

// canonical is how names are keyed: fully qualified, lower case.
func canonical(name string) string { return strings.ToLower(dns.Fqdn(name)) }

// ServeDNS implements dns.Handler: count, apply the name's fault, answer.
func (u *Upstream) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	if len(r.Question) != 1 {
		reply := new(dns.Msg)
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
	u.waits = arrive(u.waits, name)
	h, f, script := u.holds[name], u.faults[name], u.script
	u.mu.Unlock()

	if h != nil {
		h.arrivedOnce.Do(func() { close(h.arrived) })
		select {
		case <-h.release:
		case <-u.stopped:
			return
		}
	}
	if f.Drop {
		return
	}
	if f.Delay > 0 {
		t := time.NewTimer(f.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-u.stopped:
			return
		}
	}
	reply := u.faultReply(r, f, network)
	switch {
	case reply != nil:
	case script != nil:
		reply = script(r, network)
	default:
		reply = u.fromZone(r)
	}
	if reply != nil {
		_ = w.WriteMsg(reply)
		u.mu.Lock()
		u.answers = arrive(u.answers, name)
		u.mu.Unlock()
	}
}

// arrive counts one query (or reply) for name against every wait, closing and dropping
// the ones it completes.
func arrive(waits []*wait, name string) []*wait {
	kept := waits[:0]
	for _, w := range waits {
		if w.name == name {
			w.left--
		}
		if w.left == 0 {
			close(w.ch)
			continue
		}
		kept = append(kept, w)
	}
	return kept
}

// faultReply is the answer f makes in place of the zone's or the Script's,
// or nil when f leaves the answer alone.
func (u *Upstream) faultReply(r *dns.Msg, f Fault, network string) *dns.Msg {
	reply := u.reply(r)
	soa, _ := dns.NewRR(TestSOA)
	switch {
	case f.Rcode != dns.RcodeSuccess:
		reply.Rcode = f.Rcode
	case f.TruncateUDP && network == "udp":
		reply.Truncated = true
	case f.NXDOMAIN:
		reply.Rcode = dns.RcodeNameError
		reply.Ns = []dns.RR{soa}
	case f.NODATA:
		reply.Ns = []dns.RR{soa}
	default:
		return nil
	}
	return reply
}

// reply is the empty reply the zone and the faults start from: an
// authoritative server offering recursion, EDNS answered with 1232 bytes
// (the DNS flag day 2020 size) and the query's DO bit.
func (u *Upstream) reply(r *dns.Msg) *dns.Msg {
	reply := new(dns.Msg)
	reply.SetReply(r)
	reply.Authoritative = true
	reply.RecursionAvailable = true
	if opt := r.IsEdns0(); opt != nil {
		reply.SetEdns0(1232, opt.Do())
	}
	return reply
}

// FromZone is the zone's answer to r, for a Script that does something
// before it (logs, waits): what the server sends when no Script is set.
func (u *Upstream) FromZone(r *dns.Msg) *dns.Msg { return u.fromZone(r) }

// fromZone answers from the records Add put in: the name's records of the
// asked type, NODATA when it has none of that type, NXDOMAIN when it has
// none at all (both with TestSOA).
func (u *Upstream) fromZone(r *dns.Msg) *dns.Msg {
	q := r.Question[0]
	name := strings.ToLower(q.Name)
	u.mu.Lock()
	records, exists := u.records[name]
	var answer []dns.RR
	for _, rr := range records {
		if rr.Header().Rrtype == q.Qtype {
			answer = append(answer, dns.Copy(rr))
		}
	}
	u.mu.Unlock()
	reply := u.reply(r)
	soa, _ := dns.NewRR(TestSOA)
	switch {
	case !exists:
		reply.Rcode = dns.RcodeNameError
		reply.Ns = []dns.RR{soa}
	case len(answer) == 0:
		reply.Ns = []dns.RR{soa}
	default:
		reply.Answer = answer
	}
	return reply
}
