package local

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestParseHosts(t *testing.T) {
	const file = `# /etc/hosts
127.0.0.1	localhost
192.168.1.10 nas.lan NAS   # trailing comment, aliases, upper case
::1 localhost ip6-localhost
fd00::10 nas.lan
  10.0.0.5    printer.lan#comment glued to a name
fe80::1%eth0 scoped.lan
300.1.1.1 bad.lan
10.0.0.6
10.0.0.7 good.lan bad..name
`
	entries, bad, _, err := parseHosts(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.addr.String()+" "+strings.Join(e.names, " "))
	}
	want := []string{
		"127.0.0.1 localhost.",
		"192.168.1.10 nas.lan. nas.",
		"::1 localhost. ip6-localhost.",
		"fd00::10 nas.lan.",
		"10.0.0.5 printer.lan.",
		"10.0.0.7 good.lan.",
	}
	if !slices.Equal(got, want) {
		t.Errorf("entries\n got %q\nwant %q", got, want)
	}
	wantBad := []string{
		`line 7: "fe80::1%eth0" is not an IP address`,
		`line 8: "300.1.1.1" is not an IP address`,
		"line 9: 10.0.0.6 has no name",
		`line 10: "bad..name" is not a host name`,
	}
	if !slices.Equal(bad, wantBad) {
		t.Errorf("bad\n got %q\nwant %q", bad, wantBad)
	}
}

func TestReverseNames(t *testing.T) {
	for _, a := range []string{"192.168.1.10", "0.0.0.0", "255.255.255.255", "fd00::10", "2001:db8::abcd:1", "::ffff:10.0.0.1"} {
		addr := netip.MustParseAddr(a)
		name := reverseName(addr)
		back, ok := reverseAddr([]byte(name))
		if !ok || back != addr {
			t.Errorf("%s: reverse name %s reads back as %v, %v", a, name, back, ok)
		}
	}
	for _, name := range []string{
		"168.192.in-addr.arpa.", "1.2.3.4.5.in-addr.arpa.", "256.0.0.10.in-addr.arpa.", "1..0.10.in-addr.arpa.",
		"x.0.0.10.in-addr.arpa.", "1.0.0.10.ip6.arpa.", "d.f.ip6.arpa.", "in-addr.arpa.", "1000.0.0.10.in-addr.arpa.",
	} {
		if a, ok := reverseAddr([]byte(name)); ok {
			t.Errorf("%s reads as the address %v; want none", name, a)
		}
	}
}

func TestPrivateSet(t *testing.T) {
	for a, want := range map[string]bool{
		"10.1.2.3": true, "172.16.0.1": true, "172.32.0.1": false, "192.168.0.1": true,
		"127.0.0.2": true, "0.1.2.3": true, "169.254.1.1": true, "192.0.2.1": true,
		"198.51.100.1": true, "203.0.113.1": true, "255.255.255.255": true,
		"100.64.0.1": false, "8.8.8.8": false, "fd00::1": true, "fc00::1": false,
		"fe80::1": true, "febf::1": true, "fec0::1": true, "::1": true, "::": true,
		"2001:db8::1": true, "2001:4860::1": false, "::ffff:192.168.1.1": true, "::ffff:8.8.8.8": false,
	} {
		if got := isPrivate(netip.MustParseAddr(a)); got != want {
			t.Errorf("isPrivate(%s) = %v, want %v", a, got, want)
		}
	}
}
