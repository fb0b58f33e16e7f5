package drill

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// load is the simulated clients' side of a drill: how many, how fast,
// how patient, and which names they ask.
type load struct {
	clients int
	rate    int           // queries per second of each client
	timeout time.Duration // a client's wait for one reply; it never retries
	names   []string
	want    map[string]string // name → the A record's address in its zone
}

// outcome is one query's result as its client saw it.
type outcome struct {
	name     int           // index in load.names
	at       time.Time     // when the reply (or the client's timeout) came
	latency  time.Duration // the client timeout when no reply came
	ok       bool          // NOERROR with the zone's address
	stale    bool          // ok, and marked stale (EDE 3, RFC 8914)
	timedOut bool
	servFail bool
}

// fresh says the client got the zone's answer and not a stale one.
func (o outcome) fresh() bool { return o.ok && !o.stale }

// run makes every client ask at its fixed rate for d, or until ctx ends,
// sending name i to server(i), and returns every query's outcome and how
// long the clients asked; each, if not nil, sees every outcome as it comes
// in (one at a time). Each tick
// starts a query of its own (an open loop, as applications ask whether or
// not the last lookup came back), so a slow path cannot slow the load down
// and hide its slowness; in flight per client are at most rate × timeout
// queries, and the run ends at most one timeout after it stops asking.
func (l load) run(ctx context.Context, d time.Duration, server func(name int) string, each func(outcome)) ([]outcome, time.Duration) {
	began := time.Now()
	var mu sync.Mutex
	var out []outcome
	var queries sync.WaitGroup
	var clients sync.WaitGroup
	interval := time.Second / time.Duration(l.rate)
	perClient := int(d / interval)
	for c := range l.clients {
		clients.Add(1)
		go func() {
			defer clients.Done()
			// Clients start spread over one interval, so their ticks do
			// not all land together.
			start := time.NewTimer(interval * time.Duration(c) / time.Duration(l.clients))
			defer start.Stop()
			select {
			case <-start.C:
			case <-ctx.Done():
				return
			}
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for k := range perClient {
				name := (c + k*l.clients) % len(l.names)
				queries.Add(1)
				go func() {
					defer queries.Done()
					o := l.ask(server(name), name)
					mu.Lock()
					defer mu.Unlock()
					out = append(out, o)
					if each != nil {
						each(o)
					}
				}()
				select {
				case <-tick.C:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	clients.Wait()
	asked := time.Since(began)
	queries.Wait()
	return out, asked
}

// ask sends one query for name i with EDNS (so stale answers show their
// EDE) from a fresh socket, as a stub resolver does, and waits at most
// l.timeout.
func (l load) ask(server string, i int) outcome {
	name := l.names[i]
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.SetEdns0(1232, false)
	c := &dns.Client{Net: "udp", Timeout: l.timeout}
	start := time.Now()
	reply, _, err := c.Exchange(m, server)
	o := outcome{name: i, at: time.Now()}
	o.latency = o.at.Sub(start)
	if err != nil {
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			o.timedOut, o.latency = true, l.timeout
		}
		return o
	}
	o.servFail = reply.Rcode == dns.RcodeServerFailure
	for _, rr := range reply.Answer {
		if a, isA := rr.(*dns.A); isA && reply.Rcode == dns.RcodeSuccess && a.A.String() == l.want[name] {
			o.ok = true
		}
	}
	if opt := reply.IsEdns0(); o.ok && opt != nil {
		for _, e := range opt.Option {
			if ede, isEDE := e.(*dns.EDNS0_EDE); isEDE && ede.InfoCode == dns.ExtendedErrorCodeStaleAnswer {
				o.stale = true
			}
		}
	}
	return o
}
