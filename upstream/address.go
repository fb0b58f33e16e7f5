package upstream

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/miekg/dns"
)

// defaultPort is where DNS servers listen unless told otherwise.
const defaultPort = "53"

// NormalizeAddress turns "1.2.3.4", "1.2.3.4:53", "::1", "[::1]" and
// "[::1]:5353" into host:port, adding port 53 when none is given. The host
// must be an IP address (an IPv6 zone is kept): resolving a DNS server's name
// would need the very resolver being configured.
func NormalizeAddress(s string) (string, error) {
	return normalizeWithPort(s, defaultPort)
}

// normalizeWithPort is NormalizeAddress with port as the default.
func normalizeWithPort(s, port string) (string, error) {
	s = strings.TrimSpace(s)
	if ip, err := netip.ParseAddr(s); err == nil {
		return net.JoinHostPort(ip.String(), port), nil
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		ip, err := netip.ParseAddr(s[1 : len(s)-1])
		if err != nil {
			return "", fmt.Errorf("parsing upstream address %q: %w", s, err)
		}
		return net.JoinHostPort(ip.String(), port), nil
	}
	host, givenPort, err := net.SplitHostPort(s)
	if err != nil {
		return "", fmt.Errorf("parsing upstream address %q: %w", s, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return "", fmt.Errorf("parsing upstream address %q: %w", s, err)
	}
	portNum, err := strconv.ParseUint(givenPort, 10, 16)
	if err != nil || portNum == 0 {
		return "", fmt.Errorf("parsing upstream address %q: bad port %q", s, givenPort)
	}
	return net.JoinHostPort(ip.String(), strconv.FormatUint(portNum, 10)), nil
}

// tlsScheme marks a DNS-over-TLS server in a zone's list (issue 37).
const tlsScheme = "tls://"

// defaultTLSPort is where DNS over TLS listens (RFC 7858 section 3.1).
const defaultTLSPort = "853"

// ServerSpec is one configured server: a plain DNS server, or a DNS over
// TLS one with the name its certificate must carry.
type ServerSpec struct {
	// Addr is host:port (NormalizeAddress's form).
	Addr string
	// TLSName is the authentication domain name of a DNS over TLS server
	// (RFC 8310 section 8, the strict profile: the certificate must carry
	// it); "" for a plain server.
	TLSName string
}

// String is the spec as it is configured and shown: "192.0.2.53:53" or
// "tls://192.0.2.53:853#dns.example".
func (s ServerSpec) String() string {
	if s.TLSName == "" {
		return s.Addr
	}
	return tlsScheme + s.Addr + "#" + s.TLSName
}

// ParseServer reads a zone's server: what NormalizeAddress takes, or
// tls://ADDRESS[:PORT]#AUTH-NAME (port 853 when left out). RFC 8310's
// strict profile: a TLS server without a name is refused, for a
// certificate that verifies for any name proves nothing about the server.
func ParseServer(s string) (ServerSpec, error) {
	s = strings.TrimSpace(s)
	rest, ok := strings.CutPrefix(s, tlsScheme)
	if !ok {
		if strings.Contains(s, "://") {
			return ServerSpec{}, fmt.Errorf("server %q: the only scheme is %s (DNS over TLS)", s, tlsScheme)
		}
		addr, err := NormalizeAddress(s)
		return ServerSpec{Addr: addr}, err
	}
	hostPort, name, ok := strings.Cut(rest, "#")
	if !ok || name == "" {
		return ServerSpec{}, fmt.Errorf("server %q: a DNS over TLS server needs the name its certificate carries: tls://ADDRESS[:PORT]#NAME (RFC 8310 strict profile)", s)
	}
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if _, ok := dns.IsDomainName(name); !ok || strings.ContainsAny(name, "#/ ") {
		return ServerSpec{}, fmt.Errorf("server %q: %q is not a domain name", s, name)
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return ServerSpec{}, fmt.Errorf("server %q: the authentication name must be a domain name, not an address", s)
	}
	addr, err := normalizeWithPort(hostPort, defaultTLSPort)
	if err != nil {
		return ServerSpec{}, fmt.Errorf("server %q: %w", s, err)
	}
	return ServerSpec{Addr: addr, TLSName: name}, nil
}

// NormalizeServer is ParseServer's spec as a string: the form groups are
// built from and servers are shown in.
func NormalizeServer(s string) (string, error) {
	spec, err := ParseServer(s)
	if err != nil {
		return "", err
	}
	return spec.String(), nil
}
