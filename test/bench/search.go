package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Scenario 10, search (issue 28): glibc lookups through each server with a
// search list, as issue 28 measured them. The node's resolv.conf has
// "search corp.example ec2.internal", ndots:1 and then ndots:5
// (Kubernetes'); its shared resolver answers 100 ms ± 50 ms late and
// loses 0.5 % of packets each way (the fault proxy, as scenario 6), and
// knows db.corp.example and web.ec2.internal only (everything else
// NXDOMAIN, negative TTL 60 s); consul. is a real Consul agent on loopback
// (test/consulagent's binary; its rows are left out without it) with one
// service, api-service. Each server listens on port 53 of its own
// loopback address (glibc asks no other port) with its defaults, negative
// caching included for the peers (how they absorb the expansions towerd
// refuses to cache), and is started afresh for each ndots.
//
// Every lookup is `getent ahosts NAME` (A and AAAA) in a private mount
// namespace whose /etc/resolv.conf and /etc/nsswitch.conf (hosts: dns)
// are bind mounts, so its time includes the process's start, the same for
// every server. Per name: the first lookup's time and upstream queries,
// then -search-lookups lookups one every searchEvery: p50 and p99, and
// upstream queries per lookup (read by the fault proxy, lost ones too).
// Needs root: unshare -m, port 53.

const (
	searchUpstreamAddr = "127.0.0.17:" + port
	// The Consul agent's own loopback address, its default ports free there.
	searchConsulHost = "127.0.0.20"
	searchConsulHTTP = searchConsulHost + ":8500"
	searchConsulDNS  = searchConsulHost + ":8600"
	searchEvery      = 100 * time.Millisecond
)

// searchNames are issue 28's rows (and web, which only the second domain
// knows), each with the ndots it is looked up under and whether it exists.
var searchNames = []struct {
	name   string
	ndots  int
	exists bool
	consul bool
}{
	{"api-service.service.consul", 1, true, true},
	{"db", 1, true, false},
	{"web", 1, true, false},
	{"ghost.bench.test", 1, false, false},
	{"api-service", 1, false, false},
	{"api-service.service.consul", 5, true, true},
	{"web", 5, true, false},
}

// searchAddr is where server s listens in this scenario.
func searchAddr(s string) string {
	switch s {
	case "towerd":
		return "127.0.0.21:53"
	case "dnsmasq":
		return "127.0.0.22:53"
	default:
		return "127.0.0.23:53"
	}
}

func searchKey(name string, ndots int, what string) string {
	return fmt.Sprintf("search.%s.%d.%s", name, ndots, what)
}

// searchRows are the table's rows of scenario 10.
func (b *bench) searchRows() []row {
	var rs []row
	for _, n := range searchNames {
		label := fmt.Sprintf("%s, ndots:%d", n.name, n.ndots)
		rs = append(rs,
			row{measure: label + ": p50 ms", key: searchKey(n.name, n.ndots, "p50"), format: "%.1f"},
			row{measure: label + ": p99 ms", key: searchKey(n.name, n.ndots, "p99"), format: "%.1f"},
			row{measure: label + ": upstream queries per lookup", key: searchKey(n.name, n.ndots, "up"), format: "%.2f"},
			row{measure: label + ": first lookup ms", key: searchKey(n.name, n.ndots, "first"), format: "%.0f"})
	}
	return rs
}

// searchSetUp starts what scenario 10 shares: the upstream and, when its
// binary is there, the Consul agent with api-service registered.
func (b *bench) searchSetUp() error {
	if os.Geteuid() != 0 {
		return errors.New("scenario search needs root (unshare -m, port 53): run make bench as root, or leave it out of -scenarios")
	}
	if err := b.startSearchUpstream(); err != nil {
		return err
	}
	if _, err := os.Stat(b.consul); err != nil {
		fmt.Printf("  search: no Consul agent at %s (make consul-agent): the Consul rows are left out\n", b.consul)
		b.consul = ""
		return nil
	}
	for _, a := range []string{searchConsulHTTP, searchConsulDNS} {
		if err := addrFree(a); err != nil {
			return err
		}
	}
	logf := filepath.Join(b.dir, "consul.log")
	if _, err := b.procs.start("consul", logf, b.consul, "agent", "-dev", "-bind", searchConsulHost, "-client", searchConsulHost,
		"-data-dir", filepath.Join(b.dir, "consul"), "-serf-wan-port", "-1", "-https-port", "-1", "-grpc-port", "-1",
		"-grpc-tls-port", "-1", "-serf-lan-port", "8301", "-server-port", "8300"); err != nil {
		return err
	}
	body, _ := json.Marshal(map[string]any{"ID": "api1", "Name": "api-service", "Address": "127.0.0.30", "Port": 80})
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodPut, "http://"+searchConsulHTTP+"/v1/agent/service/register", bytes.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && waitAnswer(searchConsulDNS, "api-service.service.consul.", time.Second) == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("consul agent not ready within 30 s (log: %s)", tail(logf))
		}
		time.Sleep(200 * time.Millisecond) // polling a child that has no readiness signal
	}
}

