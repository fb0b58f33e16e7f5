package upstream

import (
	"math/rand/v2"
	"testing"
	"time"
)

// idleGroup is a group over addresses nothing listens on: rank, the
// estimates and the budget need no traffic.
func idleGroup(t *testing.T, n int, opts GroupOptions) *Group {
	t.Helper()
	addrs := []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4"}[:n]
	g, err := NewGroup(".", addrs, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	g.roll = func() float64 { return 0.5 } // never explore unless a test says so
	return g
}

// sample feeds s n RTTs drawn uniformly from [mean-spread, mean+spread].
func sample(s *server, rng *rand.Rand, n int, mean, spread time.Duration) {
	for range n {
		s.addSample(mean - spread + time.Duration(rng.Int64N(int64(2*spread)+1)))
	}
}

func order(g *Group, r ranked) []int {
	out := make([]int, len(r.order))
	for i, s := range r.order {
		out[i] = g.index(s)
	}
	return out
}

func TestTailTracksHighQuantile(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name              string
		mean, spread      time.Duration
		wantLow, wantHigh time.Duration // the tail after 2,000 samples
		srttLow, srttHigh time.Duration
	}{
		// The lossy day's server: p98 of U(50,150) ms is 148 ms; srtt +
		// 4·rttvar, the RTO, would say 200.
		{"100±50ms", 100 * time.Millisecond, 50 * time.Millisecond,
			135 * time.Millisecond, 160 * time.Millisecond, 90 * time.Millisecond, 110 * time.Millisecond},
		{"5±2ms", 5 * time.Millisecond, 2 * time.Millisecond,
			6 * time.Millisecond, 7500 * time.Microsecond, 4 * time.Millisecond, 6 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &server{}
			sample(s, rng, 2000, tt.mean, tt.spread)
			e := s.estimate()
			if e.tail < tt.wantLow || e.tail > tt.wantHigh {
				t.Errorf("tail %s, want within [%s, %s]", e.tail, tt.wantLow, tt.wantHigh)
			}
			if e.srtt < tt.srttLow || e.srtt > tt.srttHigh {
				t.Errorf("srtt %s, want within [%s, %s]", e.srtt, tt.srttLow, tt.srttHigh)
			}
			// Share of further samples the tail lets through: about 2 %.
			late := 0
			for range 5000 {
				rtt := tt.mean - tt.spread + time.Duration(rng.Int64N(int64(2*tt.spread)+1))
				if rtt > s.estimate().tail {
					late++
				}
				s.addSample(rtt)
			}
			if share := float64(late) / 5000; share > 0.05 {
				t.Errorf("%.1f %% of replies later than the tail, want about 2 %%", 100*share)
			}
		})
	}
}

func TestTailIsBoundedBySRTTAndRTO(t *testing.T) {
	s := &server{}
	if s.estimate().tail != 0 {
		t.Fatal("tail before any sample, want 0")
	}
	s.addSample(10 * time.Millisecond) // srtt 10, rttvar 5
	s.mu.Lock()
	s.tail = time.Hour
	hi := s.tailLocked()
	s.tail = time.Microsecond
	lo := s.tailLocked()
	s.mu.Unlock()
	if hi != 30*time.Millisecond || lo != 10*time.Millisecond {
		t.Errorf("tail clamps to [%s, %s], want [10ms, 30ms]", lo, hi)
	}
}

func TestRankFastestFirstConfigOrderBreaksTies(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name  string
		srtts []time.Duration // 0: never sampled; -1: never sampled, asked once
		want  []int
	}{
		{"first listed slow", []time.Duration{300 * ms, 5 * ms}, []int{1, 0}},
		{"by srtt", []time.Duration{300 * ms, 40 * ms, 5 * ms}, []int{2, 1, 0}},
		{"tied within an eighth: listed order", []time.Duration{5500 * time.Microsecond, 5 * ms}, []int{0, 1}},
		{"tied within tieBand", []time.Duration{400 * time.Microsecond, 100 * time.Microsecond}, []int{0, 1}},
		{"outside the band", []time.Duration{6 * ms, 5 * ms}, []int{1, 0}},
		{"never sampled is measured first", []time.Duration{5 * ms, 0}, []int{1, 0}},
		{"none sampled: listed order", []time.Duration{0, 0, 0}, []int{0, 1, 2}},
		{"none sampled: the one asked least", []time.Duration{-1, 0, 0}, []int{1, 0, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := idleGroup(t, len(tt.srtts), GroupOptions{})
			for i, d := range tt.srtts {
				switch {
				case d > 0:
					g.servers[i].addSample(d)
				case d < 0: // asked once, no reply yet
					g.servers[i].queries.Add(1)
				}
			}
			r := g.rank(nil)
			if got := order(g, r); !equalInts(got, tt.want) {
				t.Errorf("order %v, want %v", got, tt.want)
			}
			if r.explored {
				t.Error("explored with a roll of 0.5")
			}
		})
	}
}

