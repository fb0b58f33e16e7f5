package local

import (
	"net/netip"

	"github.com/towerd/towerd/resolver/dnswire"
)

// The addresses whose reverse names bogus_priv answers locally: dnsmasq's
// bogus-priv set (its private_net and private_net6, with loopback and "this
// network" included), which is RFC 6303's list of locally served zones plus
// 0/8, 127/8 and the deprecated site-local fec0::/10. 100.64.0.0/10
// (RFC 6598, shared address space) is left out, as dnsmasq and RFC 6303 leave
// it out: carrier and overlay networks (Tailscale's MagicDNS) answer it.
// fc00::/8 is left out too: RFC 4193 assigns only fd00::/8 locally.
var privatePrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),          // "this network" (RFC 6303 §4.1)
	netip.MustParsePrefix("10.0.0.0/8"),         // RFC 1918
	netip.MustParsePrefix("127.0.0.0/8"),        // loopback (RFC 6303 §4.2)
	netip.MustParsePrefix("169.254.0.0/16"),     // link local (RFC 6303 §4.3)
	netip.MustParsePrefix("172.16.0.0/12"),      // RFC 1918
	netip.MustParsePrefix("192.0.2.0/24"),       // TEST-NET-1 (RFC 6303 §4.4)
	netip.MustParsePrefix("192.168.0.0/16"),     // RFC 1918
	netip.MustParsePrefix("198.51.100.0/24"),    // TEST-NET-2
	netip.MustParsePrefix("203.0.113.0/24"),     // TEST-NET-3
	netip.MustParsePrefix("255.255.255.255/32"), // broadcast (RFC 6303 §4.5)
	netip.MustParsePrefix("::/128"),             // unspecified (RFC 6303 §4.7)
	netip.MustParsePrefix("::1/128"),            // loopback (RFC 6303 §4.6)
	netip.MustParsePrefix("fd00::/8"),           // locally assigned ULA (RFC 6303 §4.8)
	netip.MustParsePrefix("fe80::/10"),          // link local (RFC 6303 §4.9)
	netip.MustParsePrefix("fec0::/10"),          // site local, deprecated (dnsmasq)
	netip.MustParsePrefix("2001:db8::/32"),      // documentation (RFC 6303 §4.10)
}

// isPrivate reports whether a's reverse name is answered locally under
// bogus_priv. An IPv4-mapped IPv6 address counts as its IPv4 address, as in
// dnsmasq.
func isPrivate(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range privatePrefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

const (
	inAddrArpa = "in-addr.arpa."
	ip6Arpa    = "ip6.arpa."
)

// reverseAddr reads the address of a complete reverse name, canonical (lower
// case, fully qualified): four decimal labels under in-addr.arpa. or 32
// nibbles under ip6.arpa. A shorter name (a zone such as
// "168.192.in-addr.arpa.") is no address: dnsmasq forwards those, and so does
// towerd. It does not allocate: the fast path calls it through Covers.
func reverseAddr(name []byte) (netip.Addr, bool) {
	switch {
	case len(name) > len(inAddrArpa) && dnswire.InZoneText(name, inAddrArpa):
		return reverseV4(name[:len(name)-len(inAddrArpa)])
	case len(name) > len(ip6Arpa) && dnswire.InZoneText(name, ip6Arpa):
		return reverseV6(name[:len(name)-len(ip6Arpa)])
	}
	return netip.Addr{}, false
}

// reverseV4 reads "d.c.b.a." as the address a.b.c.d.
func reverseV4(labels []byte) (netip.Addr, bool) {
	var ip [4]byte
	i := 3
	n, digits := 0, 0
	for _, c := range labels {
		switch {
		case c >= '0' && c <= '9' && digits < 3:
			n = n*10 + int(c-'0')
			digits++
		case c == '.' && digits > 0 && n <= 255 && i >= 0:
			ip[i] = byte(n)
			i--
			n, digits = 0, 0
		default:
			return netip.Addr{}, false
		}
	}
	if i != -1 {
		return netip.Addr{}, false
	}
	return netip.AddrFrom4(ip), true
}

// reverseV6 reads 32 one-nibble labels, least significant first.
func reverseV6(labels []byte) (netip.Addr, bool) {
	if len(labels) != 64 {
		return netip.Addr{}, false
	}
	var ip [16]byte
	for k := 0; k < 32; k++ {
		c, dot := labels[2*k], labels[2*k+1]
		if dot != '.' {
			return netip.Addr{}, false
		}
		var v byte
		switch {
		case c >= '0' && c <= '9':
			v = c - '0'
		case c >= 'a' && c <= 'f':
			v = c - 'a' + 10
		default:
			return netip.Addr{}, false
		}
		pos := 31 - k // nibble position from the most significant
		if pos%2 == 0 {
			ip[pos/2] |= v << 4
		} else {
			ip[pos/2] |= v
		}
	}
	return netip.AddrFrom16(ip), true
}

// reverseName is the PTR owner name of a: "4.3.2.1.in-addr.arpa." for
// 1.2.3.4, 32 nibbles under ip6.arpa. for an IPv6 address.
func reverseName(a netip.Addr) string {
	const hex = "0123456789abcdef"
	if a.Is4() {
		b := a.As4()
		return itoa(b[3]) + "." + itoa(b[2]) + "." + itoa(b[1]) + "." + itoa(b[0]) + "." + inAddrArpa
	}
	b := a.As16()
	out := make([]byte, 0, 64+len(ip6Arpa))
	for i := 15; i >= 0; i-- {
		out = append(out, hex[b[i]&0xF], '.', hex[b[i]>>4], '.')
	}
	return string(append(out, ip6Arpa...))
}

func itoa(b byte) string {
	if b < 10 {
		return string('0' + rune(b))
	}
	if b < 100 {
		return string([]byte{'0' + b/10, '0' + b%10})
	}
	return string([]byte{'0' + b/100, '0' + b/10%10, '0' + b%10})
}
