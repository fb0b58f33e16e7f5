package test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/towerd/towerd/test/consultest"
	"github.com/towerd/towerd/test/dnstest"
	"github.com/towerd/towerd/test/netns"
)

// The day towerd exists for, as one test (issue 23): three nodes, each a
// network namespace on a LAN of namespaces; a real Consul server on the
// first and client agents on the others; the site's shared DNS, a real
// dnsmasq, behind the fault proxy (delay, jitter and loss, then a black
// hole); a service whose health check resolves a site name; a gateway
// resolving through glibc (getent, in a mount namespace with its own
// resolv.conf). Every node runs towerd on 127.0.0.1:53, and every lookup
// and check is made twice: through towerd, and straight at the shared DNS
// (what the nodes did before). Through towerd every lookup succeeds and no
// check flips; straight at the shared DNS the failures show, so the test
// can fail.

// Phases of the day.
const (
	dayFaults    = 25 * time.Second // 100 ± 50 ms each way, 0.5 % loss each way
	dayBlackhole = 25 * time.Second // the shared DNS silent
)

// dayLookup is one getent of the gateway.
type dayLookup struct {
	start, end time.Time
	name       string
	ok         bool
}

// dayCheck is a check state seen at a time.
type dayCheck struct {
	at     time.Time
	check  string
	status string
}