func (b *bench) startSearchUpstream() error {
	host, _, _ := strings.Cut(searchUpstreamAddr, ":")
	for _, a := range []string{searchUpstreamAddr, host + ":" + controlPort} {
		if err := addrFree(a); err != nil {
			return fmt.Errorf("search upstream: %w", err)
		}
	}
	logf := filepath.Join(b.dir, "search-upstream.log")
	args := []string{"-serve-upstream", searchUpstreamAddr, "-zone", "search", "-delay", jitterFaults.Delay.String(),
		"-jitter", jitterFaults.Jitter.String(), "-loss", strconv.FormatFloat(jitterFaults.Loss, 'g', -1, 64),
		"-seed", strconv.FormatUint(b.seed, 10)}
	p, err := b.procs.start("search-upstream", logf, b.self, args...)
	if err != nil {
		return err
	}
	if err := waitAnswer(searchUpstreamAddr, controlName, 10*time.Second); err != nil {
		return fmt.Errorf("search upstream: %w (log: %s)", err, tail(logf))
	}
	return exited(p, logf)
}

// search measures server s: for each ndots a fresh start and a namespace
// whose resolv.conf names it, then each name's lookups.
func (b *bench) search(round int, s string) error {
	for _, ndots := range []int{1, 5} {
		dir := filepath.Join(b.dir, fmt.Sprintf("search-%s-%d-%d", s, round, ndots))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		host, _, _ := strings.Cut(searchAddr(s), ":")
		resolv := filepath.Join(dir, "resolv.conf")
		nss := filepath.Join(dir, "nsswitch.conf")
		if err := os.WriteFile(resolv, []byte(fmt.Sprintf("nameserver %s\nsearch corp.example ec2.internal\noptions ndots:%d\n", host, ndots)), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(nss, []byte("hosts: dns\n"), 0o644); err != nil {
			return err
		}
		p, err := b.startServer(s, round, serverSetup{phase: fmt.Sprintf("search%d", ndots), addr: searchAddr(s),
			upstream: searchUpstreamAddr, cacheSize: b.cacheSize, consulDNS: b.consulDNS(), searchResolvConf: resolv})
		if err != nil {
			return err
		}
		err = b.searchLookups(round, s, ndots, resolv, nss)
		b.procs.stop(p)
		if err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) consulDNS() string {
	if b.consul == "" {
		return ""
	}
	return searchConsulDNS
}

func (b *bench) searchLookups(round int, s string, ndots int, resolv, nss string) error {
	holder, pid, err := b.mountNamespace(resolv, nss)
	if err != nil {
		return err
	}
	defer b.procs.stop(holder)
	upSent := func() (uint64, error) { _, n, err := upstreamCounts(searchUpstreamAddr); return n, err }
	lookup := func(name string) (time.Duration, bool, error) {
		began := time.Now()
		err := exec.Command("nsenter", "--target", strconv.Itoa(pid), "--mount", "--", "getent", "ahosts", name).Run()
		took := time.Since(began)
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 2 {
			return took, false, nil // not found
		}
		return took, err == nil, err
	}
	r := b.res[s]
	for _, n := range searchNames {
		if n.ndots != ndots || (n.consul && b.consul == "") {
			continue
		}
		up0, err := upSent()
		if err != nil {
			return err
		}
		first, found, err := lookup(n.name)
		if err != nil {
			return fmt.Errorf("getent ahosts %s: %w", n.name, err)
		}
		if found != n.exists {
			return fmt.Errorf("%s: getent ahosts %s found %v, want %v", s, n.name, found, n.exists)
		}
		up1, err := upSent()
		if err != nil {
			return err
		}
		var took []time.Duration
		next := time.Now()
		for range b.searchCount {
			next = next.Add(searchEvery)
			time.Sleep(time.Until(next)) // one lookup every searchEvery, as issue 28 asked them
			d, found, err := lookup(n.name)
			if err != nil {
				return fmt.Errorf("getent ahosts %s: %w", n.name, err)
			}
			if found != n.exists {
				return fmt.Errorf("%s: getent ahosts %s found %v, want %v", s, n.name, found, n.exists)
			}
			took = append(took, d)
		}
		up2, err := upSent()
		if err != nil {
			return err
		}
		slices.Sort(took)
		pr := probeResult{latencies: took}
		perLookup := float64(up2-up1) / float64(b.searchCount)
		r.add(searchKey(n.name, ndots, "p50"), ms(pr.percentile(0.5)))
		r.add(searchKey(n.name, ndots, "p99"), ms(pr.percentile(0.99)))
		r.add(searchKey(n.name, ndots, "up"), perLookup)
		r.add(searchKey(n.name, ndots, "first"), ms(first))
		fmt.Printf("  round %d %-8s search: %s ndots:%d: first %.0f ms (%d upstream queries), then p50 %.1f ms, p99 %.1f ms, %.2f upstream queries per lookup\n",
			round, s, n.name, ndots, ms(first), up1-up0, ms(pr.percentile(0.5)), ms(pr.percentile(0.99)), perLookup)
	}
	return nil
}

// mountNamespace starts a process holding a private mount namespace with
// resolv and nss over /etc's, and returns it and its PID.
func (b *bench) mountNamespace(resolv, nss string) (*proc, int, error) {
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
		`set -e; mount --bind "$1" /etc/resolv.conf; mount --bind "$2" /etc/nsswitch.conf; echo ready; exec sleep 3600`,
		"sh", resolv, nss)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, 0, err
	}
	if err := cmd.Start(); err != nil {
		return nil, 0, fmt.Errorf("unshare: %w", err)
	}
	p := b.procs.adopt("namespace", cmd)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		b.procs.stop(p)
		return nil, 0, fmt.Errorf("setting up a mount namespace: %q %v", line, err)
	}
	return p, cmd.Process.Pid, nil
}
