package main

import (
	"bufio"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The lossy day of scenario 13 (pick.go): one server at 100 ± 50 ms
// losing 1 % of packets each way, 50 queries/s, for -pick-lossy-window
// (90 s by default, the other days' 30 s being too few). Its p99 is
// decided by the lost packets: about 2 % of exchanges (1 − 0.99²) are
// lost, so the p99 is near the middle of their answers, and it moves with
// how many were lost. At 30 s that is Binomial(1,500, 0.0199): 30 ± 5.4
// lost, and each lost packet more or fewer moves the p99's rank among
// them by about 1/30 of their spread (100 ms of jitter): ± 10 ms from the
// count alone, besides the middle of 30 draws (± 6 ms), for any server
// that retries. So the day runs longer, its p99 is also read from all
// rounds' answers pooled, printed with the 95 % interval of its rank (at
// 80 s and two rounds, 8,000 answers and some 170 lost packets, it was
// still about ± 10 ms: the p99 sits where the answers are sparse, 2 % of
// them over 100 ms), and each round says how many packets the proxy
// lost. The proxy's draws start afresh from a seed of the round's for
// each server: the servers of a round meet the same fates packet by
// packet (until a hedge or a retry shifts them), so a round's loss
// count, which moves every server's p99 alike, weighs less on their
// ratio, and the rounds draw differently (with one seed for the whole
// scenario, a server whose earlier days sent as many packets met the
// same losses each round). For towerd the round also says
// what it did: its tail estimate over the day (min, median, max of one
// reading a second, from /metrics) and its hedges sent, won and refused
// by the budget.

// pickAdmin is towerd's admin address on the lossy day.
const pickAdmin = "127.0.0.11:5301"

// pickLossyDay runs the lossy day of server s against the upstream u,
// whose faults are already pickLossy.
func (b *bench) pickLossyDay(round int, s string, u *pickUpstream) error {
	const rate = 50
	r := b.res[s]
	set := serverSetup{phase: "pick-lossy", upstream: pickFirstAddr, cacheSize: b.cacheSize}
	if s == "towerd" {
		set.admin = pickAdmin
	}
	p, err := b.startServer(s, round, set)
	if err != nil {
		return err
	}
	st0 := u.proxy.Stats()
	var m0 pickMetrics
	stop, tails := make(chan struct{}), make(chan []float64, 1)
	if s == "towerd" {
		m0, _ = scrapePick()
		go func() {
			var ts []float64
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					tails <- ts
					return
				case <-tick.C:
					if m, err := scrapePick(); err == nil && m.tail > 0 {
						ts = append(ts, m.tail)
					}
				}
			}
		}()
	}
	names := pickNames(round, s, "lossy", int(b.pickLossyWindow.Seconds())*rate)
	out, err := pickProbe(serverAddr(s), names, rate)
	var m1 pickMetrics
	var ts []float64
	if s == "towerd" {
		m1, _ = scrapePick()
		close(stop)
		ts = <-tails
	}
	b.procs.stop(p)
	if err != nil {
		return err
	}
	st := u.proxy.Stats()
	lost := (st.LostQueries - st0.LostQueries) + (st.LostReplies - st0.LostReplies)
	perMiss := float64(st.Queries-st0.Queries) / float64(max(out.sent, 1))
	answered := 100 * float64(out.noerror) / float64(max(out.sent, 1))
	r.add("pick.lossy.ok", answered)
	r.add("pick.lossy.p99", ms(out.percentile(0.99)))
	r.add("pick.lossy.p999", ms(out.percentile(0.999)))
	r.add("pick.lossy.up", perMiss)
	fmt.Printf("  round %d %-8s pick lossy: %.2f %% of %d answered NOERROR, %d packets lost, p99 %.1f ms, p99.9 %.1f ms, %.3f upstream queries per miss\n",
		round, s, answered, out.sent, lost, ms(out.percentile(0.99)), ms(out.percentile(0.999)), perMiss)
	if s == "towerd" {
		slices.Sort(ts)
		if len(ts) > 0 {
			fmt.Printf("  round %d %-8s pick lossy: tail estimate %.1f / %.1f / %.1f ms (min / median / max of %d readings); hedges sent %.0f, won %.0f, refused by the budget %.0f\n",
				round, s, 1e3*ts[0], 1e3*ts[len(ts)/2], 1e3*ts[len(ts)-1], len(ts),
				m1.sent-m0.sent, m1.won-m0.won, m1.refused-m0.refused)
		}
	}
	if b.pickLossy == nil {
		b.pickLossy = map[string][]time.Duration{}
	}
	// Of the answered, as each round's p99 (the row above says how many).
	all := append(b.pickLossy[s], out.latencies...)
	b.pickLossy[s] = all
	if round == b.rounds {
		slices.Sort(all)
		p99, lo, hi := quantileInterval(all, 0.99)
		r.add("pick.lossy.p99all", ms(p99))
		fmt.Printf("  all rounds %-6s pick lossy: p99 %.1f ms of %d queries pooled (95 %% interval of its rank: %.1f to %.1f ms)\n",
			s, ms(p99), len(all), ms(lo), ms(hi))
	}
	return nil
}

// quantileInterval is sorted's q quantile by nearest rank and the values
// at the ranks ± 1.96 standard deviations of the rank (binomial, n·q·(1−q)):
// about a 95 % interval of the true quantile, whatever the distribution.
func quantileInterval(sorted []time.Duration, q float64) (v, lo, hi time.Duration) {
	n := len(sorted)
	if n == 0 {
		return 0, 0, 0
	}
	at := func(rank float64) time.Duration {
		return sorted[min(n-1, max(0, int(math.Ceil(rank))-1))]
	}
	sd := math.Sqrt(float64(n) * q * (1 - q))
	return at(float64(n) * q), at(float64(n)*q - 1.96*sd), at(float64(n)*q + 1.96*sd)
}

// pickMetrics is what the lossy day reads of towerd's /metrics (zone ".").
type pickMetrics struct {
	tail               float64 // seconds
	sent, won, refused float64
}

func scrapePick() (pickMetrics, error) {
	var m pickMetrics
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + pickAdmin + "/metrics")
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, "{")
		if !ok {
			continue
		}
		labels, val, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			continue
		}
		switch {
		case name == "towerd_upstream_rtt_tail_seconds":
			m.tail = max(m.tail, v)
		case name == "towerd_upstream_hedges_total" && strings.Contains(labels, `event="sent"`):
			m.sent += v
		case name == "towerd_upstream_hedges_total" && strings.Contains(labels, `event="won"`):
			m.won += v
		case name == "towerd_upstream_hedges_total" && strings.Contains(labels, `event="refused"`):
			m.refused += v
		}
	}
	return m, sc.Err()
}
