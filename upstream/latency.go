package upstream

import (
	"math"
	"math/rand/v2"
	"time"
)

// Which server is asked first is decided by measured latency (issue 36),
// health (up or down) stays silence's (silence.go): among the servers that
// are up, the one with the lowest smoothed RTT is asked, and the order in
// the configuration only breaks ties. Unbound keeps srtt and rttvar per
// server and picks at random within 400 ms of the best (iterator.h,
// RTT_BAND, made for authoritative servers far apart); Knot Resolver
// asks the fastest and explores another in a few percent of queries
// (lib/selection.c). towerd asks the fastest, counts a server within an
// eighth of the best (at least tieBand) as tied with it, so equal servers
// keep the listed order, and explores: exploreShare of resolutions also
// ask another up server, at random, at the same time as the fastest, so a
// server that became fast again is found (its answer wins, and is
// measured). An exploration costs a client nothing, since the fastest is
// asked as always, and costs the site one packet, paid from the hedge
// budget (hedge.go).
//
// The estimates come from every reply (RFC 6298's srtt and rttvar, which
// also make the RTO, health.go) and, for srtt and rttvar only, from every
// attempt another server's answer left waiting: its server took at least
// that long (addLowerBound). A fast server that turns slow has its
// replies overtaken by hedges, so without the bound it would never be
// measured slow, and never left. The tail estimate follows replies only:
// it says when a reply that is coming has most likely come, so that what
// is later than it, a lost packet most of all, is hedged. Fed the waits of
// lost packets it would be the quantile of a distribution with the loss
// rate's weight at infinity: at 2 % loss, a 0.98 quantile with no bound,
// held at the RTO by its clamp, where no hedge goes out (issue 36's lossy
// day, measured: a tail of 190-240 ms for replies whose p98 is 148 ms).

const (
	// exploreShare is the share of resolutions that also ask a server
	// other than the fastest, when more than one is up (Knot's is 5 %).
	exploreShare = 0.02
	// tieBand is the least difference in srtt that makes one server
	// faster than another: below it, jitter would reorder equal servers.
	tieBand = 500 * time.Microsecond
	// tailQuantile is the share of replies expected by the tail estimate;
	// the hedge goes out once a reply is later than that (with loss, the
	// lost packets are among those later). Each reply later than it costs
	// a packet more: 2 % here, and 4 % with exploreShare's 2 %, within
	// the budget's 5 % (hedge.go). The 95th of "The Tail at Scale" would cost 5 %, over
	// the budget with exploring, and for a bounded spread such as
	// 100 ± 50 ms hedge only 3 ms earlier (145 against 148 ms); see
	// docs/resolving.md.
	tailQuantile = 0.98
	// tailWindow is how many of a server's latest replies its tail
	// estimate is read from (addTailLocked).
	tailWindow = 128
	// tailTopRoom holds the largest RTTs of a window down to the tail's
	// rank: tailWindow·(1-tailQuantile), rounded up, and one spare.
	tailTopRoom = 4
	// minHedgeDelay is the earliest a hedge goes out: below it a hedge
	// races the scheduler, not the server.
	minHedgeDelay = time.Millisecond
)

// addTailLocked adds one reply's RTT to the server's last tailWindow
// and sets the tail estimate to their tailQuantile: the
// ceil(tailQuantile·n)-th smallest of the n held (of 128, the third
// largest; of fewer than 50, the largest, and at least srtt + 2·rttvar).
// A window, not a stochastic tracker: measured on the lossy day under
// load, a tracker whose step followed rttvar leapt half a second on one stall of the machine and
// took a thousand replies to come down (its down step is 2 % of its up
// step), with no hedge going out meanwhile; a window forgets a stall
// after tailWindow replies, and no two stalled replies move the
// estimate. The estimate is kept as replies come, so reading it costs
// nothing; once the window is full, a reply that is below it and takes
// the place of one below it leaves it as it is (the RTTs at or above it
// are the same), and only the others, about one in twenty, look through
// the window again for its largest few.
func (s *server) addTailLocked(rtt time.Duration) {
	out := s.tailRing[s.tailNext]
	full := s.tailHeld == tailWindow
	s.tailRing[s.tailNext] = rtt
	s.tailNext = (s.tailNext + 1) % tailWindow
	if full && out < s.tailQ && rtt < s.tailQ {
		return
	}
	s.tailHeld = min(s.tailHeld+1, tailWindow)
	// k is the estimate's rank from the top: the number of held RTTs at
	// or above it.
	k := s.tailHeld - int(math.Ceil(tailQuantile*float64(s.tailHeld))) + 1
	var top [tailTopRoom]time.Duration // descending; top[k-1] is the estimate
	for _, d := range s.tailRing[:s.tailHeld] {
		if d <= top[k-1] {
			continue // most of them: one comparison
		}
		i := k - 1
		for ; i > 0 && d > top[i-1]; i-- {
			top[i] = top[i-1]
		}
		top[i] = d
	}
	s.tailQ = top[k-1]
	s.tail = s.tailQ
	if k == 1 {
		// Too few replies to read a quantile from (the largest of n is
		// about the n/(n+1) quantile): not below srtt + 2·rttvar, the
		// estimate a server starts with.
		s.tail = max(s.tail, s.srtt+2*s.rttvar)
	}
}

