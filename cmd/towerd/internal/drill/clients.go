package drill

import (
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// load is the simulated clients' side of a drill: how many, how fast,
// how patient, and which names they ask.
type load struct {
	clients  int
	rate     int           // queries per second of each client
	duration time.Duration // of each path
	timeout  time.Duration // a client's wait for one reply; it never retries
	names    []string
	want     map[string]string // name → the A record's address in the zone
}

// outcome is one query's result as its client saw it.
type outcome struct {
	latency  time.Duration // the client timeout when no reply came
	ok       bool          // NOERROR with the zone's address
	stale    bool          // ok, and marked stale (EDE 3, RFC 8914)
	timedOut bool
	servFail bool
}

// run makes every client ask at its fixed rate for l.duration and returns
// every query's outcome. Each tick starts a query of its own (an open loop,
// as applications ask whether or not the last lookup came back), so a slow
// path cannot slow the load down and hide its slowness; in flight per client
// are at most rate × timeout queries, and the run ends at most one timeout
// after the duration.
func (l load) run(server string) []outcome {
	var mu sync.Mutex
	var out []outcome
	var queries sync.WaitGroup
	var clients sync.WaitGroup
	interval := time.Second / time.Duration(l.rate)
	perClient := int(l.duration / interval)
	for c := range l.clients {
		clients.Add(1)
		go func() {
			defer clients.Done()
			// Clients start spread over one interval, so their ticks do
			// not all land together.
			start := time.NewTimer(interval * time.Duration(c) / time.Duration(l.clients))
			<-start.C
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for k := range perClient {
				name := l.names[(c+k*l.clients)%len(l.names)]
				queries.Add(1)
				go func() {
					defer queries.Done()
					o := l.ask(server, name)
					mu.Lock()
					out = append(out, o)
					mu.Unlock()
				}()
				<-tick.C
			}
		}()
	}
	clients.Wait()
	queries.Wait()
	return out
}

// ask sends one query with EDNS (so stale answers show their EDE) from a
// fresh socket, as a stub resolver does, and waits at most l.timeout.
func (l load) ask(server, name string) outcome {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.SetEdns0(1232, false)
	c := &dns.Client{Net: "udp", Timeout: l.timeout}
	start := time.Now()
	reply, _, err := c.Exchange(m, server)
	o := outcome{latency: time.Since(start)}
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

// pathSummary is one row of the drill's table.
type pathSummary struct {
	label                           string
	queries, ok, timeouts, servfail int
	other, stale                    int
	p50, p99, max                   time.Duration
	successPercent                  float64
}

func summarizePath(label string, outs []outcome) pathSummary {
	s := pathSummary{label: label, queries: len(outs)}
	lat := make([]time.Duration, 0, len(outs))
	for _, o := range outs {
		lat = append(lat, o.latency)
		switch {
		case o.ok:
			s.ok++
			if o.stale {
				s.stale++
			}
		case o.timedOut:
			s.timeouts++
		case o.servFail:
			s.servfail++
		default:
			s.other++
		}
	}
	if s.queries > 0 {
		s.successPercent = 100 * float64(s.ok) / float64(s.queries)
		slices.Sort(lat)
		s.p50, s.p99, s.max = percentile(lat, 50), percentile(lat, 99), lat[len(lat)-1]
	}
	return s
}

// percentile of sorted values, nearest rank.
func percentile(sorted []time.Duration, p int) time.Duration {
	rank := (len(sorted)*p + 99) / 100
	return sorted[max(rank, 1)-1]
}

// formatLatency prints a latency so that time.ParseDuration reads it back.
func formatLatency(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

func printTable(w io.Writer, rows ...pathSummary) {
	fmt.Fprintf(w, "%-16s %8s %9s %10s %10s %10s %9s %9s %6s %6s\n",
		"path", "queries", "success", "p50", "p99", "max", "timeouts", "servfail", "other", "stale")
	for _, r := range rows {
		fmt.Fprintf(w, "%-16s %8d %8.3f%% %10s %10s %10s %9d %9d %6d %6d\n",
			r.label, r.queries, r.successPercent, formatLatency(r.p50), formatLatency(r.p99),
			formatLatency(r.max), r.timeouts, r.servfail, r.other, r.stale)
	}
}
