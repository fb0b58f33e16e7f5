package test

import (
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// slowDNS is a UDP proxy in front of a DNS server that delays every query
// by a random time in [delay-jitter, delay+jitter] and drops a fraction of
// the packets in each direction: the jittery, lossy Consul DNS towerd is
// built to outlive. Its random choices come from a seed the test logs, so a
// failure can be replayed. It counts the queries it forwards by name.
type slowDNS struct {
	// Addr is the proxy's 127.0.0.1:port.
	Addr string

	target        string
	delay, jitter time.Duration
	loss          float64

	pc      net.PacketConn
	mu      sync.Mutex
	rng     *rand.Rand
	counts  map[string]int // lower-case question name → queries forwarded
	dropped atomic.Int64
	wg      sync.WaitGroup
	done    chan struct{}
}

func newSlowDNS(t *testing.T, target string, delay, jitter time.Duration, loss float64, seed uint64) *slowDNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &slowDNS{
		Addr: pc.LocalAddr().String(), target: target, delay: delay, jitter: jitter, loss: loss,
		pc: pc, rng: rand.New(rand.NewPCG(seed, seed)), counts: map[string]int{}, done: make(chan struct{}),
	}
	t.Logf("slow DNS proxy %s → %s: %v ± %v, %.1f%% loss each way, seed %d",
		p.Addr, target, delay, jitter, loss*100, seed)
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		close(p.done)
		pc.Close()
		p.wg.Wait()
	})
	return p
}

// fate draws whether a packet is lost and how long it is held.
func (p *slowDNS) fate() (lost bool, hold time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	lost = p.rng.Float64() < p.loss
	hold = p.delay - p.jitter + time.Duration(p.rng.Int64N(int64(2*p.jitter)+1))
	return lost, hold
}

func (p *slowDNS) serve() {
	defer p.wg.Done()
	buf := make([]byte, 65535)
	for {
		n, from, err := p.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		packet := append([]byte(nil), buf[:n]...)
		var m dns.Msg
		if m.Unpack(packet) == nil && len(m.Question) == 1 {
			p.mu.Lock()
			p.counts[strings.ToLower(m.Question[0].Name)]++
			p.mu.Unlock()
		}
		lost, hold := p.fate()
		if lost {
			p.dropped.Add(1)
			continue
		}
		p.wg.Add(1)
		go p.forward(packet, from, hold)
	}
}

// forward holds the query (the injected delay), asks the target from a
// fresh socket and relays the reply, unless the reply is lost too.
func (p *slowDNS) forward(packet []byte, from net.Addr, hold time.Duration) {
	defer p.wg.Done()
	select {
	case <-time.After(hold):
	case <-p.done:
		return
	}
	conn, err := net.Dial("udp", p.target)
	if err != nil {
		return
	}
	defer conn.Close()
	if _, err := conn.Write(packet); err != nil {
		return
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 65535)
	n, err := conn.Read(buf)
	if err != nil {
		return
	}
	if lost, _ := p.fate(); lost {
		p.dropped.Add(1)
		return
	}
	_, _ = p.pc.WriteTo(buf[:n], from)
}

// Count returns how many queries for name reached the proxy.
func (p *slowDNS) Count(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[strings.ToLower(dns.Fqdn(name))]
}

// Total returns how many queries reached the proxy.
func (p *slowDNS) Total() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	total := 0
	for _, n := range p.counts {
		total += n
	}
	return total
}
