package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/dnslisten"
)

// DefaultTargetTimeout bounds the wait for the target's reply to one query,
// so no goroutine of the proxy outlives a silent target by more than this.
const DefaultTargetTimeout = 5 * time.Second

// Options configure New. Target is required; the zero value of every other
// field means its documented default.
type Options struct {
	// Target is the DNS server's ip:port, spoken to over UDP and TCP.
	Target string
	// Listen is where the proxy serves, UDP and TCP on the same port;
	// "" means 127.0.0.1:0 (a free port).
	Listen string
	// Faults in force at start; SetFaults replaces them.
	Faults Faults
	// Seed seeds every random choice; log it, and a failure can be replayed.
	Seed uint64
	// TargetTimeout: see DefaultTargetTimeout; 0 means that.
	TargetTimeout time.Duration
	// CountNames keeps a count of the queries read per question name, for
	// Count. Off by default: it parses every query, and its memory grows
	// with every name asked (the bench asks millions).
	CountNames bool
}

// Proxy is a running fault proxy. Its methods are safe for concurrent use.
type Proxy struct {
	target        string
	targetTimeout time.Duration
	choose        *chooser
	n             counters
	names         *nameCounts // nil unless Options.CountNames

	pc    net.PacketConn // clients' UDP
	other net.PacketConn // the wrong source port of WrongSource forgeries
	ln    net.Listener   // clients' TCP

	ctx    context.Context // ends at Close; every wait watches it
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex // guards tcpConns and flapStop
	tcpConns map[net.Conn]struct{}
	flapStop func()
}

// counters are Stats as atomics.
type counters struct {
	queries, tcpQueries, forwarded, replies, lostQueries, lostReplies atomic.Uint64
	blackholed, duplicated, servFails, truncated                      atomic.Uint64
	wrongID, wrongQuestion, wrongSource, targetErrors                 atomic.Uint64
}

