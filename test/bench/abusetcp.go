package main

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// Scenario 14's TCP attack (abuse.go): connections that always owe an
// answer hold a server's TCP slots while new clients ask.

// abuseTCP is the TCP attack on s, forwarding straight to the upstream.
func (b *bench) abuseTCP(round int, s string) error {
	p, err := b.startServer(s, round, serverSetup{phase: "abuse-tcp", upstream: abuseDirectAddr, cacheSize: b.cacheSize})
	if err != nil {
		return err
	}
	defer b.procs.stop(p)
	addr := serverAddr(s)
	tag := rand.Uint32()
	h := startHogs(addr, abuseHogs, tag)
	defer h.close()
	h.settle(abusePatience)

	var answered atomic.Int64
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / abuseFreshRate)
	for i := range abuseTCPClients {
		<-tick.C // the clients' schedule
		wg.Go(func() {
			if tcpAsk(addr, fmt.Sprintf("c%d-%x.bench.example.", i, tag), abusePatience) {
				answered.Add(1)
			}
		})
	}
	tick.Stop()
	wg.Wait()
	r := b.res[s]
	r.add("abuse.tcp.ok", float64(answered.Load()))
	r.add("abuse.tcp.hogs", float64(h.connected.Load()))
	fmt.Printf("  round %d %-8s abuse TCP: %d of %d new TCP clients answered NOERROR within %v; %d of %d hogs connected, %d had an answer before the clients came\n",
		round, s, answered.Load(), abuseTCPClients, abusePatience, h.connected.Load(), abuseHogs, h.answered.Load())
	return nil
}

// tcpAsk asks name over one new TCP connection to addr, and reports
// whether a NOERROR answer came within patience.
func tcpAsk(addr, name string, patience time.Duration) bool {
	deadline := time.Now().Add(patience)
	c, err := net.DialTimeout("tcp", addr, patience)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	dc := &dns.Conn{Conn: c}
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	if dc.WriteMsg(m) != nil {
		return false
	}
	r, err := dc.ReadMsg()
	return err == nil && r.Id == m.Id && r.Rcode == dns.RcodeSuccess && len(r.Answer) > 0
}

// hogs are TCP connections that always owe one answer: two questions for
// silent names pipelined, one more for each answer.
type hogs struct {
	mu        sync.Mutex
	conns     []net.Conn
	closed    bool // under mu: a hog connected after close closes its own
	connected atomic.Int64
	answered  atomic.Int64 // hogs that had their first answer
	ended     atomic.Int64 // hogs that are done (never connected, closed, or stopped)
	stop      chan struct{}
	wg        sync.WaitGroup
}

func startHogs(addr string, n int, tag uint32) *hogs {
	h := &hogs{stop: make(chan struct{})}
	for i := range n {
		h.wg.Go(func() {
			defer h.ended.Add(1)
			c, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if err != nil {
				return
			}
			h.mu.Lock()
			closed := h.closed
			h.conns = append(h.conns, c)
			h.mu.Unlock()
			if closed {
				c.Close()
				return
			}
			h.connected.Add(1)
			dc := &dns.Conn{Conn: c}
			ask := func(n int) error {
				m := new(dns.Msg)
				m.SetQuestion(fmt.Sprintf("h%d-%d-%x.%s", i, n, tag, abuseSilentZone), dns.TypeA)
				return dc.WriteMsg(m)
			}
			if ask(0) != nil || ask(1) != nil {
				return
			}
			for n := 2; ; n++ {
				if _, err := dc.ReadMsg(); err != nil {
					return // closed by the server, or stopped
				}
				if n == 2 {
					h.answered.Add(1)
				}
				select {
				case <-h.stop:
					return
				default:
				}
				if ask(n) != nil {
					return
				}
			}
		})
	}
	return h
}

// settle waits until every hog has had its first answer or ended, at most
// wait.
func (h *hogs) settle(wait time.Duration) {
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		if h.answered.Load()+h.ended.Load() >= abuseHogs {
			return
		}
		time.Sleep(50 * time.Millisecond) // polling counters of a load
	}
}

func (h *hogs) close() {
	close(h.stop)
	h.mu.Lock()
	h.closed = true
	for _, c := range h.conns {
		c.Close()
	}
	h.mu.Unlock()
	h.wg.Wait()
}
