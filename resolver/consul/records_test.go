package consul

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/miekg/dns"
)

// The expected strings below are what a real Consul v1.14.11 agent answered
// for the same catalog (dig against `consul agent -dev`); the end-to-end
// tests compare against a live agent as well.

func rrStrings(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		out = append(out, strings.ReplaceAll(rr.String(), "\t", " "))
	}
	return out
}

var (
	// web1 has its own address; web2 uses its node's.
	web1 = instance{ServiceID: "web1", Node: "vm", NodeAddr: "127.0.0.1", NodeV4: "127.0.0.1",
		SvcAddr: "127.0.0.10", SvcV4: "127.0.0.10", Port: 8080, Weight: 1, Tags: []string{"primary", "v1"},
		MetaTXT: []string{"consul-network-segment="}}
	web2 = instance{ServiceID: "web2", Node: "vm", NodeAddr: "127.0.0.1", NodeV4: "127.0.0.1",
		Port: 8081, Weight: 1, Tags: []string{"v1"}, MetaTXT: []string{"consul-network-segment="}}
	web3 = instance{ServiceID: "web3", Node: "vm", NodeAddr: "127.0.0.1", NodeV4: "127.0.0.1",
		SvcAddr: "::1", Port: 8082, Weight: 1, MetaTXT: []string{"consul-network-segment="}}
)

