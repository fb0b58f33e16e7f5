package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Scenario 15, consul (issue 34): what the names towerd exists for cost,
// beside any other cached name and beside the peers' cache hits. Every
// server runs at once (towerd, dnsmasq, unbound on their addresses),
// forwarding every zone, consul. included, to one synthetic upstream
// whose records carry TTL 300; towerd also watches a real Consul agent
// (test/consulagent's binary) holding three instances of web (pinned).
// Interleaved, each load dnsperf at a fixed rate (-consul-rate) for
// -consul-slice, each server asked each set 8 s a round (consulbars.go),
// CPU of the answering server's threads (their schedstat, cpuReading)
// per answer:
//
//	h: h<N>.bench.example, a cached name of another zone
//	c: c<N>.service.consul, a cached Consul name (forwarded, TTL 300;
//	   the agent knows no such service: towerd's watch keeps the first
//	   out, then follows the service list, which lacks them)
//	w: web.service.consul, from towerd's watch; the peers' cache hit of
//	   the synthetic upstream's answer
//
// The bars (issue 34): towerd's c at most 1.15 × its h and 0.85 ×
// unbound's c; its w at most 1.25 × its c. Needs the Consul agent binary.

const (
	consulUpstreamAddr = "127.0.0.24:" + port
	consulAgentHost    = "127.0.0.25"
	consulAgentHTTP    = consulAgentHost + ":8500"
	consulTTL          = 300 * time.Second
	consulNames        = 1000
	// consulAdmin is towerd's admin address: each of its loads prints the
	// names its watch read at the agent meanwhile (consulReads).
	consulAdmin = "127.0.0.24:5301"
)

// consulSets are the name sets of scenario 15, in the order they load in
// a round's first slice.
var consulSets = []struct{ key, label string }{
	{"h", "cached name of another zone (h<N>.bench.example)"},
	{"c", "cached Consul name (c<N>.service.consul, TTL 300)"},
	{"w", "watched name (web.service.consul, 3 instances; peers: cache hit)"},
}

func consulKey(set string) string { return "consul." + set + ".us" }

// consulRows are the table's rows of scenario 15.
func (b *bench) consulRows() []row {
	var rs []row
	for _, s := range consulSets {
		rs = append(rs, row{measure: s.key + ": CPU µs per answer", key: consulKey(s.key), format: "%.2f"})
	}
	return rs
}

// consulScenario runs scenario 15: its upstream, the agent, every server,
// then the rounds of interleaved loads.
func (b *bench) consulScenario() error {
	if _, err := os.Stat(b.consul); err != nil {
		return fmt.Errorf("scenario consul needs the Consul agent at %s (make consul-agent)", b.consul)
	}
	if b.consulSlice <= 0 || b.consulSlice > consulRoundLoad {
		return fmt.Errorf("-consul-slice %s: want more than 0, at most %s", b.consulSlice, consulRoundLoad)
	}
	if err := b.startUpstream("consul-upstream", consulUpstreamAddr, consulTTL, b.faults); err != nil {
		return err
	}
	if err := b.startConsulAgent(consulAgentHost, "consul15", 3); err != nil {
		return err
	}
	files := map[string]string{}
	for _, s := range consulSets {
		files[s.key] = filepath.Join(b.dir, "consul-"+s.key+".txt")
	}
	if err := writeNames(files["h"], "h", consulNames); err != nil {
		return err
	}
	if err := writeLines(files["c"], consulNames, func(i int) string { return fmt.Sprintf("c%d.service.consul A", i) }); err != nil {
		return err
	}
	if err := writeLines(files["w"], 1, func(int) string { return "web.service.consul A" }); err != nil {
		return err
	}
	pids := map[string]int{}
	servers := b.servers
	if b.consulFloor {
		servers = append(slices.Clone(servers), "null", "nullgo")
	}
	for _, s := range servers {
		set := serverSetup{phase: "consul", upstream: consulUpstreamAddr, cacheSize: b.cacheSize, consulDNS: consulUpstreamAddr}
		if s == "towerd" {
			set.consulHTTP, set.towerdConfig = consulAgentHTTP, "[consul]\nservices = [\"web\"]\n"
			set.admin = consulAdmin
		}
		p, err := b.startServer(s, 0, set)
		if err != nil {
			return err
		}
		defer b.procs.stop(p)
		pids[s] = p.cmd.Process.Pid
	}
	// Warm: every name asked, twice, then a few seconds of the Consul
	// names, so that towerd's watch has read (and kept out) each c<N>
	// its questions asked it about, as it would on a node after a while.
	for _, s := range b.servers {
		for _, k := range []string{"h", "c", "w", "c"} {
			if _, err := b.dnsperf(serverAddr(s), files[k], "-n", "2", "-Q", "20000", "-q", "200", "-c", "4"); err != nil {
				return fmt.Errorf("warming %s: %w", s, err)
			}
		}
		if _, err := b.dnsperf(serverAddr(s), files["c"], "-l", "5", "-Q", "5000", "-c", "4"); err != nil {
			return fmt.Errorf("warming %s: %w", s, err)
		}
	}
	none := func() (uint64, error) { return 0, nil }
	n := b.consulSlices()
	ratios := newConsulRatios()
	fmt.Printf("  consul: each load %s at %d/s, %d a round per server and set (not -duration); CPU from the threads' schedstat\n",
		b.consulSlice, b.consulRate, n)
	for round := 1; round <= b.rounds; round++ {
		cpu, answers := map[consulCell]float64{}, map[consulCell]int{}
		for k := range n {
			// Interleaved: each set across the servers in turn, sets and
			// servers one further along each slice, so that no server
			// always follows the same one.
			pass := (round-1)*n + k
			slice := map[consulCell]float64{}
			for _, set := range rotated(consulSets, pass) {
				for _, s := range rotated(servers, pass) {
					count := none
					if s == "towerd" {
						count = consulReads
					}
					out, err := b.measure(pids[s], count, serverAddr(s), files[set.key],
						"-l", strconv.FormatFloat(b.consulSlice.Seconds(), 'f', -1, 64),
						"-Q", strconv.Itoa(b.consulRate), "-q", "2000", "-c", "4", "-t", "2")
					if err != nil {
						return fmt.Errorf("round %d.%d, %s, consul %s: %w", round, k+1, s, set.key, err)
					}
					cell := consulCell{s, set.key}
					us := out.schedUs / float64(max(out.noerror, 1))
					slice[cell] = us
					cpu[cell] += out.schedUs
					answers[cell] += out.noerror
					reads := ""
					if s == "towerd" {
						reads = fmt.Sprintf(", %d names read at the agent", out.upstream)
					}
					fmt.Printf("  round %d.%d %-8s consul %s @%d/s: %8.0f answered/s, %5.2f µs CPU/answer, lost %d of %d, NOERROR %d%s\n",
						round, k+1, s, set.key, b.consulRate, out.qps, us, out.lost, out.sent, out.noerror, reads)
				}
			}
			ratios.add(false, slice)
		}
		// The round's figure of a server and set: its slices' CPU over
		// their answers.
		whole := map[consulCell]float64{}
		for cell, c := range cpu {
			whole[cell] = c / float64(max(answers[cell], 1))
			if !isFloor(cell.server) {
				b.res[cell.server].add(consulKey(cell.set), whole[cell])
			}
		}
		fmt.Printf("  round %d consul µs CPU/answer:", round)
		for _, set := range consulSets {
			for _, s := range servers {
				fmt.Printf(" %s %s %.2f", s, set.key, whole[consulCell{s, set.key}])
			}
		}
		fmt.Println()
		if bars := consulBarsOf(whole); bars != "" {
			fmt.Printf("  round %d consul bars: %s\n", round, bars)
		}
		ratios.add(true, whole)
	}
	ratios.print(os.Stdout, b.consulSlice)
	return nil
}

