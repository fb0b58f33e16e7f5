package config

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/upstream"
)

// Messages an operator can act on (issue 15): the TOML decoder's wording
// names Go types ("config.CacheConfig.Size of type int"); these say what
// the key wants and what the file has.

// typeMismatch matches the decoder's message for a value of the wrong type.
var typeMismatch = regexp.MustCompile(`cannot decode TOML (\w+) into (?:struct field )?\S+ of type (\S+)`)

// wantOf says in words what a Go type of the config takes.
func wantOf(goType string) string {
	switch goType {
	case "int", "int64", "uint16", "uint32":
		return "an integer"
	case "bool":
		return "true or false"
	case "string":
		return "a string"
	case "[]string":
		return `a list of strings, e.g. ["a", "b"]`
	case "config.Duration":
		return `a duration string such as "30s"`
	}
	return "a value of another kind"
}

// friendlyDecodeMsg rewrites the decoder's message for the value at line,
// col of data into "want an integer, got string \"10\"".
func friendlyDecodeMsg(msg string, data []byte, line, col int) string {
	m := typeMismatch.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	got := m[1]
	if tok := valueAt(data, line, col); tok != "" {
		got += " " + tok
	}
	return fmt.Sprintf("want %s, got %s", wantOf(m[2]), got)
}

// valueAt is the TOML value token that starts at line, col (1-based).
func valueAt(data []byte, line, col int) string {
	lines := strings.Split(string(data), "\n")
	if line < 1 || line > len(lines) || col < 1 || col > len(lines[line-1]) {
		return ""
	}
	s := lines[line-1][col-1:]
	switch {
	case strings.HasPrefix(s, `"`):
		if end := strings.Index(s[1:], `"`); end >= 0 {
			return s[:end+2]
		}
	case strings.HasPrefix(s, "["):
		if end := strings.Index(s, "]"); end >= 0 {
			return s[:end+1]
		}
	}
	if end := strings.IndexAny(s, " \t,]#"); end >= 0 {
		s = s[:end]
	}
	return s
}

// notADuration matches Duration.UnmarshalText's error, which the decoder
// passes on without a key or a line when the value is not a string.
var notADuration = regexp.MustCompile(`^"([^"]*)" is not a duration`)

// checkServer explains what is wrong with a server address, nil when it
// is an IP address with an optional port. Host names are refused: towerd
// would need a resolver to find its own upstreams, and the one it would
// ask is usually itself.
func checkServer(s string) error {
	if _, err := upstream.NormalizeAddress(s); err == nil {
		return nil
	}
	if strings.Contains(s, "://") {
		_, err := upstream.ParseServer(s)
		return err
	}
	const forms = `IP address, optionally with a port: "192.0.2.53", "192.0.2.53:5353", "2001:db8::53" or "[2001:db8::53]:5353"`
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		host, port = s, ""
	}
	host = strings.Trim(host, "[]")
	switch _, ipErr := netip.ParseAddr(host); {
	case ipErr == nil:
		return fmt.Errorf("%q: port %q is not a number from 1 to 65535", s, port)
	case strings.Trim(host, "0123456789.") == "":
		return fmt.Errorf("%q is not an IP address (each of the four numbers goes from 0 to 255); want an %s", s, forms)
	case isHostName(host):
		return fmt.Errorf("%q is a host name; servers must be IP addresses (towerd does not resolve its own upstreams): want an %s", s, forms)
	}
	return fmt.Errorf("%q is not an IP address; want an %s", s, forms)
}

// isHostName reports whether s looks like a DNS name rather than a broken
// address: letters in it, and valid as a domain name.
func isHostName(s string) bool {
	if _, ok := dns.IsDomainName(s); !ok || !hostNameChars.MatchString(s) {
		return false
	}
	return strings.ContainsAny(strings.ToLower(s), "abcdefghijklmnopqrstuvwxyz")
}

var hostNameChars = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// Warnings are things `towerd check` and start-up point out about a valid
// configuration: listen addresses that clients of other hosts reach but
// that allow does not admit (they would get REFUSED).
func (c *Config) Warnings() []string {
	var allow []netip.Prefix
	onlyLoopback := true
	for _, a := range c.Allow {
		if p, err := netip.ParsePrefix(a); err == nil {
			allow = append(allow, p.Masked())
			if !p.Addr().IsLoopback() {
				onlyLoopback = false
			}
		}
	}
	var out []string
	for _, l := range c.Listen {
		ap, err := netip.ParseAddrPort(l)
		if err != nil {
			continue
		}
		ip := ap.Addr().Unmap()
		switch {
		case ip.IsLoopback():
		case ip.IsUnspecified() && onlyLoopback:
			out = append(out, fmt.Sprintf("listen %s takes queries on every interface, but allow (%s) admits only loopback clients: others get REFUSED; add their networks to allow",
				l, strings.Join(c.Allow, ", ")))
		case !ip.IsUnspecified() && !covered(allow, ip):
			out = append(out, fmt.Sprintf("listen %s is not loopback and allow (%s) does not cover its network: clients there get REFUSED; add their network to allow (e.g. %q)",
				l, strings.Join(c.Allow, ", "), suggestPrefix(ip)))
		}
	}
	return out
}

func covered(allow []netip.Prefix, ip netip.Addr) bool {
	for _, p := range allow {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// suggestPrefix is the /24 (IPv4) or /64 (IPv6) around ip.
func suggestPrefix(ip netip.Addr) string {
	bits := 64
	if ip.Is4() {
		bits = 24
	}
	p, _ := ip.Prefix(bits)
	return p.String()
}
