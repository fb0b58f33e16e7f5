package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Scenario 15's bars (issue 34) and how its loads are cut. A round asks
// each server each set for consulRoundLoad, in loads of -consul-slice,
// the sets and servers one further along each slice: the machine's drift
// (other work starting and stopping) used to land on one server's 8 s
// load and not the next one's, and a round's ratio to unbound moved from
// 0.79 to 1.10 with nothing changed. Shorter loads in turn spread a
// drift over every server; each ratio is taken within one slice or one
// round, never across them.

// consulRoundLoad is how long each server is asked each set in a round:
// one load's length before the loads were sliced, so that a run of
// -rounds 4 takes what it took (about 5 minutes).
const consulRoundLoad = 8 * time.Second

// consulSlices is how many loads of -consul-slice make a round's
// consulRoundLoad.
func (b *bench) consulSlices() int {
	return max(1, int((consulRoundLoad+b.consulSlice/2)/b.consulSlice))
}

// consulCell is one server's figure of one set.
type consulCell struct{ server, set string }

// consulBar is one of issue 34's bars: num's CPU per answer at most bound
// × den's; a bound of 0 is a quotient printed for reading, not a bar (the
// floors', -consul-floor).
type consulBar struct {
	label    string
	num, den consulCell
	bound    float64
}

var consulBars = []consulBar{
	{"towerd c/h", consulCell{"towerd", "c"}, consulCell{"towerd", "h"}, 1.15},
	{"w/c", consulCell{"towerd", "w"}, consulCell{"towerd", "c"}, 1.25},
	{"c/unbound's c", consulCell{"towerd", "c"}, consulCell{"unbound", "c"}, 0.85},
	// The floors against the same bar, and towerd above its own I/O.
	{"null c/unbound's c", consulCell{"null", "c"}, consulCell{"unbound", "c"}, 0.85},
	{"nullgo c/unbound's c", consulCell{"nullgo", "c"}, consulCell{"unbound", "c"}, 0.85},
	{"towerd c/nullgo c", consulCell{"towerd", "c"}, consulCell{"nullgo", "c"}, 0},
}

// ratio is the bar's quotient in one slice's or round's figures; false
// when a server of it was not measured (-servers).
func (r consulBar) ratio(fig map[consulCell]float64) (float64, bool) {
	n, d := fig[r.num], fig[r.den]
	return n / d, n > 0 && d > 0
}

// consulBarsOf is the bars' line of one round's figures.
func consulBarsOf(fig map[consulCell]float64) string {
	var parts []string
	for _, bar := range consulBars {
		q, ok := bar.ratio(fig)
		switch {
		case !ok:
		case bar.bound == 0:
			parts = append(parts, fmt.Sprintf("%s %.2f", bar.label, q))
		default:
			parts = append(parts, fmt.Sprintf("%s %.2f (≤ %.2f)", bar.label, q, bar.bound))
		}
	}
	return strings.Join(parts, ", ")
}

// consulRatios are each bar's quotients, per round and per slice.
type consulRatios struct{ rounds, slices [][]float64 }

func newConsulRatios() *consulRatios {
	return &consulRatios{rounds: make([][]float64, len(consulBars)), slices: make([][]float64, len(consulBars))}
}

// add takes one round's (or slice's) figures.
func (c *consulRatios) add(round bool, fig map[consulCell]float64) {
	for i, bar := range consulBars {
		q, ok := bar.ratio(fig)
		if !ok {
			continue
		}
		if round {
			c.rounds[i] = append(c.rounds[i], q)
		} else {
			c.slices[i] = append(c.slices[i], q)
		}
	}
}

// meets is the median of qs and how many of them are at most bound.
func meets(qs []float64, bound float64) (median float64, met int) {
	r := newResults()
	for _, q := range qs {
		r.add("q", q)
		if q <= bound {
			met++
		}
	}
	median, _ = r.median("q")
	return median, met
}

// print writes each bar's quotients, their median and how many meet it:
// by round (each server's consulRoundLoad of a set) and by slice.
func (c *consulRatios) print(w io.Writer, slice time.Duration) {
	fmt.Fprintf(w, "  consul bars, each round's %s of a set per server and each %s slice's:\n", consulRoundLoad, slice)
	for i, bar := range consulBars {
		if len(c.rounds[i]) == 0 {
			continue
		}
		line := fmt.Sprintf("  %-14s ≤ %.2f:", bar.label, bar.bound)
		if bar.bound == 0 {
			line = fmt.Sprintf("  %-14s:", bar.label)
		}
		for _, by := range []struct {
			name string
			qs   []float64
		}{{"rounds", c.rounds[i]}, {"slices", c.slices[i]}} {
			if len(by.qs) == 0 {
				continue
			}
			m, met := meets(by.qs, bar.bound)
			line += fmt.Sprintf(" %s", by.name)
			for _, q := range by.qs {
				line += fmt.Sprintf(" %.3f", q)
			}
			if bar.bound == 0 {
				line += fmt.Sprintf(" (median %.3f);", m)
			} else {
				line += fmt.Sprintf(" (median %.3f, %d of %d meet it);", m, met, len(by.qs))
			}
		}
		fmt.Fprintln(w, strings.TrimSuffix(line, ";"))
	}
}