// isFloor: s is one of scenario 15's floors (-consul-floor), which send
// each query back and are not in the table.
func isFloor(s string) bool { return s == "null" || s == "nullgo" }

// startConsulAgent runs the Consul agent on host (its default ports free
// there) with n instances of web, and waits until the catalog has them.
func (b *bench) startConsulAgent(host, label string, n int) error {
	httpAddr := host + ":8500"
	for _, a := range []string{httpAddr, host + ":8600"} {
		if err := addrFree(a); err != nil {
			return err
		}
	}
	logf := filepath.Join(b.dir, label+".log")
	if _, err := b.procs.start(label, logf, b.consul, "agent", "-dev", "-bind", host, "-client", host,
		"-data-dir", filepath.Join(b.dir, label), "-serf-wan-port", "-1", "-https-port", "-1", "-grpc-port", "-1",
		"-grpc-tls-port", "-1", "-serf-lan-port", "8301", "-server-port", "8300"); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < n; {
		body, _ := json.Marshal(map[string]any{"ID": fmt.Sprint("web", i), "Name": "web",
			"Address": fmt.Sprintf("127.0.0.%d", 31+i), "Port": 80})
		req, _ := http.NewRequest(http.MethodPut, "http://"+httpAddr+"/v1/agent/service/register", bytes.NewReader(body))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				i++
				continue
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("consul agent not ready within 30 s (log: %s)", tail(logf))
		}
		time.Sleep(200 * time.Millisecond) // polling a child that has no readiness signal
	}
	for {
		resp, err := http.Get("http://" + httpAddr + "/v1/health/service/web?passing=1")
		if err == nil {
			var entries []json.RawMessage
			_ = json.NewDecoder(resp.Body).Decode(&entries)
			resp.Body.Close()
			if len(entries) == n {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("consul agent: web's %d instances not healthy within 30 s (log: %s)", n, tail(logf))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// writeLines writes n lines of dnsperf's input, line(i) each.
func writeLines(path string, n int, line func(int) string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for i := range n {
		fmt.Fprintln(w, line(i))
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// consulReads is the reads of the agent's HTTP API towerd's watch made
// so far (first reads of names, empty or not, and watch starts): a name
// that is no service costs one per hold (issue 34), and its CPU lands on
// the load that asked.
func consulReads() (uint64, error) {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + consulAdmin + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var n float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if ok && (name == "towerd_consul_watch_empty_reads_total" || name == "towerd_consul_watch_starts_total") {
			v, err := strconv.ParseFloat(val, 64)
			if err != nil {
				return 0, err
			}
			n += v
		}
	}
	return uint64(n), sc.Err()
}