func TestRankSkipsDownServers(t *testing.T) {
	g := idleGroup(t, 2, GroupOptions{})
	g.servers[0].addSample(time.Millisecond)
	g.servers[1].addSample(50 * time.Millisecond)
	g.servers[0].down = true
	if got := order(g, g.rank(nil)); !equalInts(got, []int{1}) {
		t.Errorf("order %v, want the up server only", got)
	}
}

func TestRankExploresWithinBudget(t *testing.T) {
	g := idleGroup(t, 3, GroupOptions{})
	for i, d := range []time.Duration{300, 5, 40} {
		g.servers[i].addSample(d * time.Millisecond)
	}
	g.budget.tokens = hedgeBurst
	rolls := []float64{0.01, 0.99} // explore; the last other server
	g.roll = func() float64 { r := rolls[0]; rolls = rolls[1:]; return r }
	r := g.rank(nil)
	if got := order(g, r); !r.explored || !equalInts(got, []int{1, 0, 2}) {
		t.Fatalf("order %v explored %v, want [1 0 2] explored (the fastest, then the explored one)", got, r.explored)
	}
	if tokens := g.budget.tokens; tokens != hedgeBurst-1 {
		t.Errorf("budget holds %v tokens, want one taken for the exploration's hedge", tokens)
	}

	// No token, no exploration.
	g.budget.tokens = 0
	g.roll = func() float64 { return 0.01 }
	if r := g.rank(nil); r.explored || g.index(r.order[0]) != 1 {
		t.Errorf("explored with an empty budget: order %v", order(g, r))
	}
	// Only one server up: nothing to explore, and in an outage (none up)
	// exploring would add packets.
	g.budget.tokens = hedgeBurst
	for _, down := range [][]bool{{true, false, true}, {true, true, true}} {
		for i, d := range down {
			g.servers[i].down = d
		}
		if r := g.rank(nil); r.explored {
			t.Errorf("explored with servers down %v", down)
		}
	}
}

// A fast server that turns slow has its replies overtaken by hedges: the
// waits they leave (lower bounds) must still make it lose its place.
func TestLowerBoundsLeaveAServerTurnedSlow(t *testing.T) {
	g := idleGroup(t, 2, GroupOptions{})
	rng := rand.New(rand.NewPCG(3, 4))
	sample(g.servers[0], rng, 200, 5*time.Millisecond, 2*time.Millisecond)
	sample(g.servers[1], rng, 200, 8*time.Millisecond, 2*time.Millisecond)
	if i := g.index(g.rank(nil).order[0]); i != 0 {
		t.Fatalf("server %d first, want the faster 0", i)
	}
	// Server 0 now takes 300 ms; each of its attempts is hedged at its
	// tail and answered by server 1, ~8 ms later.
	for n := 1; ; n++ {
		s0 := g.servers[0].estimate()
		g.servers[0].addLowerBound(s0.tail + 8*time.Millisecond)
		g.servers[1].addSample(8 * time.Millisecond)
		if g.index(g.rank(nil).order[0]) == 1 {
			if n > 10 {
				t.Errorf("left after %d overtaken attempts, want at most 10", n)
			}
			break
		}
		if n > 1000 {
			t.Fatal("never left")
		}
	}
	// A lower bound below the estimate says nothing.
	before := g.servers[1].estimate()
	g.servers[1].addLowerBound(time.Millisecond)
	if after := g.servers[1].estimate(); after != before {
		t.Errorf("a bound below the estimate moved it: %+v → %+v", before, after)
	}
}

func TestHedgeBudget(t *testing.T) {
	b := newHedgeBudget(0.05)
	if b.take() {
		t.Fatal("a token from a new bucket: it starts empty, so a group's first queries are never hedged")
	}
	for range 20 * hedgeBurst {
		b.earn()
	}
	for i := range hedgeBurst {
		if !b.take() {
			t.Fatalf("token %d refused from a full bucket", i)
		}
	}
	if b.take() {
		t.Fatal("a token past the burst")
	}
	// 5 % of attempts: one token per 20.
	for range 19 {
		b.earn()
	}
	if b.take() {
		t.Fatal("a token after 19 attempts")
	}
	b.earn()
	if !b.take() {
		t.Fatal("no token after 20 attempts")
	}
	for range 10000 {
		b.earn()
	}
	if b.tokens != hedgeBurst {
		t.Errorf("bucket holds %v, want capped at %d", b.tokens, hedgeBurst)
	}
	off := newHedgeBudget(0)
	off.earn()
	if off.take() {
		t.Error("a token with hedging off")
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
