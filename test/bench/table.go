package main

import (
	"fmt"
	"io"
	"slices"
)

// results holds each measure's values over the rounds.
type results struct{ v map[string][]float64 }

func newResults() *results { return &results{v: map[string][]float64{}} }

func (r *results) add(k string, v float64) { r.v[k] = append(r.v[k], v) }

// median of the rounds (the mean of the middle two for an even count).
func (r *results) median(k string) (float64, bool) {
	v := slices.Clone(r.v[k])
	if len(v) == 0 {
		return 0, false
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2], true
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2, true
}

// row is one measure of the table: a line per measure, a column per server,
// so six scenarios fit one table that still reads on a narrow screen.
type row struct {
	scenario string // printed on the first row of its scenario only
	measure  string
	key      string // in results
	format   string
}

// rows are the measures of the selected scenarios, in the order they run.
func (b *bench) rows() []row {
	var rs []row
	add := func(scenario string, r ...row) {
		for i := range r {
			if i == 0 {
				r[i].scenario = scenario
			}
		}
		rs = append(rs, r...)
	}
	for _, rate := range b.rates {
		if b.want["hitcpu"] {
			add(fmt.Sprintf("1 hit CPU @%dk/s", rate/1000),
				row{measure: "CPU µs per answer", key: fmt.Sprintf("hit%d.us", rate), format: "%.2f"},
				row{measure: "answered/s", key: fmt.Sprintf("hit%d.qps", rate), format: "%.0f"})
		}
	}
	if b.want["latency"] {
		add(fmt.Sprintf("2 hit latency @%dk/s", latencyRate/1000),
			row{measure: "p50 µs", key: "lat.p50", format: "%.0f"},
			row{measure: "p99 µs", key: "lat.p99", format: "%.0f"},
			row{measure: "p99.9 µs", key: "lat.p999", format: "%.0f"},
			row{measure: "lost (none or > 2 s)", key: "lat.lost", format: "%.3f %%"})
	}
	if b.want["throughput"] {
		add("3 hit throughput", row{measure: "answered/s, unlimited", key: "tput.qps", format: "%.0f"})
	}
	if b.want["miss"] {
		add("4 miss",
			row{measure: "answered/s", key: "miss.qps", format: "%.0f"},
			row{measure: "CPU µs per answer", key: "miss.us", format: "%.2f"},
			row{measure: "lost", key: "miss.lost", format: "%.2f %%"},
			row{measure: "upstream queries per name", key: "miss.up", format: "%.3f"})
	}
	if b.want["tcpmiss"] {
		add("9 miss over TCP",
			row{measure: "answered/s", key: "tcpmiss.qps", format: "%.0f"},
			row{measure: "CPU µs per answer", key: "tcpmiss.us", format: "%.2f"},
			row{measure: "lost", key: "tcpmiss.lost", format: "%.2f %%"},
			row{measure: "upstream queries per name", key: "tcpmiss.up", format: "%.3f"})
	}
	if b.want["memory"] {
		add(fmt.Sprintf("5 memory, %dk names", b.memNames/1000),
			row{measure: fmt.Sprintf("RSS at start, %d-entry cache, MiB", smallCache), key: "mem.small", format: "%.1f"},
			row{measure: "RSS at start, cache sized for the names, MiB", key: "mem.start", format: "%.1f"},
			row{measure: "RSS filled, MiB", key: "mem.filled", format: "%.1f"},
			row{measure: "entries held (sampled)", key: "mem.held", format: "%.0f"},
			row{measure: "bytes per entry (filled − start)", key: "mem.bpe", format: "%.0f"},
			row{measure: fmt.Sprintf("bytes per entry (filled − %d-entry start)", smallCache), key: "mem.bpe0", format: "%.0f"})
	}
	if b.want["jitter"] {
		add("6 jitter",
			row{measure: "NOERROR within 2 s", key: "jit.ok", format: "%.2f %%"},
			row{measure: "p50 ms", key: "jit.p50", format: "%.2f"},
			row{measure: "p99 ms", key: "jit.p99", format: "%.1f"},
			row{measure: "p99.9 ms", key: "jit.p999", format: "%.1f"},
			row{measure: "max ms", key: "jit.max", format: "%.1f"},
			row{measure: "stale answers (EDE 3)", key: "jit.stale", format: "%.1f %%"},
			row{measure: "answers with TTL 0", key: "jit.ttl0", format: "%.1f %%"},
			row{measure: "upstream queries sent", key: "jit.up", format: "%.0f"},
			row{measure: "seconds between a name's upstream queries", key: "jit.interval", format: "%.2f"})
	}
	if b.want["cold"] {
		add(fmt.Sprintf("7 cold start, %dk names", coldNames/1000),
			row{measure: "answered/s", key: "cold.qps", format: "%.0f"},
			row{measure: "CPU µs per answer", key: "cold.us", format: "%.2f"},
			row{measure: "upstream queries per name", key: "cold.up", format: "%.3f"})
	}
	if b.want["nxstorm"] {
		add(fmt.Sprintf("8 NXDOMAIN storm, %d×%d names", stormNames, len(stormSuffixes)),
			row{measure: "NXDOMAIN answers/s", key: "storm.qps", format: "%.0f"},
			row{measure: "CPU µs per answer", key: "storm.us", format: "%.2f"},
			row{measure: fmt.Sprintf("upstream queries per %d identical asks", stormClients), key: "storm.up", format: "%.3f"})
	}
	if b.want["consul"] {
		add("15 Consul names @"+fmt.Sprint(b.consulRate/1000)+"k/s", b.consulRows()...)
	}
	if b.want["search"] {
		add("10 search list (glibc)", b.searchRows()...)
	}
	if b.want["dnstap"] {
		add(fmt.Sprintf("11 dnstap, hits @%dk/s", dnstapRate/1000), b.dnstapRows()...)
	}
	if b.want["pick"] {
		add("13 choosing a server", b.pickRows()...)
	}
	if b.want["abuse"] {
		add("14 abuse", b.abuseRows()...)
	}
	if b.want["amplify"] {
		add("16 amplification", b.amplifyRows()...)
	}
	return rs
}

