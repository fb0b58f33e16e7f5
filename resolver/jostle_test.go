package resolver

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/resolver/clock"
)

// BenchmarkJostleAtCap is a question's cost at a full in-flight cap under
// a flood (issue 35): the cap held, three quarters by random names of one
// parent domain and the rest by names of parents of their own; each
// question chooses the resolution that yields to it (a fresh name of
// another parent and a name of the flood, in turn), that resolution ends,
// and a new one of its name takes the slot, as a flood asking again does.
func BenchmarkJostleAtCap(b *testing.B) {
	for _, limit := range []int{150, 4096} {
		b.Run(fmt.Sprintf("cap=%d", limit), func(b *testing.B) {
			f := newFlights(nil, clock.Real{})
			base := time.Now()
			start := func(key cache.Key, at time.Time) *flight {
				fl := f.newLocked(key, resolution{})
				fl.started = at
				f.callStartedLocked(fl)
				return fl
			}
			f.mu.Lock()
			for i := range limit {
				name := fmt.Sprintf("r%d.silent.test.", i)
				if i%4 == 3 {
					name = fmt.Sprintf("n%d.p%d.example.", i, i)
				}
				start(cache.Key{Name: name, Type: 1, Class: 1}, base.Add(time.Duration(i)*time.Microsecond))
			}
			f.mu.Unlock()
			questions := []cache.Key{
				{Name: "fresh.other.example.", Type: 1, Class: 1},
				{Name: "new.silent.test.", Type: 1, Class: 1},
			}
			cutoff := base.Add(time.Hour) // every resolution is past it
			at := base.Add(time.Duration(limit) * time.Microsecond)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				f.mu.Lock()
				v := f.victimLocked(cutoff, questions[i%2], limit)
				if v == nil {
					f.mu.Unlock()
					b.Fatal("no resolution yields at the cap")
				}
				f.yieldingLocked(v)
				f.leaveLocked(v)
				at = at.Add(time.Microsecond)
				start(v.key, at)
				f.mu.Unlock()
			}
		})
	}
}

// victimByWalk is victimLocked as it was before the index
// (jostleindex.go): a walk over every running resolution with a map of
// counts, ties between dominant parents broken towards the question's own.
func victimByWalk(f *flights, cutoff time.Time, key cache.Key, limit int) *flight {
	counts := map[string]int{}
	most := 0
	for _, fl := range f.running {
		if fl.callStarted {
			p := parentDomain(fl.key.Name)
			counts[p]++
			most = max(most, counts[p])
		}
	}
	own := parentDomain(key.Name)
	dominant := own
	if counts[own] != most {
		for p, n := range counts {
			if n == most {
				dominant = p
			}
		}
	}
	flooding := most > limit/2
	var oldest *flight
	for _, fl := range f.running {
		if !fl.callStarted || fl.yielding {
			continue
		}
		p := parentDomain(fl.key.Name)
		switch {
		case flooding && own == dominant:
			if p != own || !fl.started.Before(cutoff) {
				continue
			}
		case flooding:
			if p != dominant {
				continue
			}
		default:
			if !fl.started.Before(cutoff) {
				continue
			}
		}
		if oldest == nil || fl.started.Before(oldest.started) {
			oldest = fl
		}
	}
	return oldest
}

// The index chooses what the walk over every running resolution chose,
// through random starts, yields and ends of resolutions under a few
// parents, one of them flooding at times.
func TestJostleIndexChoosesAsTheWalk(t *testing.T) {
	f := newFlights(nil, clock.Real{})
	rng := rand.New(rand.NewPCG(35, 1))
	parents := []string{"silent.test.", "example.", "a.example.", "b.example.", "."}
	base := time.Now()
	at := base
	n := 0
	pick := func() cache.Key {
		p := parents[rng.IntN(len(parents))]
		if rng.IntN(3) > 0 {
			p = parents[0] // the flood's parent most of the time
		}
		n++
		name := fmt.Sprintf("n%d.%s", n, p)
		if p == "." {
			name = fmt.Sprintf("n%d.", n)
		}
		return cache.Key{Name: name, Type: 1, Class: 1}
	}
	var running []*flight
	const limit = 40
	for step := range 20000 {
		f.mu.Lock()
		switch op := rng.IntN(10); {
		case op < 5 && len(running) < 2*limit:
			at = at.Add(time.Duration(1+rng.IntN(1000)) * time.Microsecond)
			fl := f.newLocked(pick(), resolution{})
			fl.started = at
			if rng.IntN(10) > 0 { // some never get their call started
				f.callStartedLocked(fl)
			}
			running = append(running, fl)
		case op < 7 && len(running) > 0:
			i := rng.IntN(len(running))
			if fl := running[i]; fl.callStarted && !fl.yielding {
				f.yieldingLocked(fl)
			}
		case len(running) > 0:
			i := rng.IntN(len(running))
			f.leaveLocked(running[i])
			running[i] = running[len(running)-1]
			running = running[:len(running)-1]
		}
		key := pick()
		cutoff := base.Add(time.Duration(rng.Int64N(int64(at.Sub(base)) + 1)))
		got, want := f.victimLocked(cutoff, key, limit), victimByWalk(f, cutoff, key, limit)
		f.mu.Unlock()
		if got != want {
			name := func(fl *flight) string {
				if fl == nil {
					return "none"
				}
				return fl.key.Name
			}
			t.Fatalf("step %d, question %s: index chose %s, the walk %s", step, key.Name, name(got), name(want))
		}
	}
}
