package test

import (
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/consultest"
)

// TestConsulAnswersMatchAgent: for a service with two instances and tags,
// and one with an IPv6 address, towerd's answers from its watch carry the
// same record sets as the real agent's DNS gives for the same questions: A,
// AAAA (also NODATA), SRV with its additional records, the tag forms, the dc
// forms and a question in mixed letter case. towerd's "consul." zone points
// at a dead port, so each of its answers came from memory (the services are
// pinned: watched from the start, not after a first question).
func TestConsulAnswersMatchAgent(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t, consultest.Options{})
	c := agent.Client("")
	register(t, c, &api.AgentServiceRegistration{ID: "web1", Name: "web", Tags: []string{"primary", "v1"},
		Address: "127.0.0.10", Port: 8080, Weights: &api.AgentWeights{Passing: 5, Warning: 1}})
	register(t, c, &api.AgentServiceRegistration{ID: "web2", Name: "web", Tags: []string{"v1"}, Port: 8081})
	register(t, c, &api.AgentServiceRegistration{ID: "db1", Name: "db", Address: "::1", Port: 5432})
	d := startConsulTowerd(t, agent, deadPort(t), "-config", writeConfig(t, "[consul]\n"+pins("web", "db")))

	questions := []struct {
		name  string
		qtype uint16
	}{
		{"web.service.consul.", dns.TypeA},
		{"web.service.consul.", dns.TypeSRV},
		{"web.service.consul.", dns.TypeAAAA}, // NODATA: no IPv6 instance
		{"web.service.dc1.consul.", dns.TypeA},
		{"web.service.dc1.consul.", dns.TypeSRV},
		{"web.service.dc1.dc.consul.", dns.TypeSRV},
		{"v1.web.service.consul.", dns.TypeA},
		{"v1.web.service.consul.", dns.TypeSRV},
		{"primary.web.service.consul.", dns.TypeSRV},
		{"primary.web.service.dc1.consul.", dns.TypeA},
		{"_web._v1.service.consul.", dns.TypeSRV},
		{"_web._tcp.service.consul.", dns.TypeSRV},
		{"Web.Service.DC1.Consul.", dns.TypeSRV},
		{"db.service.consul.", dns.TypeAAAA},
		{"db.service.consul.", dns.TypeSRV},
		{"db.service.consul.", dns.TypeA}, // NODATA: no IPv4 instance
	}
	for _, q := range questions {
		label := q.name + " " + dns.TypeToString[q.qtype]
		fromAgent, err := ask(agent.DNSAddr, q.name, q.qtype)
		if err != nil {
			t.Fatalf("%s from the agent: %v", label, err)
		}
		fromTowerd, err := ask(d.UDP, q.name, q.qtype)
		if err != nil {
			t.Fatalf("%s from towerd: %v", label, err)
		}
		want, got := recordsOf(fromAgent), recordsOf(fromTowerd)
		if len(want.Answer) == 0 && len(want.Authority) == 0 {
			t.Fatalf("%s: the agent gave an empty reply; the catalog is not as registered:\n%v", label, want)
		}
		if q.name != strings.ToLower(q.name) {
			// Spelled for the client, as on every path (docs/consul.md).
			want, got = want.folded(), got.folded()
			if !ownersAre(fromTowerd, q.name) {
				t.Errorf("%s: answer owners not spelled as asked: %v", label, fromTowerd.Answer)
			}
		}
		if !got.equal(want) {
			t.Errorf("%s:\ntowerd %v\nagent  %v", label, got, want)
		}
		if len(ede(fromTowerd)) != 0 {
			t.Errorf("%s: towerd marked a fresh watched answer with EDE %v", label, ede(fromTowerd))
		}
	}

	// What the watch does not cover takes the normal path: here the dead
	// port, so SERVFAIL.
	for _, name := range []string{agent.Node + ".node.consul.", "nope.web.service.consul."} {
		m, err := ask(d.UDP, name, dns.TypeA)
		if err != nil || m.Rcode != dns.RcodeServerFailure {
			t.Errorf("%s A: %v %v, want SERVFAIL from the unreachable Consul DNS", name, m, err)
		}
	}
}

// TestConsulWatchFollowsChanges: a third instance, an instance whose check
// fails, and a deregistered service each show in towerd's answers within a
// second, while towerd cannot reach the agent's DNS at all.
func TestConsulWatchFollowsChanges(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t, consultest.Options{})
	c := agent.Client("")
	ttlCheck := func() *api.AgentServiceCheck {
		return &api.AgentServiceCheck{TTL: "10m", Status: api.HealthPassing}
	}
	register(t, c, &api.AgentServiceRegistration{ID: "web1", Name: "web", Address: "127.0.0.11", Port: 80, Check: ttlCheck()})
	register(t, c, &api.AgentServiceRegistration{ID: "web2", Name: "web", Address: "127.0.0.12", Port: 80, Check: ttlCheck()})
	register(t, c, &api.AgentServiceRegistration{ID: "api1", Name: "api", Address: "127.0.0.31", Port: 80})
	d := startConsulTowerd(t, agent, deadPort(t), "-config", writeConfig(t, "[consul]\n"+pins("web", "api")))

	addressesAre := func(want ...string) func(*dns.Msg) bool {
		return func(m *dns.Msg) bool { return m.Rcode == dns.RcodeSuccess && slices.Equal(sortedAddresses(m), want) }
	}
	follow(t, d, "web.service.consul.", dns.TypeA, "initial state", addressesAre("127.0.0.11", "127.0.0.12"))
	follow(t, d, "api.service.consul.", dns.TypeA, "initial state", addressesAre("127.0.0.31"))

	if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "web3", Name: "web",
		Address: "127.0.0.13", Port: 80, Check: ttlCheck()}); err != nil {
		t.Fatal(err)
	}
	follow(t, d, "web.service.consul.", dns.TypeA, "third instance registered",
		addressesAre("127.0.0.11", "127.0.0.12", "127.0.0.13"))

	if err := c.Agent().UpdateTTL("service:web2", "failing on purpose", api.HealthCritical); err != nil {
		t.Fatal(err)
	}
	follow(t, d, "web.service.consul.", dns.TypeA, "web2's check failed", addressesAre("127.0.0.11", "127.0.0.13"))

	if err := c.Agent().ServiceDeregister("api1"); err != nil {
		t.Fatal(err)
	}
	// No longer answered from the watch (still watched, pinned, but its
	// health result is empty): the question goes to Consul's DNS,
	// unreachable here, hence SERVFAIL; a reachable one says NXDOMAIN.
	follow(t, d, "api.service.consul.", dns.TypeA, "api deregistered", func(m *dns.Msg) bool {
		return m.Rcode == dns.RcodeServerFailure
	})

	// The SRV answer followed too (same watch, other record type).
	m, err := ask(d.UDP, "web.service.consul.", dns.TypeSRV)
	if err != nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 2 {
		t.Errorf("web SRV after the changes: %v %v, want 2 records", m, err)
	}
}
