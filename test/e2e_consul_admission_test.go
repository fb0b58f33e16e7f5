package test

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/consultest"
	"github.com/towerd/towerd/test/dnstest"
	"github.com/towerd/towerd/test/faultproxy"
)

// The watch set when a node asks for more than it may watch, and for names
// that do not exist (issue 24), against one Consul server and four client
// agents with default limits, a towerd per client. Every figure asserted is
// a count: RPCs and stream starts from the agents' /v1/agent/metrics, bytes
// from the kernel's counters of the agent–server connections, watches and
// refusals from towerd's /metrics. Their values are in docs/fleet-scale.md.
const (
	admissionCatalog = 300
	// scaleEnv, set to a number of services (2000 in docs/fleet-scale.md),
	// adds a round-robin over that many, 5 times, on two more client agents:
	// minutes, so not part of make test (make fleet-scale).
	scaleEnv = "TOWERD_FLEET_SERVICES"
	// defaultCap is consul.max_watches' default; viewBound the bound on the
	// agent's streaming views for a node, the cap and a quarter.
	defaultCap = 64
	viewBound  = defaultCap + defaultCap/4
)

// cost is what one agent paid the servers over a phase.
type cost struct {
	rpcs, streams float64 // consul.client.rpc, consul.grpc.client.request.count
	bytes         uint64  // both ways, agent ↔ server
}

func agentCost(t *testing.T, agent, server *consultest.Agent) cost {
	t.Helper()
	m := agent.Metrics(t)
	sent, received := agent.BytesTo(t, server)
	return cost{rpcs: consultest.Sum(m, "consul_client_rpc"),
		streams: consultest.Sum(m, "consul_grpc_client_request_count"), bytes: sent + received}
}

func (c cost) minus(o cost) cost {
	return cost{rpcs: c.rpcs - o.rpcs, streams: c.streams - o.streams, bytes: c.bytes - o.bytes}
}

func (c cost) String() string {
	return fmt.Sprintf("%.0f RPCs, %.0f streams, %.2f MB", c.rpcs, c.streams, float64(c.bytes)/1e6)
}

// askRoundRobin asks towerd for the services in order, rounds times, and
// counts the answers that were not exactly the service's address.
func askRoundRobin(t *testing.T, d *towerd, services []int, rounds int) (wrong int) {
	t.Helper()
	c := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
	for range rounds {
		for _, i := range services {
			m, _, err := c.Exchange(query(fleetName(i)+".service.consul.", dns.TypeA, true), d.UDP)
			if err != nil || m.Rcode != dns.RcodeSuccess || !slices.Equal(sortedAddresses(m), []string{fleetAddr(i)}) {
				if wrong == 0 {
					t.Errorf("%s: %v %v, want %s", fleetName(i), m, err, fleetAddr(i))
				}
				wrong++
			}
		}
	}
	return wrong
}

// run is one round-robin: a number of services asked rounds times, through
// a towerd with the watch on and one with it off, each on its own agent.
type run struct {
	services, rounds int
	on, off          *consultest.Agent
	towerdOn         *towerd
	proxyOn          *faultproxy.Proxy
	costOn, costOff  cost
}