// New starts a proxy in front of o.Target. Close stops it.
func New(o Options) (*Proxy, error) {
	if o.Target == "" {
		return nil, errors.New("faultproxy: no target")
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	if o.TargetTimeout == 0 {
		o.TargetTimeout = DefaultTargetTimeout
	}
	pc, ln, err := dnslisten.Pair(o.Listen)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	other, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		pc.Close()
		ln.Close()
		return nil, fmt.Errorf("faultproxy: binding the wrong-source socket: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		target: o.Target, targetTimeout: o.TargetTimeout, choose: newChooser(o.Faults, o.Seed),
		pc: pc, other: other, ln: ln, ctx: ctx, cancel: cancel, tcpConns: map[net.Conn]struct{}{},
	}
	if o.CountNames {
		p.names = &nameCounts{counts: map[string]int{}, questions: map[question]int{}}
	}
	p.wg.Add(2)
	go p.serveUDP()
	go p.serveTCP()
	return p, nil
}

// Addr is the proxy's ip:port, the same for UDP and TCP.
func (p *Proxy) Addr() string { return p.pc.LocalAddr().String() }

// Faults returns the faults in force.
func (p *Proxy) Faults() Faults { return p.choose.get() }

// SetFaults replaces the faults in force; queries already held keep the
// fate they drew, but black-holing applies to their replies at once.
func (p *Proxy) SetFaults(f Faults) { p.choose.set(f) }

// Reseed starts the fates drawn afresh from seed, as New with Seed does:
// a bench that asks several servers in turn gives each the same draws.
func (p *Proxy) Reseed(seed uint64) { p.choose.reseed(seed) }

// SetBlackhole turns total black-holing on or off, leaving the other faults.
func (p *Proxy) SetBlackhole(on bool) { p.choose.setBlackhole(on) }

// Stats returns the counts so far.
func (p *Proxy) Stats() Stats {
	n := &p.n
	return Stats{
		Queries: n.queries.Load(), TCPQueries: n.tcpQueries.Load(), Forwarded: n.forwarded.Load(),
		Replies: n.replies.Load(), LostQueries: n.lostQueries.Load(), LostReplies: n.lostReplies.Load(),
		Blackholed: n.blackholed.Load(), Duplicated: n.duplicated.Load(), ServFails: n.servFails.Load(),
		Truncated: n.truncated.Load(), WrongID: n.wrongID.Load(), WrongQuestion: n.wrongQuestion.Load(),
		WrongSource: n.wrongSource.Load(), TargetErrors: n.targetErrors.Load(),
	}
}

// Count returns how many queries for name (any type, UDP and TCP, lost ones
// included) the proxy has read; always 0 unless Options.CountNames is set.
// Names compare without regard to case or a final dot.
func (p *Proxy) Count(name string) int {
	if p.names == nil {
		return 0
	}
	p.names.mu.Lock()
	defer p.names.mu.Unlock()
	return p.names.counts[strings.ToLower(dns.Fqdn(name))]
}

// CountQuestion is Count for one question type.
func (p *Proxy) CountQuestion(name string, qtype uint16) int {
	if p.names == nil {
		return 0
	}
	p.names.mu.Lock()
	defer p.names.mu.Unlock()
	return p.names.questions[question{strings.ToLower(dns.Fqdn(name)), qtype}]
}

// nameCounts are the queries read per lower-case question name, and per
// name and type.
type nameCounts struct {
	mu        sync.Mutex
	counts    map[string]int
	questions map[question]int
}

type question struct {
	name  string
	qtype uint16
}

// read counts one query as it arrives, before any fault is applied; a query
// that does not parse, or asks not exactly one question, is not counted.
func (p *Proxy) read(query []byte) {
	p.n.queries.Add(1)
	if p.names == nil {
		return
	}
	var m dns.Msg
	if m.Unpack(query) != nil || len(m.Question) != 1 {
		return
	}
	name := strings.ToLower(m.Question[0].Name)
	p.names.mu.Lock()
	p.names.counts[name]++
	p.names.questions[question{name, m.Question[0].Qtype}]++
	p.names.mu.Unlock()
}

// Flap black-holes the target for down, lets it through for up, and so on
// until the returned stop is called (or Close), which leaves it up. It
// starts with down. A second Flap replaces the first.
func (p *Proxy) Flap(down, up time.Duration) (stop func()) {
	p.mu.Lock()
	prev := p.flapStop
	p.mu.Unlock()
	if prev != nil {
		prev()
	}
	quit, finished := make(chan struct{}), make(chan struct{})
	p.SetBlackhole(true)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(finished)
		defer p.SetBlackhole(false)
		timer := time.NewTimer(down)
		defer timer.Stop()
		for holed := true; ; holed = !holed {
			select {
			case <-timer.C:
			case <-quit:
				return
			case <-p.ctx.Done():
				return
			}
			p.SetBlackhole(!holed)
			if holed {
				timer.Reset(up)
			} else {
				timer.Reset(down)
			}
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() { close(quit) })
		<-finished
	}
	p.mu.Lock()
	p.flapStop = stop
	p.mu.Unlock()
	return stop
}

// Close stops serving, abandons every held query and waits for all of the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.cancel()
	err := errors.Join(p.pc.Close(), p.ln.Close(), p.other.Close())
	p.mu.Lock()
	for c := range p.tcpConns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// hold waits out a query's delay; false means the proxy is closing.
func (p *Proxy) hold(d time.Duration) bool {
	if d <= 0 {
		return p.ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.ctx.Done():
		return false
	}
}

// localReply builds the proxy's own answer to a query: SERVFAIL or an empty
// truncated reply.
func localReply(query []byte, servFail bool) []byte {
	var q dns.Msg
	if q.Unpack(query) != nil {
		return nil
	}
	m := new(dns.Msg)
	m.SetReply(&q)
	if servFail {
		m.Rcode = dns.RcodeServerFailure
	} else {
		m.Truncated = true
	}
	wire, _ := m.Pack()
	return wire
}

// forge turns a genuine reply into a forgery: A records point at
// ForgedAddr, and the ID or the question name change as asked.
func forge(genuine []byte, wrongID, wrongQuestion bool) []byte {
	var m dns.Msg
	if m.Unpack(genuine) != nil {
		return nil
	}
	for _, rr := range m.Answer {
		if a, ok := rr.(*dns.A); ok {
			a.A = net.ParseIP(ForgedAddr)
		}
	}
	if wrongID {
		m.Id++
	}
	if wrongQuestion && len(m.Question) == 1 {
		const other = "forged-question.invalid."
		for _, rr := range m.Answer {
			rr.Header().Name = other
		}
		m.Question[0].Name = other
	}
	wire, _ := m.Pack()
	return wire
}
