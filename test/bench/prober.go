package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// probe is an open-loop UDP prober: it sends queries on a fixed schedule
// whatever comes back, so a slow answer never delays the next question (the
// closed-loop mistake that hides a server's stalls, "coordinated omission"),
// and matches each reply by socket, ID and question. A reply later than
// timeout, or none, is lost. dnsperf cannot do this: with -Q it holds queries
// back while its window (-q) is full, and it reports no percentiles.
type probe struct {
	addr     string
	names    []string // asked in turn, each as an A question
	rate     int      // queries per second
	duration time.Duration
	timeout  time.Duration
	edns     bool // send EDNS0 (1232 bytes), which stale marks need (EDE 3)
	sockets  int  // source ports the queries are spread over (unbound's reuseport hashes them)
}

// probeResult is what one probe saw. Latency runs from the query's send to
// its reply's arrival, both read in this process.
type probeResult struct {
	sent     int
	answered int // replies within the timeout, any rcode
	noerror  int // of which NOERROR with an answer
	servfail int // of which SERVFAIL
	stale    int // of which marked stale with EDE 3 (RFC 8914 §4.4)
	// ttl0 counts answers whose first record carries TTL 0: past its
	// lifetime but not marked stale (dnsmasq's use-stale-cache answers so
	// for about a second of every refresh cycle and marks only the first).
	ttl0 int
	// behind is how late the sender got against its schedule at worst: a
	// large value means the probe, not the server, was short of CPU.
	behind    time.Duration
	latencies []time.Duration // of the answered, sorted
}

// percentile by nearest rank; 0 when nothing was answered.
func (r probeResult) percentile(p float64) time.Duration {
	n := len(r.latencies)
	if n == 0 {
		return 0
	}
	i := min(n-1, max(0, int(float64(n)*p+0.999999)-1))
	return r.latencies[i]
}

func (r probeResult) maxLatency() time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	return r.latencies[len(r.latencies)-1]
}

// sentQuery is one question waiting for its reply.
type sentQuery struct {
	at   time.Time
	name string
}

// run sends rate queries a second for duration, then waits for the last
// replies: it returns once every query has had one, or timeout after the
// last was sent.
func (p probe) run() (probeResult, error) {
	if p.rate <= 0 || len(p.names) == 0 || p.sockets <= 0 {
		return probeResult{}, errors.New("probe needs a rate, names and sockets")
	}
	raddr, err := net.ResolveUDPAddr("udp", p.addr)
	if err != nil {
		return probeResult{}, err
	}
	conns := make([]*net.UDPConn, p.sockets)
	for i := range conns {
		c, err := net.DialUDP("udp", nil, raddr)
		if err != nil {
			for _, c := range conns[:i] {
				c.Close()
			}
			return probeResult{}, err
		}
		_ = c.SetReadBuffer(1 << 20)
		conns[i] = c
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()

	var (
		mu      sync.Mutex
		pending = map[uint32]sentQuery{} // socket<<16 | ID
		res     probeResult
		allSent bool                  // the schedule is over
		drained = make(chan struct{}) // closed when allSent and nothing is pending
	)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			buf := make([]byte, 4096)
			for {
				n, err := c.Read(buf)
				now := time.Now()
				if err != nil {
					if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed) {
						return
					}
					continue // ECONNREFUSED from an ICMP error: the next read may succeed
				}
				m := new(dns.Msg)
				if m.Unpack(buf[:n]) != nil || len(m.Question) != 1 {
					continue
				}
				key := uint32(i)<<16 | uint32(m.Id)
				mu.Lock()
				q, ok := pending[key]
				if ok && strings.EqualFold(q.name, m.Question[0].Name) {
					delete(pending, key)
					if lat := now.Sub(q.at); lat <= p.timeout {
						res.answered++
						res.latencies = append(res.latencies, lat)
						if m.Rcode == dns.RcodeSuccess && len(m.Answer) > 0 {
							res.noerror++
							if m.Answer[0].Header().Ttl == 0 {
								res.ttl0++
							}
						}
						if m.Rcode == dns.RcodeServerFailure {
							res.servfail++
						}
						if isStale(m) {
							res.stale++
						}
					}
					if allSent && len(pending) == 0 {
						close(drained)
					}
				}
				mu.Unlock()
			}
		})
	}

	interval := time.Second / time.Duration(p.rate)
	total := int(p.duration / interval)
	start := time.Now()
	var sendErr error
	for i := range total {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		} else {
			res.behind = max(res.behind, -d)
		}
		sock, id := i%p.sockets, uint16(i/p.sockets)
		name := p.names[i%len(p.names)]
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		m.Id = id
		if p.edns {
			m.SetEdns0(1232, false)
		}
		wire, err := m.Pack()
		if err != nil {
			sendErr = err
			break
		}
		mu.Lock()
		// An ID still pending after 65,536 sends on its socket is long
		// past the timeout: it is lost, and its key is reused.
		pending[uint32(sock)<<16|uint32(id)] = sentQuery{at: time.Now(), name: name}
		res.sent++
		mu.Unlock()
		if _, err := conns[sock].Write(wire); err != nil {
			// Counted as sent and never answered: a lost query.
			continue
		}
	}
	// Replies to the last queries have until their timeout; the probe ends
	// sooner when every query has had its reply.
	mu.Lock()
	allSent = true
	if len(pending) == 0 {
		close(drained)
	}
	mu.Unlock()
	select {
	case <-drained:
	case <-time.After(p.timeout):
	}
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now())
	}
	wg.Wait()
	if sendErr != nil {
		return res, fmt.Errorf("packing a query: %w", sendErr)
	}
	slices.Sort(res.latencies)
	return res, nil
}