// tailLocked is the server's tail estimate: the window's quantile, never
// below srtt nor above srtt + 4·rttvar (the RTO before its floor and
// backoff); 0 before the first sample.
func (s *server) tailLocked() time.Duration {
	if !s.sampled {
		return 0
	}
	return min(max(s.tail, s.srtt), s.srtt+4*s.rttvar)
}

// addLowerBound folds in what an attempt still waiting when another
// server's answer ended its resolution says: its server's RTT is at least
// waited. Only a bound above srtt moves srtt and rttvar (which the choice
// and the RTO read); the tail estimate is the replies' (above); it resets
// no backoff, and health never hears of it (the server did not reply).
func (s *server) addLowerBound(waited time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.sampled {
		return
	}
	if waited > s.srtt {
		s.rttvar = (3*s.rttvar + waited - s.srtt) / 4
		s.srtt = (7*s.srtt + waited) / 8
	}
}

// estimate is a server's latency as the choice reads it.
type estimate struct {
	srtt, tail time.Duration
	sampled    bool
}

func (s *server) estimate() estimate {
	s.mu.Lock()
	defer s.mu.Unlock()
	return estimate{srtt: s.srtt, tail: s.tailLocked(), sampled: s.sampled}
}

// ranked is a resolution's order of servers and what it knows of the
// first one's timing.
type ranked struct {
	order []*server
	// hedgeAfter is how long the first attempt is given before the hedge
	// (hedge.go): the tail estimate of the fastest server, 0 when it has
	// none yet (no hedge before the first sample).
	hedgeAfter time.Duration
	// explored: order[1] is an exploration, asked at once beside the
	// fastest, order[0]; its budget token is taken.
	explored bool
}

// rank orders the usable servers for one resolution into dst: the
// fastest first (ties to the configured order), the rest by srtt; a
// server never sampled counts as fastest, so each is measured once (the
// one asked least first: a slow first server does not take every query
// until its first reply). With
// probability exploreShare, when more than one server is up and the
// hedge budget has a token for it (taken), another up server, at random,
// goes second, to be asked at once.
func (g *Group) rank(dst []*server) ranked {
	usable := g.usable()
	dst = append(dst[:0], usable...)
	if len(dst) == 1 {
		e := dst[0].estimate()
		return ranked{order: dst, hedgeAfter: e.tail}
	}
	est := make([]estimate, 0, 8)
	for _, s := range dst {
		est = append(est, s.estimate())
	}
	score := func(e estimate) time.Duration {
		if !e.sampled {
			return 0
		}
		return e.srtt
	}
	// Insertion sort by score, stable: the usual list is two or three.
	for i := 1; i < len(dst); i++ {
		for j := i; j > 0 && score(est[j]) < score(est[j-1]); j-- {
			dst[j], dst[j-1] = dst[j-1], dst[j]
			est[j], est[j-1] = est[j-1], est[j]
		}
	}
	// The first in configured order among those tied with the fastest
	// leads; dst is sorted, so the tied are a prefix. Among servers never
	// sampled, the one asked least leads.
	best := score(est[0])
	band := best + max(best/8, tieBand)
	lead := 0
	for i := 1; i < len(dst) && score(est[i]) <= band; i++ {
		if !est[0].sampled && !est[i].sampled {
			if qi, ql := dst[i].queries.Load(), dst[lead].queries.Load(); qi != ql {
				if qi < ql {
					lead = i
				}
				continue
			}
		}
		if g.index(dst[i]) < g.index(dst[lead]) {
			lead = i
		}
	}
	dst[0], dst[lead] = dst[lead], dst[0]
	est[0], est[lead] = est[lead], est[0]
	r := ranked{order: dst, hedgeAfter: est[0].tail}
	// Two servers up, not two usable: when none is up, usable is every
	// server, and exploring would add packets to an outage.
	if g.roll() < exploreShare && est[0].sampled && len(g.healthy()) > 1 && g.budget.take() {
		i := 1 + int(g.roll()*float64(len(dst)-1))
		i = min(i, len(dst)-1)
		other := dst[i]
		copy(dst[2:i+1], dst[1:i])
		dst[1] = other
		r.explored = true
	}
	return r
}

// index is s's position in the configuration.
func (g *Group) index(s *server) int {
	for i, t := range g.servers {
		if t == s {
			return i
		}
	}
	return len(g.servers)
}

// randomRoll is rank's roll in production.
func randomRoll() float64 { return rand.Float64() }
