package resolver

import (
	"fmt"
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