func span(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

// TestConsulFleetAdmission: 80 and 200 services asked round-robin at the
// default cap (64) cost a node's agent no more RPCs and bytes than the same
// questions with the watch off, hold at most 64 + 16 streams, and never
// evict; services then asked more often than the rest displace the least
// asked and are answered from memory; names without instances hold no
// watch, connection or stream; a watched service deregistered and
// registered again is NXDOMAIN and answered again within a second each.
func TestConsulFleetAdmission(t *testing.T) {
	t.Parallel()
	runs := []*run{{services: 80, rounds: 30}, {services: 200, rounds: 12}}
	catalog := admissionCatalog
	if v := os.Getenv(scaleEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a number of services", scaleEnv, v)
		}
		runs = append(runs, &run{services: n, rounds: 5})
		catalog = max(catalog, n)
	}
	cluster := consultest.StartCluster(t, 2*len(runs))
	server := cluster.Server.Client("")
	registerCatalog(t, server, catalog)
	for i := range 5 { // all-critical services: Consul's DNS says NXDOMAIN
		id := fmt.Sprintf("crit%d", i)
		if _, err := server.Catalog().Register(&api.CatalogRegistration{Node: "ext", Address: "10.9.0.1",
			Service: &api.AgentService{ID: id, Service: id, Port: 1},
			Check:   &api.AgentCheck{CheckID: id + "-down", Name: "down", Status: api.HealthCritical, ServiceID: id}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cluster.Clients {
		waitCatalog(t, c.Client(""), fleetName(catalog-1), func(e []*api.CatalogService) bool { return len(e) == 1 })
	}

	// Round-robin, the watch on (even clients) and off (odd), at the same
	// time: 80 services 30 times, 200 services 12 times.
	var wg sync.WaitGroup
	for k, r := range runs {
		r.on, r.off = cluster.Clients[2*k], cluster.Clients[2*k+1]
		r.proxyOn = startConsulDNSProxy(t, r.on.DNSAddr, faultproxy.Faults{}, uint64(k))
		r.towerdOn = startFleetTowerd(t, r.on, r.proxyOn.Addr(), t.TempDir(), "")
		off := startTowerd(t, "-config", writeConfig(t, "[consul]\nenabled = false\n"), "-listen", "127.0.0.1:0",
			"-upstream", newTestUpstream(t).Addr, "-consul-dns", r.off.DNSAddr)
		for _, side := range []struct {
			d     *towerd
			agent *consultest.Agent
			cost  *cost
		}{{r.towerdOn, r.on, &r.costOn}, {off, r.off, &r.costOff}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				before := agentCost(t, side.agent, cluster.Server)
				if wrong := askRoundRobin(t, side.d, span(0, r.services), r.rounds); wrong != 0 {
					t.Errorf("%d services round-robin: %d wrong answers", r.services, wrong)
				}
				*side.cost = agentCost(t, side.agent, cluster.Server).minus(before)
			}()
		}
	}
	wg.Wait()
	for _, r := range runs {
		d := r.towerdOn
		t.Logf("%d services × %d rounds at cap %d: watch on %v; watch off %v; watched %v, refused (frequency) %v, "+
			"evictions (cap) %v", r.services, r.rounds, defaultCap, r.costOn, r.costOff,
			towerdMetric(t, d, "towerd_consul_watch_watched_services"),
			towerdMetric(t, d, `towerd_consul_watch_refused_total{reason="frequency"}`),
			towerdMetric(t, d, `towerd_consul_watch_evictions_total{reason="cap"}`))
		if r.costOn.rpcs > r.costOff.rpcs || r.costOn.bytes > r.costOff.bytes {
			t.Errorf("%d services round-robin: the watch cost %v, more than the watch off (%v)", r.services, r.costOn, r.costOff)
		}
		if r.costOn.streams > viewBound {
			t.Errorf("%d services round-robin: %v streams started, want at most %d", r.services, r.costOn.streams, viewBound)
		}
		for series, want := range map[string]float64{"towerd_consul_watch_watched_services": defaultCap,
			"towerd_consul_watch_starts_total": defaultCap, `towerd_consul_watch_evictions_total{reason="cap"}`: 0,
			"towerd_consul_watch_agent_429s_total": 0} {
			if v := towerdMetric(t, d, series); v != want {
				t.Errorf("%d services round-robin: %s = %v, want %v", r.services, series, v, want)
			}
		}
		if v := towerdMetric(t, d, `towerd_consul_watch_refused_total{reason="frequency"}`); v == 0 {
			t.Errorf("%d services round-robin: no admission refused", r.services)
		}
	}

	// The 200 node: ten of the services it does not watch are now asked six
	// times as often as the rest. They displace the least asked watches
	// (within the bound on views) and are answered from memory.
	r := runs[1]
	var hot []int
	for i := range r.services {
		if r.proxyOn.Count(fleetName(i)+".service.consul.") == r.rounds && len(hot) < 10 {
			hot = append(hot, i) // every question reached the agent's DNS: not watched
		}
	}
	if len(hot) != 10 {
		t.Fatalf("found %d unwatched services on the 200 node, want 10", len(hot))
	}
	mix := span(0, r.services)
	for range 5 {
		mix = append(mix, hot...)
	}
	before := agentCost(t, r.on, cluster.Server)
	if wrong := askRoundRobin(t, r.towerdOn, mix, 4); wrong != 0 {
		t.Errorf("hot services: %d wrong answers", wrong)
	}
	waitMetric(t, r.towerdOn, `towerd_consul_watch_evictions_total{reason="cap"}`, 10, 10*time.Second)
	for _, i := range hot {
		name := fleetName(i) + ".service.consul."
		n := r.proxyOn.Count(name)
		expectAddress(t, r.towerdOn, name, fleetAddr(i), "a hot service")
		if r.proxyOn.Count(name) != n {
			t.Errorf("%s, asked six times as often as the rest, is still not answered from memory", name)
		}
	}
	hotCost := agentCost(t, r.on, cluster.Server).minus(before)
	views := towerdMetric(t, r.towerdOn, "towerd_consul_watch_agent_views")
	t.Logf("10 hot services among 200: %v, towerd counts %v agent views", hotCost, views)
	if streams := r.costOn.streams + hotCost.streams; streams > viewBound || views > viewBound {
		t.Errorf("after the hot services: %v streams started, %v views counted, want at most %d", streams, views, viewBound)
	}

	// Names without instances, on the 80 node's other agent: a towerd with
	// five services watched; 20 names that are no service and the 5
	// all-critical ones, each asked 10 times, start nothing.
	agent := runs[0].off
	d := startFleetTowerd(t, agent, agent.DNSAddr, t.TempDir(), "")
	for _, i := range span(0, 5) {
		for range 2 {
			expectAddress(t, d, fleetName(i)+".service.consul.", fleetAddr(i), "a service to watch")
		}
	}
	waitMetric(t, d, "towerd_consul_watch_agent_views", 5, 10*time.Second)
	conns, base := connsTo(t, d, agent.HTTPAddr), agentCost(t, agent, cluster.Server)
	var junk []string
	for i := range 20 {
		junk = append(junk, fmt.Sprintf("nosuch%d", i))
	}
	for i := range 5 {
		junk = append(junk, fmt.Sprintf("crit%d", i))
	}
	for range 10 {
		for _, name := range junk {
			m, err := ask(d.UDP, name+".service.consul.", dns.TypeA)
			if err != nil || m.Rcode != dns.RcodeNameError {
				t.Fatalf("%s: %v %v, want NXDOMAIN (the agent's answer)", name, m, err)
			}
		}
	}
	waitMetric(t, d, "towerd_consul_watch_empty_reads_total", 25, 10*time.Second)
	junkCost := agentCost(t, agent, cluster.Server).minus(base)
	t.Logf("25 names without instances × 10: %v; connections to the agent %d → %d", junkCost, conns,
		connsTo(t, d, agent.HTTPAddr))
	for series, want := range map[string]float64{"towerd_consul_watch_watched_services": 5,
		"towerd_consul_watch_starts_total": 5, "towerd_consul_watch_kept_out_names": 25,
		"towerd_consul_watch_agent_views": 5} {
		if v := towerdMetric(t, d, series); v != want {
			t.Errorf("after 25 names without instances: %s = %v, want %v", series, v, want)
		}
	}
	if junkCost.streams != 0 {
		t.Errorf("names without instances started %v streams, want 0", junkCost.streams)
	}
	if n := connsTo(t, d, agent.HTTPAddr); n > conns {
		t.Errorf("names without instances: %d connections to the agent, %d before", n, conns)
	}

	// A watched service deregistered, then registered again.
	name := fleetName(0) + ".service.consul."
	if _, err := server.Catalog().Deregister(&api.CatalogDeregistration{Node: "ext", ServiceID: fleetName(0)}, nil); err != nil {
		t.Fatal(err)
	}
	follow(t, d, name, dns.TypeA, "deregistered", func(m *dns.Msg) bool { return m.Rcode == dns.RcodeNameError })
	registerCatalog(t, server, 1)
	follow(t, d, name, dns.TypeA, "registered again", func(m *dns.Msg) bool {
		return m.Rcode == dns.RcodeSuccess && slices.Equal(sortedAddresses(m), []string{fleetAddr(0)}) && len(ede(m)) == 0
	})
	for series, want := range map[string]float64{"towerd_consul_watch_starts_total": 5,
		`towerd_consul_watch_evictions_total{reason="empty"}`: 0} {
		if v := towerdMetric(t, d, series); v != want {
			t.Errorf("after the service came back: %s = %v, want %v (its watch kept, within the grace)", series, v, want)
		}
	}

	// The agent restarted under 50 questions a second for its node's
	// watched services.
	restartUnderLoad(t, runs[1].off)
}

// restartUnderLoad: a towerd watching ten services on agent, asked 50
// times a second for them while the agent is killed and started again:
// every answer is the service's address (stale, EDE 3, while the agent is
// away), and none is stale more than a second after the agent answers
// again; the watch resynced.
func restartUnderLoad(t *testing.T, agent *consultest.Agent) {
	t.Helper()
	pinned := make([]string, 10)
	for i := range pinned {
		pinned[i] = fleetName(i)
	}
	d := startFleetTowerd(t, agent, deadPort(t), t.TempDir(), pins(pinned...))
	type answer struct {
		at    time.Time
		stale bool
	}
	var (
		mu      sync.Mutex
		answers []answer
		failed  int
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
		tick := time.NewTicker(20 * time.Millisecond) // 50 q/s
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			i := n % len(pinned)
			m, _, err := c.Exchange(query(fleetName(i)+".service.consul.", dns.TypeA, true), d.UDP)
			mu.Lock()
			if err != nil || m.Rcode != dns.RcodeSuccess || !slices.Equal(sortedAddresses(m), []string{fleetAddr(i)}) {
				if failed == 0 {
					t.Errorf("%s during the restart: %v %v", fleetName(i), m, err)
				}
				failed++
			} else {
				answers = append(answers, answer{time.Now(), slices.Contains(ede(m), dns.ExtendedErrorCodeStaleAnswer)})
			}
			mu.Unlock()
		}
	}()
	client := agent.Client("")
	agent.Kill()
	// The agent stays away for two seconds: a timer is the outage, not a
	// synchronisation.
	time.Sleep(2 * time.Second)
	agent.Restart(t)
	// A real agent restarting beside the whole suite: a generous bound.
	dnstest.Eventually(t, func() bool {
		_, _, err := client.Health().Service(fleetName(0), "", false, &api.QueryOptions{AllowStale: true})
		return err == nil
	}, 60*time.Second, "the restarted agent to answer")
	up := time.Now()
	// Three more seconds of questions once the agent answers.
	time.Sleep(3 * time.Second)
	close(stop)
	<-done
	mu.Lock()
	defer mu.Unlock()
	var stale, lateStale int
	var lastStale time.Time
	for _, a := range answers {
		if a.stale {
			stale++
			lastStale = a.at
			if a.at.After(up.Add(time.Second)) {
				lateStale++
			}
		}
	}
	t.Logf("agent restart under 50 q/s: %d answers, %d failed, %d stale, the last %v after the agent answered again",
		len(answers), failed, stale, lastStale.Sub(up).Round(time.Millisecond))
	if failed != 0 || stale == 0 || lateStale != 0 {
		t.Errorf("agent restart: %d failed, %d stale, %d stale more than 1s after the agent answered; want 0, some, 0",
			failed, stale, lateStale)
	}
	if v := towerdMetric(t, d, "towerd_consul_watch_resyncs_total"); v < 1 {
		t.Errorf("resyncs_total %v after the agent came back, want at least 1", v)
	}
}