func TestRecords(t *testing.T) {
	l := func(name string, qtype uint16) lookup {
		return lookup{name: name, qtype: qtype, datacenter: "dc1", domain: "consul."}
	}
	cases := []struct {
		name      string
		q         lookup
		instances []instance
		b         builder
		answer    []string
		extra     []string
	}{
		{"A: service address, else node address; IPv6 left out", l("web.service.consul.", dns.TypeA),
			[]instance{web1, web2, web3}, builder{nodeMetaTXT: true},
			[]string{"web.service.consul. 0 IN A 127.0.0.10", "web.service.consul. 0 IN A 127.0.0.1"}, nil},
		{"AAAA: only the IPv6 instance", l("web.service.consul.", dns.TypeAAAA),
			[]instance{web1, web2, web3}, builder{},
			[]string{"web.service.consul. 0 IN AAAA ::1"}, nil},
		{"SRV: addr target for a service address, node target otherwise, meta TXT per instance",
			l("web.service.consul.", dns.TypeSRV), []instance{web1, web2, web3}, builder{nodeMetaTXT: true},
			[]string{
				"web.service.consul. 0 IN SRV 1 1 8080 7f00000a.addr.dc1.consul.",
				"web.service.consul. 0 IN SRV 1 1 8081 vm.node.dc1.consul.",
				"web.service.consul. 0 IN SRV 1 1 8082 00000000000000000000000000000001.addr.dc1.consul.",
			}, []string{
				"7f00000a.addr.dc1.consul. 0 IN A 127.0.0.10",
				`vm.node.dc1.consul. 0 IN TXT "consul-network-segment="`,
				"vm.node.dc1.consul. 0 IN A 127.0.0.1",
				`vm.node.dc1.consul. 0 IN TXT "consul-network-segment="`,
				"00000000000000000000000000000001.addr.dc1.consul. 0 IN AAAA ::1",
				`vm.node.dc1.consul. 0 IN TXT "consul-network-segment="`,
			}},
		{"SRV without meta TXT, with TTL, in the question's letter case",
			lookup{name: "WEB.service.DC1.Consul.", qtype: dns.TypeSRV, datacenter: "dc1", domain: "Consul."},
			[]instance{web2}, builder{ttl: 5},
			[]string{"WEB.service.DC1.Consul. 5 IN SRV 1 1 8081 vm.node.dc1.Consul."},
			[]string{"vm.node.dc1.Consul. 5 IN A 127.0.0.1"}},
		{"two instances on one address give one A record", l("web.service.consul.", dns.TypeA),
			[]instance{web2, {ServiceID: "web4", Node: "vm", NodeAddr: "127.0.0.1", Port: 9000}}, builder{},
			[]string{"web.service.consul. 0 IN A 127.0.0.1"}, nil},
		{"a_record_limit", l("web.service.consul.", dns.TypeA),
			[]instance{web1, web2}, builder{aRecordLimit: 1},
			[]string{"web.service.consul. 0 IN A 127.0.0.10"}, nil},
		{"a tagged lan_ipv4 standing in for an IPv6 node address is named by address",
			l("web.service.consul.", dns.TypeSRV),
			[]instance{{Node: "n6", NodeAddr: "2001:db8::1", NodeV4: "192.0.2.7", Port: 80, Weight: 3}}, builder{},
			[]string{"web.service.consul. 0 IN SRV 1 3 80 c0000207.addr.dc1.consul."},
			[]string{"c0000207.addr.dc1.consul. 0 IN A 192.0.2.7"}},
		{"AAAA of an IPv4-only service: no records (NODATA)", l("web.service.consul.", dns.TypeAAAA),
			[]instance{web1, web2}, builder{}, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			answer, extra, ok := tc.b.records(tc.q, tc.instances)
			if !ok {
				t.Fatal("records: not ok")
			}
			if got := rrStrings(answer); !slices.Equal(got, tc.answer) {
				t.Errorf("answer\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.answer, "\n"))
			}
			if got := rrStrings(extra); !slices.Equal(got, tc.extra) {
				t.Errorf("extra\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.extra, "\n"))
			}
		})
	}
}

// TestRecordsLeaveHostNamesToConsul: an address that is a host name makes
// Consul answer with a CNAME and its own recursion; the watch does not
// pretend to, so the question goes to Consul's DNS.
func TestRecordsLeaveHostNamesToConsul(t *testing.T) {
	ext := instance{Node: "ext", NodeAddr: "db.example.com", Port: 5432}
	for _, qtype := range []uint16{dns.TypeA, dns.TypeSRV} {
		if _, _, ok := (builder{}).records(lookup{name: "db.service.consul.", qtype: qtype,
			datacenter: "dc1", domain: "consul."}, []instance{ext}); ok {
			t.Errorf("%s: ok for a host-name address", dns.TypeToString[qtype])
		}
	}
}

func TestInstancesFromHealthAndWeights(t *testing.T) {
	check := func(id, service, status string) *api.HealthCheck {
		return &api.HealthCheck{CheckID: id, ServiceName: service, Status: status}
	}
	e := func(id string, w api.AgentWeights, checks ...*api.HealthCheck) *api.ServiceEntry {
		return &api.ServiceEntry{
			Node:    &api.Node{Node: "n1", Address: "10.0.0.1", Meta: map[string]string{"rack": "r1", "rfc1035-x": "raw"}},
			Service: &api.AgentService{ID: id, Service: "web", Port: 80, Weights: w, Tags: []string{"Primary"}},
			Checks:  append(api.HealthChecks{check("serfHealth", "", api.HealthPassing)}, checks...),
		}
	}
	entries := []*api.ServiceEntry{
		e("passing", api.AgentWeights{Passing: 10, Warning: 1}, check("c1", "web", api.HealthPassing)),
		e("warning", api.AgentWeights{Passing: 10, Warning: 2}, check("c2", "web", api.HealthWarning)),
		e("critical", api.AgentWeights{}, check("c3", "web", api.HealthCritical)),
		e("default-weights", api.AgentWeights{}),
	}
	var ids []string
	for _, in := range instancesFrom("web", entries, false) {
		ids = append(ids, fmt.Sprintf("%s:%d", in.ServiceID, in.Weight))
		if !slices.Equal(in.Tags, []string{"primary"}) || !slices.Equal(in.MetaTXT, []string{"rack=r1", "raw"}) {
			t.Errorf("%s: tags %v meta %v", in.ServiceID, in.Tags, in.MetaTXT)
		}
	}
	// Consul's DNS keeps warning instances unless only_passing is set, and
	// weighs them with their warning weight.
	if want := []string{"default-weights:1", "passing:10", "warning:2"}; !slices.Equal(ids, want) {
		t.Errorf("instances %v, want %v", ids, want)
	}
	if got := instancesFrom("web", entries, true); len(got) != 2 {
		t.Errorf("only_passing kept %d instances, want 2", len(got))
	}
}

func TestMetaTXT(t *testing.T) {
	for key, want := range map[string]string{
		"rack":      "rack=r1",
		" a=b`c ":   "` a`=b``c` =r1",
		"RFC1035-x": "r1",
	} {
		if got := metaTXT(key, "r1"); got != want {
			t.Errorf("metaTXT(%q) = %q, want %q", key, got, want)
		}
	}
}
