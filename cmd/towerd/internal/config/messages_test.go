package config

import (
	"strings"
	"testing"
)

// Config errors name the key and say what it wants, never a Go type
// (issue 15: "main.CacheConfig.Size" for a quoted number).
func TestDecodeMessagesWithoutGoTypes(t *testing.T) {
	for _, tc := range []struct {
		body, want string
	}{
		{"[cache]\nsize = \"10\"\n", `t.toml:2: key "cache.size": want an integer, got string "10"`},
		{"[cache]\nprefetch = \"yes\" # comment\n", `t.toml:2: key "cache.prefetch": want true or false, got string "yes"`},
		{"listen = \"127.0.0.1:53\"\n", `t.toml:1: key "listen": want a list of strings, e.g. ["a", "b"], got string "127.0.0.1:53"`},
		{"allow = [10]\n", `t.toml:1: key "allow[0]": want a string, got integer 10`},
		{"[upstream]\ntimeout = 5\n", `t.toml:2: key "upstream.timeout": want a duration string such as "30s", got 5`},
		{"[[zone]]\nname = 5\n", `t.toml:2: key "zone[0].name": want a string, got integer 5`},
	} {
		cfg := DefaultConfig()
		err := Decode([]byte(tc.body), "t.toml", &cfg)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: %v\nwant %s", tc.body, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "config.") {
			t.Errorf("%q: message names a Go type: %v", tc.body, err)
		}
	}
}

// Servers are IP addresses: a host name is refused as such, a bad address
// or port is named, never "missing port".
func TestServerAddressMessages(t *testing.T) {
	for _, tc := range []struct {
		server, want string
	}{
		{"192.0.2.53", ""},
		{"192.0.2.53:5353", ""},
		{"2001:db8::53", ""},
		{"[2001:db8::53]:5353", ""},
		{"dns.google", `"dns.google" is a host name; servers must be IP addresses`},
		{"ns1.corp.example:53", `"ns1.corp.example:53" is a host name`},
		{"1.2.3.999", `"1.2.3.999" is not an IP address (each of the four numbers goes from 0 to 255)`},
		{"1.2.3.4:99999", `"1.2.3.4:99999": port "99999" is not a number from 1 to 65535`},
		{"[::1]:x", `"[::1]:x": port "x" is not a number`},
		{"not an address", `"not an address" is not an IP address`},
	} {
		err := checkServer(tc.server)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s refused: %v", tc.server, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.server, err, tc.want)
		case err != nil && strings.Contains(err.Error(), "missing port"):
			t.Errorf("%s: %v says missing port", tc.server, err)
		}
	}
}

// Warnings point at listen addresses allow does not cover.
func TestListenAllowWarnings(t *testing.T) {
	for _, tc := range []struct {
		listen, allow []string
		want          string // "" = no warning
	}{
		{[]string{"127.0.0.1:53"}, []string{"127.0.0.0/8"}, ""},
		{[]string{"0.0.0.0:53"}, []string{"127.0.0.0/8", "::1/128"}, "listen 0.0.0.0:53 takes queries on every interface, but allow (127.0.0.0/8, ::1/128) admits only loopback clients"},
		{[]string{"0.0.0.0:53"}, []string{"10.0.0.0/8"}, ""},
		{[]string{"10.1.2.3:53"}, []string{"10.0.0.0/8"}, ""},
		{[]string{"192.0.2.7:53"}, []string{"10.0.0.0/8"}, `listen 192.0.2.7:53 is not loopback and allow (10.0.0.0/8) does not cover its network: clients there get REFUSED; add their network to allow (e.g. "192.0.2.0/24")`},
	} {
		cfg := DefaultConfig()
		cfg.Listen, cfg.Allow = tc.listen, tc.allow
		got := strings.Join(cfg.Warnings(), "\n")
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("listen %v allow %v: %q, want %q", tc.listen, tc.allow, got, tc.want)
		}
	}
}
