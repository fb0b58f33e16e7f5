package consul

import (
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Answer says why it left a name of the Consul domain to Consul's DNS
// (issue 25: `towerd lookup` said "covers" for node names and services that
// do not exist), WhyWatch when it answered, and nothing for other names.
func TestAnswerSaysWhy(t *testing.T) {
	clk := newFakeClock()
	w, err := New(Config{Address: "127.0.0.1:1", MaxStale: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w.clock = clk
	if _, _, why, ok := w.Answer(question("vm.node.consul.", dns.TypeA)); ok || why != "" {
		t.Errorf("before the agent was read: ok %v why %q, want neither (the domain is not known)", ok, why)
	}
	w.info.Store(&agentInfo{datacenter: "dc1", domain: "consul."})
	w.store.set("web", []instance{web1, web2}, nil)
	w.store.set("old", []instance{web1}, nil)
	markWatched(w, "web", "empty", "old")
	w.store.contact("old", true, clk.Now().Add(-time.Minute))
	for _, tc := range []struct {
		q   dns.Question
		ok  bool
		why string
	}{
		{question("web.service.consul.", dns.TypeA), true, WhyWatch},
		{question("WEB.Service.Consul.", dns.TypeSRV), true, WhyWatch},
		{question("vm.node.consul.", dns.TypeA), false, whyNotService},
		{question("web.query.consul.", dns.TypeA), false, whyNotService},
		{question("web.service.consul.", dns.TypeTXT), false, whyType},
		{question("web.service.dc2.consul.", dns.TypeA), false, whyOtherDC},
		{question("nope.web.service.consul.", dns.TypeA), false, whyNoTag},
		{question("missing.service.consul.", dns.TypeA), false, whyNotWatched},
		{question("empty.service.consul.", dns.TypeA), false, whyNoInstances},
		{question("old.service.consul.", dns.TypeA), false, whyTooOld},
		{question("www.example.org.", dns.TypeA), false, ""},
		{question("consul.example.org.", dns.TypeTXT), false, ""},
	} {
		_, _, why, ok := w.Answer(tc.q)
		if ok != tc.ok || why != tc.why {
			t.Errorf("%s %s: ok %v why %q, want %v %q", tc.q.Name, dns.TypeToString[tc.q.Qtype], ok, why, tc.ok, tc.why)
		}
	}
	list := knownServices{"web": {}, "old": {}, "empty": {}}
	w.knownList.Store(&list) // following the service list
	if _, _, why, _ := w.Answer(question("missing.service.consul.", dns.TypeA)); why != whyNotListed {
		t.Errorf("following the service list, a service it lacks: why %q, want %q", why, whyNotListed)
	}
	w.info.Store(&agentInfo{domain: "consul."})
	if _, _, why, _ := w.Answer(question("web.service.consul.", dns.TypeA)); why != whyNoDC {
		t.Errorf("without a datacenter: why %q, want %q", why, whyNoDC)
	}
}