// table prints the medians and towerd's ratios to the peers.
func (b *bench) table(w io.Writer) {
	servers := b.servers
	if b.withNull() {
		servers = append([]string{"null"}, servers...)
	}
	fmt.Fprintf(w, "\nmedians of %d round(s)\n\n| scenario | measure |", b.rounds)
	for _, s := range servers {
		fmt.Fprintf(w, " %s |", s)
	}
	fmt.Fprint(w, "\n|---|---|")
	for range servers {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, r := range b.rows() {
		fmt.Fprintf(w, "| %s | %s |", r.scenario, r.measure)
		for _, s := range servers {
			v, ok := b.res[s].median(r.key)
			if !ok {
				fmt.Fprint(w, " – |")
				continue
			}
			fmt.Fprintf(w, " "+r.format+" |", v)
		}
		fmt.Fprintln(w)
	}

	t, ok := b.res["towerd"]
	if !ok {
		return
	}
	fmt.Fprintln(w)
	ratio := func(k, peer string) string {
		a, ok1 := t.median(k)
		p, ok2 := b.res[peer]
		if !ok1 || !ok2 {
			return "–"
		}
		v, ok := p.median(k)
		if !ok || v == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f×", a/v)
	}
	line := func(what, k string, withNull bool) {
		if _, ok := t.median(k); !ok {
			return
		}
		fmt.Fprintf(w, "towerd %s: %s unbound's, %s dnsmasq's", what, ratio(k, "unbound"), ratio(k, "dnsmasq"))
		if withNull {
			fmt.Fprintf(w, ", %s the null responder's", ratio(k, "null"))
		}
		fmt.Fprintln(w)
	}
	for _, rate := range b.rates {
		line(fmt.Sprintf("hit CPU per query @%dk", rate/1000), fmt.Sprintf("hit%d.us", rate), true)
	}
	line("hit p99 latency", "lat.p99", true)
	line("hit throughput", "tput.qps", false)
	line("miss throughput", "miss.qps", false)
	line("CPU per miss", "miss.us", false)
	line("TCP miss throughput", "tcpmiss.qps", false)
	line("CPU per TCP miss", "tcpmiss.us", false)
	line("cold-start answers/s", "cold.qps", false)
	line("cold-start CPU per answer", "cold.us", false)
	line("NXDOMAIN storm answers/s", "storm.qps", false)
	line("NXDOMAIN storm CPU per answer", "storm.us", false)
	line(fmt.Sprintf("bytes per cached entry (filled − %d-entry start)", smallCache), "mem.bpe0", false)
	line("p99.9 latency under jitter", "jit.p999", true)
	line("upstream queries under jitter", "jit.up", false)
	for _, n := range searchNames {
		line(fmt.Sprintf("search p50, %s ndots:%d", n.name, n.ndots), searchKey(n.name, n.ndots, "p50"), false)
	}
}
