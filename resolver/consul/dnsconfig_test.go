package consul

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/miekg/dns"
)

// Consul's GetTTLForService: the service's own entry, else the longest
// prefix ("*" the shortest), else 0; entries that do not parse are left
// out.
func TestServiceTTLTable(t *testing.T) {
	table := readTTLTable(map[string]any{
		"web": "10s", "we*": "20s", "*": "5s", "db*": "1m", "bad": "ten", "neg": "-1s", "num": 3.0,
		"huge": "87600h",
	})
	for _, tc := range []struct {
		service string
		want    uint32
	}{
		{"web", 10}, {"webapp", 20}, {"west", 20}, {"db", 60}, {"dbx", 60}, {"api", 5},
		{"bad", 5}, {"neg", 5}, {"num", 5}, {"huge", 86400},
	} {
		if got := table.ttl(tc.service); got != tc.want {
			t.Errorf("ttl(%q) = %d, want %d", tc.service, got, tc.want)
		}
	}
	if got := (ttlTable{}).ttl("web"); got != 0 {
		t.Errorf("no service_ttl: ttl = %d, want Consul's 0", got)
	}
}

// The watch reads service_ttl and the SOA timers from /v1/agent/self as
// the agent writes them there (durations as text, the SOA's fields as
// numbers), and its records carry them: the TTL of the agent's DNS for the
// same service, the agent's SOA on a NODATA. A fixed AnswerTTL wins over
// service_ttl; the SOA stays the agent's.
func TestRecordsFollowTheAgentsDNSConfig(t *testing.T) {
	f := newFakeAPI(t)
	self := `{"Config": {"Datacenter": "dc1"}, "DebugConfig": {"DNSDomain": "consul.",
		"DNSServiceTTL": {"web": "7s", "*": "3s"}, "DNSSOA": {"Refresh": 100, "Retry": 20, "Expire": 3000, "Minttl": 4}}}`
	var body map[string]any
	if err := json.Unmarshal([]byte(self), &body); err != nil {
		t.Fatal(err)
	}
	f.self = reply{body: body}
	client, err := api.NewClient(&api.Config{Address: f.URL})
	if err != nil {
		t.Fatal(err)
	}
	info, err := readAgent(context.Background(), client, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if want := (soaTimers{refresh: 100, retry: 20, expire: 3000, minttl: 4}); info.soa != want {
		t.Errorf("SOA timers %+v, want %+v", info.soa, want)
	}

	for _, tc := range []struct {
		answerTTL time.Duration
		service   string
		want      uint32
	}{
		{AgentTTL, "web", 7}, {AgentTTL, "api", 3}, {9 * time.Second, "web", 9},
	} {
		w, err := New(Config{Address: "127.0.0.1:1", AnswerTTL: tc.answerTTL})
		if err != nil {
			t.Fatal(err)
		}
		w.info.Store(info)
		w.store.set(tc.service, []instance{web1}, nil)
		markWatched(w, tc.service)
		name := tc.service + ".service.consul."
		m, _, ok := ask(w, question(name, dns.TypeA))
		if !ok || len(m.Answer) != 1 || m.Answer[0].Header().Ttl != tc.want {
			t.Errorf("AnswerTTL %v, %s A: %v %v; want one record with TTL %d", tc.answerTTL, tc.service, ok, m, tc.want)
		}
		m, _, ok = ask(w, question(name, dns.TypeAAAA)) // web1 has no IPv6 address: NODATA
		if !ok || len(m.Ns) != 1 {
			t.Fatalf("%s AAAA: %v %v; want NODATA with an SOA", tc.service, ok, m)
		}
		soa := m.Ns[0].(*dns.SOA)
		got := []uint32{soa.Hdr.Ttl, soa.Refresh, soa.Retry, soa.Expire, soa.Minttl}
		if want := []uint32{4, 100, 20, 3000, 4}; !slices.Equal(got, want) {
			t.Errorf("NODATA SOA TTL, refresh, retry, expire, minimum %v, want the agent's %v", got, want)
		}
	}
}

// TrimsUDP covers the Consul domain, the agent's once read, the
// configured one (else consul.) before; DomainTrim the same without a
// watch, with Consul's default answer limit.
func TestTrimsUDP(t *testing.T) {
	w, err := New(Config{Address: "127.0.0.1:1", Domain: "Corp.Consul"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		want bool
	}{{"web.service.corp.consul.", true}, {"corp.consul.", true}, {"web.service.consul.", false}, {"xcorp.consul.", false}} {
		if limit, ok := w.TrimsUDP([]byte(tc.name)); ok != tc.want || (ok && limit != defaultUDPAnswerLimit) {
			t.Errorf("before the agent: TrimsUDP(%s) = %d, %v; want %v", tc.name, limit, ok, tc.want)
		}
	}
	w.info.Store(&agentInfo{datacenter: "dc1", domain: "consul.", udpAnswer: 5})
	if limit, ok := w.TrimsUDP([]byte("web.service.consul.")); !ok || limit != 5 {
		t.Errorf("the agent's domain and udp_answer_limit: %d, %v; want 5, true", limit, ok)
	}
	trim := DomainTrim("")
	if limit, ok := trim([]byte("a.node.consul.")); !ok || limit != 3 {
		t.Errorf("DomainTrim(\"\"): %d, %v; want 3, true", limit, ok)
	}
	if _, ok := trim([]byte("www.example.org.")); ok {
		t.Error("DomainTrim covers a name outside the domain")
	}
}
