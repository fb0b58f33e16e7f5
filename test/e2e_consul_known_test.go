package test

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/consultest"
)

// TestConsulServiceListForUnknownNames, on a real agent: 64 names asked
// twice that are no service are each read once and kept out; then towerd
// follows the catalog's service list, and further names the agent does
// not have are answered by its DNS (NXDOMAIN) without a read, while a
// service it has is still read and watched from its second question.
func TestConsulServiceListForUnknownNames(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t, consultest.Options{})
	register(t, agent.Client(""), &api.AgentServiceRegistration{ID: "web1", Name: "web", Address: "127.0.0.11", Port: 80})
	d := startConsulTowerd(t, agent, agent.DNSAddr)

	askTwice := func(name string) {
		t.Helper()
		for range 2 {
			m, err := ask(d.UDP, name+".service.consul.", dns.TypeA)
			if err != nil || m.Rcode != dns.RcodeNameError {
				t.Fatalf("%s: %v %v, want NXDOMAIN (the agent's answer)", name, m, err)
			}
		}
	}
	for i := range 64 {
		askTwice(fmt.Sprint("nosuch", i))
		waitMetric(t, d, "towerd_consul_watch_empty_reads_total", float64(i+1), 10*time.Second)
	}
	waitLog(t, d, regexp.MustCompile(`following the catalog's service list`), 10*time.Second)
	for i := range 40 {
		askTwice(fmt.Sprint("unknown", i))
	}
	for range 2 {
		if m, err := ask(d.UDP, "web.service.consul.", dns.TypeA); err != nil || m.Rcode != dns.RcodeSuccess {
			t.Fatalf("web: %v %v", m, err)
		}
	}
	// web's read comes after any the unknown names would have asked for.
	waitMetric(t, d, "towerd_consul_watch_watched_services", 1, 10*time.Second)
	if n := towerdMetric(t, d, "towerd_consul_watch_empty_reads_total"); n != 64 {
		t.Errorf("empty reads %v after 40 names the service list lacks, want 64", n)
	}
}