func TestSiteDay(t *testing.T) {
	if why := netns.Usable(); why != "" {
		t.Skip(why)
	}
	for _, tool := range []string{"unshare", "mount", "getent", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: %v", tool, err)
		}
	}
	t.Parallel()
	prefix := netns.Prefix()
	lan := netns.NewLAN(t, prefix, 23)
	var nodes []*netns.Namespace
	for i := 1; i <= 3; i++ {
		nodes = append(nodes, lan.Join(t, fmt.Sprintf("%sn%d", prefix, i), i))
	}
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sharedDNS := lan.Addr(254)
	viaTowerd := file("resolv-towerd.conf", "nameserver 127.0.0.1\n")
	direct := file("resolv-direct.conf", "nameserver "+sharedDNS+"\n")
	nsswitch := file("nsswitch.conf", "hosts: files dns\n")
	// inNode runs argv in node n with resolv as its /etc/resolv.conf, in a
	// mount namespace of its own.
	inNode := func(n *netns.Namespace, resolv string, argv ...string) *exec.Cmd {
		return n.Command("unshare", append([]string{"-m", "--propagation", "private", "sh", "-c",
			`mount --bind "$1" /etc/resolv.conf && mount --bind "$2" /etc/nsswitch.conf && shift 2 && exec "$@"`,
			"sh", resolv, nsswitch}, argv...)...)
	}
	stopBySignal := func(p *process) {
		t.Cleanup(func() {
			if p.running() {
				p.signal(t, syscall.SIGTERM)
				p.waitExit(t, stopTimeout)
			}
		})
	}

	// The shared DNS: dnsmasq on the LAN's loopback, the fault proxy on
	// the LAN in front of it.
	startDnsmasqBy(t, lan.Command, siteConf(t, 5353, 5, "db.corp.test,10.23.0.200", "api.corp.test,10.23.0.201,2001:db8::201"))
	proxy := startProxyProc(t, []string{"ip", "netns", "exec", lan.Name}, net.JoinHostPort(sharedDNS, "53"), "127.0.0.1:5353", 23)

	// Consul: a server on node 1, client agents on nodes 2 and 3; their
	// checks resolve through towerd (their resolv.conf). Script checks come
	// through the HTTP API, which listens on the node's own loopback only.
	consul := consultest.Binary(t)
	for i, n := range nodes {
		args := []string{consul, "agent", "-bind", lan.Addr(i + 1), "-client", "127.0.0.1",
			"-node", fmt.Sprintf("node%d", i+1), "-data-dir", filepath.Join(dir, fmt.Sprintf("consul%d", i+1)),
			"-hcl", "enable_script_checks = true", "-serf-wan-port", "-1", "-grpc-port", "-1"}
		if i == 0 {
			args = append(args, "-dev")
		} else {
			args = append(args, "-retry-join", lan.Addr(1), "-retry-interval", "1s")
		}
		stopBySignal(startProcess(t, inNode(n, viaTowerd, args...)))
	}
	clients := make([]*api.Client, len(nodes))
	for i, n := range nodes {
		c, err := api.NewClient(&api.Config{Address: "127.0.0.1:8500",
			Transport: &http.Transport{DialContext: n.DialContext}})
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = c
		waitAgent(t, c, fmt.Sprintf("node%d", i+1))
	}

	// towerd on every node: "." at the shared DNS, consul. at the node's
	// agent.
	for _, n := range nodes {
		d := startProcess(t, inNode(n, viaTowerd, towerdBin, "-config", "", "-log-level", "debug",
			"-listen", "127.0.0.1:53", "-admin", "127.0.0.1:9153", "-state-dir", "",
			"-upstream", sharedDNS, "-consul-dns", "127.0.0.1:8600", "-consul-http", "127.0.0.1:8500"))
		t.Cleanup(func() {
			if d.running() {
				d.signal(t, syscall.SIGTERM)
			}
			if code := d.waitExit(t, stopTimeout); code != 0 {
				t.Errorf("towerd in %s exited %d", n.Name, code)
			}
			if strings.Contains(d.stderr.String(), "WARNING: DATA RACE") {
				t.Errorf("towerd in %s reported a data race", n.Name)
			}
			if t.Failed() {
				t.Logf("towerd in %s:\n%s", n.Name, lastLines(d.stderr.String(), 60))
			}
		})
		if _, err := d.stderr.waitFor(servingLine, readyTimeout, d.exited); err != nil {
			t.Fatalf("towerd in %s did not start: %v\n%s", n.Name, err, d.stderr)
		}
	}

	// The services: web on node 1; on node 2 a service whose check
	// resolves the site's database, once through towerd and once straight
	// at the shared DNS.
	if err := clients[0].Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "web1", Name: "web",
		Address: lan.Addr(1), Port: 80}); err != nil {
		t.Fatal(err)
	}
	checkVia := file("check-towerd.sh", "#!/bin/sh\nexec getent ahosts db.corp.test >/dev/null\n")
	checkDirect := file("check-direct.sh", "#!/bin/sh\nexec unshare -m --propagation private sh -c "+
		`'mount --bind "$0" /etc/resolv.conf && exec getent ahosts db.corp.test >/dev/null' `+direct+"\n")
	for id, script := range map[string]string{"app": checkVia, "app-direct": checkDirect} {
		if err := clients[1].Agent().ServiceRegister(&api.AgentServiceRegistration{ID: id, Name: id, Port: 8080,
			Check: &api.AgentServiceCheck{CheckID: id, Args: []string{"/bin/sh", script},
				Interval: "1s", Timeout: "3s"}}); err != nil {
			t.Fatal(err)
		}
	}

	// The gateway on node 3: getent in a loop, through towerd and straight.
	loop := `while :; do for n in $NAMES; do s=$(date +%s%N); if getent ahosts "$n" >/dev/null 2>&1; ` +
		`then r=ok; else r=fail; fi; echo "$s $(date +%s%N) $n $r"; done; sleep 0.2; done`
	gateway := func(resolv, names string) *process {
		cmd := inNode(nodes[2], resolv, "env", "NAMES="+names, "sh", "-c", loop)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		p := startProcess(t, cmd)
		t.Cleanup(func() {
			if p.running() {
				_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM) // the loop's own process group
				p.waitExit(t, stopTimeout)
			}
		})
		return p
	}
	gwTowerd := gateway(viaTowerd, "db.corp.test api.corp.test web.service.consul")
	gwDirect := gateway(direct, "db.corp.test api.corp.test")

	// Check states, read every 250 ms from node 2's agent.
	var (
		checksMu sync.Mutex
		checks   []dayCheck
	)
	ctx, stopWatching := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, id := range []string{"app", "app-direct"} {
				hc, _, err := clients[1].Health().Checks(id, (&api.QueryOptions{}).WithContext(ctx))
				if err != nil {
					continue
				}
				for _, c := range hc {
					if c.CheckID == id {
						checksMu.Lock()
						checks = append(checks, dayCheck{at: time.Now(), check: id, status: c.Status})
						checksMu.Unlock()
					}
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { stopWatching(); <-watched })

	// Warm: both checks passing, every name answered both ways.
	var passing, okNames map[string]bool
	defer func() {
		if t.Failed() {
			t.Logf("last seen: checks %v, names answered %v", passing, okNames)
		}
	}()
	dnstest.Eventually(t, func() bool {
		checksMu.Lock()
		passing = map[string]bool{}
		for _, c := range checks {
			passing[c.check] = c.status == api.HealthPassing
		}
		checksMu.Unlock()
		okNames = map[string]bool{}
		for _, l := range append(parseLookups(gwTowerd), parseLookups(gwDirect)...) {
			okNames[l.name] = okNames[l.name] || l.ok
		}
		return passing["app"] && passing["app-direct"] && len(okNames) == 3 && okNames["db.corp.test"] &&
			okNames["api.corp.test"] && okNames["web.service.consul"]
	}, 60*time.Second, "warm: both checks passing, every name answered both ways")

	faultsAt := time.Now()
	proxy.send(t, "faults 100ms 50ms 0.005")
	time.Sleep(dayFaults) // the day's first phase runs; not a synchronisation
	holeAt := time.Now()
	proxy.send(t, "blackhole on")
	time.Sleep(dayBlackhole) // the outage runs; not a synchronisation
	endAt := time.Now()
	st := proxy.stop(t)
	stopWatching()
	<-watched
	t.Logf("shared DNS proxy: %+v", st)

	phase := func(at time.Time) string {
		switch {
		case at.Before(faultsAt):
			return "warm"
		case at.Before(holeAt):
			return "faults"
		case at.Before(endAt):
			return "black hole"
		}
		return "after"
	}
	type tally struct {
		lookups, failed int
		slowest         time.Duration
	}
	summarize := func(label string, lookups []dayLookup) map[string]*tally {
		by := map[string]*tally{}
		for _, l := range lookups {
			p := phase(l.start)
			if by[p] == nil {
				by[p] = &tally{}
			}
			by[p].lookups++
			if !l.ok {
				by[p].failed++
			}
			by[p].slowest = max(by[p].slowest, l.end.Sub(l.start))
		}
		for _, p := range []string{"faults", "black hole"} {
			if x := by[p]; x != nil {
				t.Logf("%s, %s: %d lookups, %d failed, slowest %v", label, p, x.lookups, x.failed, x.slowest.Round(time.Millisecond))
			}
		}
		return by
	}
	viaT := summarize("gateway through towerd", parseLookups(gwTowerd))
	viaD := summarize("gateway straight at the shared DNS", parseLookups(gwDirect))
	flips := map[string]int{}
	checksMu.Lock()
	for _, c := range checks {
		if p := phase(c.at); (p == "faults" || p == "black hole") && c.status != api.HealthPassing {
			flips[c.check+" in "+p]++
		}
	}
	checksMu.Unlock()
	t.Logf("check readings not passing: %v", flips)

	for _, p := range []string{"faults", "black hole"} {
		if x := viaT[p]; x == nil || x.lookups < 10 || x.failed != 0 {
			t.Errorf("through towerd, %s: %+v; want every lookup answered (at least 10)", p, x)
		}
		if n := flips["app in "+p]; n != 0 {
			t.Errorf("the check through towerd was not passing %d times in the %s", n, p)
		}
	}
	// Straight at the shared DNS the outage shows: so this test can fail.
	if x := viaD["black hole"]; x == nil || x.failed == 0 {
		t.Errorf("straight at the shared DNS, black hole: %+v; want failures (else the day did not happen)", x)
	}
	if flips["app-direct in black hole"] == 0 {
		t.Errorf("the check straight at the shared DNS never flipped in the outage; the day did not happen")
	}
}

// waitAgent waits until c's agent has a leader and its node is in the
// catalog: a real agent in a namespace, starting beside the whole day's
// processes, hence the generous bound.
func waitAgent(t *testing.T, c *api.Client, node string) {
	t.Helper()
	dnstest.Eventually(t, func() bool {
		leader, err := c.Status().Leader()
		if err != nil || leader == "" {
			return false
		}
		n, _, err := c.Catalog().Node(node, nil)
		return err == nil && n != nil
	}, 90*time.Second, "consul agent "+node+" to have a leader and its node in the catalog")
}

// parseLookups reads the gateway loop's lines: "<start ns> <end ns> <name> ok|fail".
func parseLookups(p *process) []dayLookup {
	var out []dayLookup
	for _, line := range strings.Split(p.stdout.String(), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			continue
		}
		s, err1 := strconv.ParseInt(f[0], 10, 64)
		e, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, dayLookup{start: time.Unix(0, s), end: time.Unix(0, e), name: f[2], ok: f[3] == "ok"})
	}
	return out
}
