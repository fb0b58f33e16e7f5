package dnswire

import (
	"testing"

	"github.com/miekg/dns"
)

// InZoneText and InZone are one rule on two forms of a name, and both say
// what miekg/dns's IsSubDomain says.
func TestInZoneOneRule(t *testing.T) {
	names := []string{".", "example.", "Example.", "www.example.", "WWW.EXAMPLE.", "xexample.", "ample.",
		"a.b.example.", `a\.example.`, `a\\.example.`, `a\\\.example.`, "consul.", "web.service.consul.",
		"service.consul.", "in-addr.arpa.", "1.0.0.127.in-addr.arpa.", "example.com.", "com."}
	for _, zone := range names {
		zoneWire, _ := AppendWireName(nil, zone)
		for _, name := range names {
			want := dns.IsSubDomain(zone, name)
			if got := InZoneText(name, zone); got != want {
				t.Errorf("InZoneText(%q, %q) = %v, IsSubDomain %v", name, zone, got, want)
			}
			if got := InZoneText([]byte(name), zone); got != want {
				t.Errorf("InZoneText([]byte %q, %q) = %v, IsSubDomain %v", name, zone, got, want)
			}
			nameWire, _ := AppendWireName(nil, name)
			if got := InZone(nameWire, zoneWire); got != want {
				t.Errorf("InZone(%q, %q) = %v, IsSubDomain %v", name, zone, got, want)
			}
		}
	}
}
