package upstream

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// defaultPort is where DNS servers listen unless told otherwise.
const defaultPort = "53"

// NormalizeAddress turns "1.2.3.4", "1.2.3.4:53", "::1", "[::1]" and
// "[::1]:5353" into host:port, adding port 53 when none is given. The host
// must be an IP address (an IPv6 zone is kept): resolving a DNS server's name
// would need the very resolver being configured.
func NormalizeAddress(s string) (string, error) {
	s = strings.TrimSpace(s)
	if ip, err := netip.ParseAddr(s); err == nil {
		return net.JoinHostPort(ip.String(), defaultPort), nil
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		ip, err := netip.ParseAddr(s[1 : len(s)-1])
		if err != nil {
			return "", fmt.Errorf("parsing upstream address %q: %w", s, err)
		}
		return net.JoinHostPort(ip.String(), defaultPort), nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", fmt.Errorf("parsing upstream address %q: %w", s, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return "", fmt.Errorf("parsing upstream address %q: %w", s, err)
	}
	portNum, err := strconv.ParseUint(port, 10, 16)
	if err != nil || portNum == 0 {
		return "", fmt.Errorf("parsing upstream address %q: bad port %q", s, port)
	}
	return net.JoinHostPort(ip.String(), strconv.FormatUint(portNum, 10)), nil
}
