package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// Scenario 11, dnstap (issue 38): towerd's CPU per answer at dnstapRate of
// warm hits with dnstap off and on (every CLIENT_QUERY and CLIENT_RESPONSE
// to fstrm_capture, which writes them to /dev/null), two starts of the
// same towerd one after the other in each round. The bar: on at
// most 1.3× off.

// dnstapRate is the offered rate, queries/s.
const dnstapRate = 20000

// dnstap runs scenario 11 for towerd.
func (b *bench) dnstap(round int, hitFile string) error {
	r := b.res["towerd"]
	var us [2]float64
	for i, on := range []bool{false, true} {
		set := serverSetup{phase: "dnstap-off", upstream: upstreamAddr, cacheSize: b.cacheSize}
		if on {
			set.phase = "dnstap-on"
			set.dnstapSocket = filepath.Join(b.dir, fmt.Sprintf("dnstap-%d.sock", round))
			_ = os.Remove(set.dnstapSocket)
			fstrm, err := lookPath("fstrm_capture")
			if err != nil {
				return err
			}
			c, err := b.procs.start("fstrm_capture", filepath.Join(b.dir, fmt.Sprintf("fstrm-%d.log", round)), fstrm,
				"-t", "protobuf:dnstap.Dnstap", "-u", set.dnstapSocket, "-w", "/dev/null")
			if err != nil {
				return err
			}
			defer b.procs.stop(c)
			// towerd connects again every 0.5 s until the socket exists;
			// the warm-up below gives it that time before the measure.
		}
		addr := serverAddr("towerd")
		p, err := b.startServer("towerd", round, set)
		if err != nil {
			return err
		}
		for pass := 0; pass < 2; pass++ {
			if _, err := b.dnsperf(addr, hitFile, "-n", "1", "-Q", "20000", "-q", "200", "-c", "4"); err != nil {
				b.procs.stop(p)
				return fmt.Errorf("warming: %w", err)
			}
		}
		upCount := func() (uint64, error) { n, _ := upstreamQueries(); return n, nil }
		out, err := b.measure(p.cmd.Process.Pid, upCount, addr, hitFile, "-l", secs(b.duration), "-Q", strconv.Itoa(dnstapRate), "-q", "2000", "-c", "4", "-t", "2")
		b.procs.stop(p)
		if err != nil {
			return err
		}
		us[i] = out.usPer(out.noerror)
		key := map[bool]string{false: "dnstap.off.us", true: "dnstap.on.us"}[on]
		r.add(key, us[i])
		fmt.Printf("  round %d towerd   dnstap %-3s @%d/s: %8.0f answered/s, %5.2f µs CPU/query, lost %d\n",
			round, map[bool]string{false: "off", true: "on"}[on], dnstapRate, out.qps, us[i], out.lost)
	}
	if us[0] > 0 {
		r.add("dnstap.ratio", us[1]/us[0])
	}
	return nil
}

// dnstapRows are scenario 11's rows of the table.
func (b *bench) dnstapRows() []row {
	return []row{
		{measure: "CPU µs per answer, dnstap off", key: "dnstap.off.us", format: "%.2f"},
		{measure: "CPU µs per answer, dnstap on", key: "dnstap.on.us", format: "%.2f"},
		{measure: "on ÷ off (issue 38: at most 1.3)", key: "dnstap.ratio", format: "%.2f"},
	}
}
