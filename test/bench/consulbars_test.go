package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// A bar's summary counts the quotients at most its bound, the bound
// itself included, and the median is of the quotients as measured.
func TestConsulBarsMedianAndMet(t *testing.T) {
	m, met := meets([]float64{1.10, 0.85, 0.851, 0.79}, 0.85)
	if met != 2 || m != (0.85+0.851)/2 {
		t.Fatalf("median %v, met %d; want %v, 2", m, met, (0.85+0.851)/2)
	}
	c := newConsulRatios()
	fig := map[consulCell]float64{{"towerd", "h"}: 10, {"towerd", "c"}: 11, {"towerd", "w"}: 12, {"unbound", "c"}: 12}
	c.add(true, fig)
	c.add(false, fig)
	delete(fig, consulCell{"unbound", "c"}) // -servers without unbound: its bar is left out
	c.add(false, fig)
	if got := c.rounds[2]; len(got) != 1 || got[0] != 11.0/12 {
		t.Fatalf("rounds of c/unbound's c: %v", got)
	}
	if got := c.slices[0]; len(got) != 2 || got[0] != 1.1 {
		t.Fatalf("slices of c/h: %v", got)
	}
	var out bytes.Buffer
	c.print(&out, consulRoundLoad/2)
	for _, want := range []string{"towerd c/h     ≤ 1.15: rounds 1.100 (median 1.100, 1 of 1 meet it); slices 1.100 1.100 (median 1.100, 2 of 2 meet it)",
		"c/unbound's c  ≤ 0.85: rounds 0.917 (median 0.917, 0 of 1 meet it); slices 0.917 (median 0.917, 0 of 1 meet it)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "null") {
		t.Errorf("the floors' quotients printed without -consul-floor:\n%s", out.String())
	}

	// With the floors: their quotients against the same bar, and towerd's
	// above its own I/O with no bound.
	f := newConsulRatios()
	fig = map[consulCell]float64{{"towerd", "c"}: 11, {"unbound", "c"}: 12, {"null", "c"}: 9, {"nullgo", "c"}: 10}
	f.add(true, fig)
	out.Reset()
	f.print(&out, consulRoundLoad)
	for _, want := range []string{"null c/unbound's c ≤ 0.85: rounds 0.750 (median 0.750, 1 of 1 meet it)",
		"nullgo c/unbound's c ≤ 0.85: rounds 0.833 (median 0.833, 1 of 1 meet it)",
		"towerd c/nullgo c: rounds 1.100 (median 1.100)\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	if got := consulBarsOf(fig); !strings.Contains(got, "towerd c/nullgo c 1.10") || strings.Contains(got, "c/nullgo c 1.10 (") {
		t.Errorf("bars line %q", got)
	}
}

// Each slice's order starts one further along, round after round.
func TestConsulLoadsRotate(t *testing.T) {
	s := []string{"towerd", "dnsmasq", "unbound"}
	for k, want := range [][]string{s, {"dnsmasq", "unbound", "towerd"}, {"unbound", "towerd", "dnsmasq"}, s} {
		if got := rotated(s, k); !slices.Equal(got, want) {
			t.Errorf("rotated(%d) = %v, want %v", k, got, want)
		}
	}
	b := &bench{consulSlice: consulRoundLoad / 2}
	if n := b.consulSlices(); n != 2 {
		t.Errorf("slices of 4 s: %d, want 2", n)
	}
}
