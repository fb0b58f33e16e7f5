package local

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/miekg/dns"
)

// hostsEntry is one address and the names a hosts(5) line gives it, in
// order: the first is the canonical name, which the address's PTR record
// points to.
type hostsEntry struct {
	addr  netip.Addr
	names []string // canonical: lower case, fully qualified
}

// parseHosts reads a hosts(5) file as glibc and dnsmasq do: "#" starts a
// comment anywhere on a line, fields are separated by blanks, the first is
// an IPv4 or IPv6 address and the others its names. A line whose address
// does not parse (a zone index such as fe80::1%eth0 included, as in
// dnsmasq) is skipped, as is a name that is not a domain name; the first
// maxBadLinesLogged are reported in bad, "line N: why", so the caller can
// log them, and all of them are counted in badCount (a file of garbage
// must not become a list of its lines).
func parseHosts(r io.Reader) (entries []hostsEntry, bad []string, badCount int, err error) {
	skip := func(why string) {
		if badCount++; len(bad) < maxBadLinesLogged {
			bad = append(bad, why)
		}
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if i := bytes.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(string(line))
		if len(fields) == 0 {
			continue
		}
		addr, perr := netip.ParseAddr(fields[0])
		if perr != nil || addr.Zone() != "" {
			skip(fmt.Sprintf("line %d: %q is not an IP address", n, fields[0]))
			continue
		}
		if len(fields) == 1 {
			skip(fmt.Sprintf("line %d: %s has no name", n, fields[0]))
			continue
		}
		e := hostsEntry{addr: addr}
		for _, name := range fields[1:] {
			if !hostName(name) {
				skip(fmt.Sprintf("line %d: %q is not a host name", n, name))
				continue
			}
			e.names = append(e.names, canonical(name))
		}
		if len(e.names) > 0 {
			entries = append(entries, e)
		}
	}
	return entries, bad, badCount, sc.Err()
}

// canonical is name fully qualified with ASCII letters in lower case, the
// form the resolver hands Covers (DNS names compare case-insensitively in
// ASCII only, RFC 4343; other bytes are kept as they are).
func canonical(name string) string {
	name = dns.Fqdn(name)
	for i := 0; i < len(name); i++ {
		if c := name[i]; c >= 'A' && c <= 'Z' {
			b := []byte(name)
			for j := i; j < len(b); j++ {
				if c := b[j]; c >= 'A' && c <= 'Z' {
					b[j] = c + 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return name
}

// hostName reports whether a hosts file's name is one towerd serves:
// printable ASCII, no escapes, a domain name.
func hostName(name string) bool {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c >= 0x7f || c == '\\' {
			return false
		}
	}
	_, ok := dns.IsDomainName(name)
	return ok
}
