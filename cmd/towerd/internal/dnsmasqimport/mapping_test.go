package dnsmasqimport

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Each directive maps to one towerd key, or to a note saying why not; the
// table runs Import on directives alone, without files.
func TestImportMapsDirectives(t *testing.T) {
	tests := []struct {
		line string
		key  string // "table.key=value" as fmt prints the value; "" = none
		note string // substring of the one note expected; "" = none
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
		{line: "port=0", note: "turns dnsmasq's DNS off"},
		{line: "dhcp-range=192.0.2.100,192.0.2.200", note: "does not serve DHCP"},
		{line: "frobnicate", note: "no towerd equivalent"},
		{line: "address=/ads.example/0.0.0.0", note: "no static answers"},
		{line: "server=/local.lan/", note: "only locally"},
		{line: "server=/x.example/not-an-ip", note: "is not an IP address"},
		{line: "strict-order"},
		{line: "no-poll"},
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
				keys = append(keys, fmt.Sprintf("%s.%s=%v", k.Table, k.Name, v))
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
			}
		})
	}
}
