package test

import (
	"regexp"
	"slices"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/consultest"
)

// The query log's lines for answers from the Consul watch, with a real
// agent: source=consul while the watch reaches the agent, source=stale once
// it is gone and the last known records are served (the lines for cache and
// upstream answers are in TestCLIAgainstDaemon; a stale cache entry's line
// in resolver's TestQueryLogLines, on a fake clock). log_queries = true in
// the file turns the log on from the start.
func TestQueryLogConsulWatch(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t, consultest.Options{})
	register(t, agent.Client(""), &api.AgentServiceRegistration{ID: "web1", Name: "web", Address: "127.0.0.21", Port: 80})
	cfg := writeConfig(t, "log_queries = true\n")
	d := startConsulTowerd(t, agent, deadPort(t), "-config", cfg)

	isWeb := func(m *dns.Msg) bool {
		return m.Rcode == dns.RcodeSuccess && slices.Equal(sortedAddresses(m), []string{"127.0.0.21"})
	}
	follow(t, d, "web.service.consul.", dns.TypeA, "answered from the watch", isWeb)
	watchLine := regexp.MustCompile(`level=INFO msg=query client=127\.0\.0\.1 name=web\.service\.consul\. type=A rcode=NOERROR source=consul zone=consul\. proto=udp duration=\S+`)
	waitLog(t, d, watchLine, readyTimeout)

	agent.Kill()
	follow(t, d, "web.service.consul.", dns.TypeA, "served stale from the watch", func(m *dns.Msg) bool {
		return isWeb(m) && slices.Contains(ede(m), dns.ExtendedErrorCodeStaleAnswer)
	})
	staleLine := regexp.MustCompile(`level=INFO msg=query client=127\.0\.0\.1 name=web\.service\.consul\. type=A rcode=NOERROR source=stale zone=consul\. proto=udp duration=\S+`)
	waitLog(t, d, staleLine, readyTimeout)
}
