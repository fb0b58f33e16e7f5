package dnsmasqimport

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
)

// Each directive maps to one towerd key, or to a note saying why not; the
// table runs Import on directives alone, without files.
func TestImportMapsDirectives(t *testing.T) {
	tests := []struct {
		line    string
		key     string // "table.key=value" as fmt prints the value; "" = none
		note    string // substring of the one note expected; "" = none
		changes bool   // the note says answers change (exit status 1)
	}{
		{line: "cache-size=2000", key: "cache.size=2000"},
		{line: "cache-size=0", note: "towerd always caches"},
		{line: "min-cache-ttl=30", key: "cache.min_ttl=30s"},
		{line: "max-cache-ttl=3600", key: "cache.max_ttl=1h0m0s"},
		{line: "use-stale-cache", key: "serve_stale.client_timeout=0s"},
		{line: "use-stale-cache=600", key: "serve_stale.max_age=10m0s"},
		{line: "use-stale-cache=0", key: "serve_stale.enabled=true", note: "any age"},
		{line: "dns-forward-max=300", key: "upstream.max_inflight=300", note: "per server group"},
		{line: "resolv-file=/etc/resolv.dnsmasq", key: ".resolv_conf=/etc/resolv.dnsmasq"},
		{line: "no-negcache", note: "never caches NXDOMAIN"},
		{line: "neg-ttl=60", key: "cache.nodata_without_soa_ttl=1m0s"},
		{line: "neg-ttl=86400", key: "cache.nodata_without_soa_ttl=1h0m0s", note: "at most 1h"},
		{line: "port=0", note: "turns dnsmasq's DNS off", changes: true},
		{line: "dhcp-range=192.0.2.100,192.0.2.200", note: "does not serve DHCP", changes: true},
		{line: "dhcp-option=3,192.0.2.1", note: "does not serve DHCP"},
		{line: "frobnicate", note: "no towerd equivalent", changes: true},
		{line: "expand-hosts", note: "without adding the domain", changes: true},
		{line: "bind-interfaces", note: "binds exactly the listen addresses"},
		{line: "server=/x.example/not-an-ip", note: "is not an IP address", changes: true},
		{line: "server=/x.example/192.0.2.1@eth0", key: "zone:x.example.=192.0.2.1:53", note: "@eth0 is dropped"},
		{line: "strict-order"},
		// What towerd does today (issue 25 item 2): it follows resolv.conf
		// and has a query log.
		{line: "no-poll", note: "follows the resolv.conf"},
		{line: "log-queries", key: ".log_queries=true"},
		{line: "log-queries=extra", key: ".log_queries=true", note: "one format"},
		{line: "domain=lan", note: "does not serve"},
		{line: "domain=lan,192.168.1.0/24,local", key: "local.domains=[lan. 1.168.192.in-addr.arpa.]", note: "as local domains"},
		// Local answers (issue 15).
		{line: "address=/ads.example/0.0.0.0", key: "local.address:ads.example.=0.0.0.0"},
		{line: "address=/ads.example/two.example/#", key: "local.address:ads.example.=0.0.0.0,:: local.address:two.example.=0.0.0.0,::"},
		{line: "address=/#/192.0.2.1", key: "local.address:.=192.0.2.1"},
		{line: "address=/nx.example/", key: "local.domains=[nx.example.]"},
		{line: "address=//192.0.2.1", note: "unqualified-name", changes: true},
		{line: "address=/x.example/300.1.1.1", note: "is not an IP address", changes: true},
		{line: "local=/lan/", key: "local.domains=[lan.]"},
		{line: "server=/local.lan/", key: "local.domains=[local.lan.]"},
		{line: "no-hosts", key: "local.hosts_files=[]"},
		{line: "addn-hosts=/etc/hosts.extra", key: "local.hosts_files=[/etc/hosts /etc/hosts.extra]"},
		{line: "hostsdir=/etc/hosts.d", key: "local.hosts_files=[/etc/hosts /etc/hosts.d]"},
		{line: "domain-needed", key: "local.domain_needed=true"},
		{line: "bogus-priv", key: "local.bogus_priv=true"},
		{line: "local-ttl=60", key: "local.ttl=1m0s"},
		{line: "rev-server=10.1.0.0/16,192.0.2.53", key: "zone:1.10.in-addr.arpa.=192.0.2.53:53"},
		{line: "rev-server=192.168.0.0/23,192.0.2.53#5353", key: "zone:0.168.192.in-addr.arpa.=192.0.2.53:5353 zone:1.168.192.in-addr.arpa.=192.0.2.53:5353"},
		{line: "rev-server=10.9.8.7,192.0.2.53", key: "zone:7.8.9.10.in-addr.arpa.=192.0.2.53:53"},
		{line: "rev-server=fd00::/12,[2001:db8::53]", note: "is not an IP address", changes: true},
		{line: "rev-server=fd00::/12,2001:db8::53", key: "zone:0.d.f.ip6.arpa.=[2001:db8::53]:53"},
		{line: "rev-server=192.168.1.0/24", key: "local.domains=[1.168.192.in-addr.arpa.]"},
		{line: "host-record=nas.lan,nas,192.168.1.10,fd00::10", key: "local.records=[nas.lan. A 192.168.1.10 nas.lan. AAAA fd00::10 nas. A 192.168.1.10 nas. AAAA fd00::10]"},
		{line: "host-record=nas.lan,192.168.1.10,300", key: "local.records=[nas.lan. A 192.168.1.10]", note: "TTL is dropped"},
		{line: "cname=www.lan,nas.lan", key: "local.records=[www.lan. CNAME nas.lan.]"},
		{line: "ptr-record=10.1.168.192.in-addr.arpa,nas.lan", key: "local.records=[10.1.168.192.in-addr.arpa. PTR nas.lan.]"},
		{line: "mx-host=lan,nas.lan,10", key: "local.records=[lan. MX 10 nas.lan.]"},
		{line: "srv-host=_ipp._tcp.lan,printer.lan,631", key: "local.records=[_ipp._tcp.lan. SRV 0 0 631 printer.lan.]"},
		{line: "mx-host=lan", note: "has no towerd equivalent", changes: true},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			d, ok := parseLine(tt.line)
			if !ok {
				t.Fatalf("parseLine(%q) failed", tt.line)
			}
			d.File, d.Line = "f", 1
			res := Import("f", []Directive{d})
			var keys []string
			for _, k := range res.File.Keys {
				v := k.Value
				if dur, isDur := v.(time.Duration); isDur {
					v = dur.String()
				}
				key := fmt.Sprintf("%s.%s=%v", k.Table, k.Name, v)
				// towerd's switches are on, dnsmasq's off: every import
				// turns them off unless the line turns them on.
				if key == "local.domain_needed=false" || key == "local.bogus_priv=false" {
					continue
				}
				keys = append(keys, key)
			}
			for _, z := range res.File.Zones {
				keys = append(keys, fmt.Sprintf("zone:%s=%s", z.Name, strings.Join(z.Servers, ",")))
			}
			for _, a := range res.File.Addresses {
				keys = append(keys, fmt.Sprintf("local.address:%s=%s", a.Name, strings.Join(a.Addresses, ",")))
			}
			if tt.key != "" && !strings.Contains(strings.Join(keys, " "), tt.key) {
				t.Errorf("keys %q, want %q", keys, tt.key)
			}
			if tt.key == "" && len(keys) > 0 {
				t.Errorf("keys %q, want none", keys)
			}
			var notes []string
			for _, n := range res.Notes {
				notes = append(notes, n.String())
			}
			switch {
			case tt.note == "" && len(notes) > 0:
				t.Errorf("notes %q, want none", notes)
			case tt.note != "" && (len(notes) != 1 || !strings.Contains(notes[0], tt.note) || !strings.HasPrefix(notes[0], "f:1: ")):
				t.Errorf("notes %q, want one at f:1 containing %q", notes, tt.note)
			case tt.note != "" && res.Notes[0].ChangesAnswers() != tt.changes:
				t.Errorf("note %q: changes answers = %v, want %v", notes[0], !tt.changes, tt.changes)
			}
			// The result must be a configuration towerd loads.
			cfg := config.DefaultConfig()
			if err := config.Decode(res.File.Render(), "imported", &cfg); err != nil {
				t.Fatalf("does not decode: %v\n%s", err, res.File.Render())
			}
			if err := cfg.Validate(); err != nil {
				t.Fatalf("not valid: %v\n%s", err, res.File.Render())
			}
		})
	}
}
