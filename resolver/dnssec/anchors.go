package dnssec

import (
	"bytes"
	"fmt"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/boundedfile"
)

// DefaultAnchorFile is Debian's root trust anchor (package dns-root-data),
// DS records of the root KSKs, the 2024 one among them.
const DefaultAnchorFile = "/usr/share/dns/root.ds"

// Bounds of a trust anchor file: the root's is a few hundred bytes with
// two records; a site adds a handful for its own signed zones.
const (
	MaxAnchorFileSize = 64 << 10
	MaxAnchors        = 64
)

// anchorRule: the anchor decides what is secure, so like the config it
// must be root's or ours and not writable by others.
var anchorRule = boundedfile.Rule{MaxSize: MaxAnchorFileSize, Owned: true}

// ReadAnchors reads the DS and DNSKEY records of a trust anchor file.
func ReadAnchors(path string) ([]dns.RR, error) {
	b, err := boundedfile.ReadFile(path, anchorRule)
	if err != nil {
		return nil, err
	}
	return ParseAnchors(b, path)
}

// ParseAnchors parses zone-file text (as dns-root-data and unbound's
// trust-anchor-file write it) into DS and DNSKEY records; any other type,
// a DNSKEY without the zone key bit, or more than MaxAnchors records is
// an error that names the line.
func ParseAnchors(text []byte, file string) ([]dns.RR, error) {
	zp := dns.NewZoneParser(bytes.NewReader(text), ".", file)
	var out []dns.RR
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		switch rr := rr.(type) {
		case *dns.DS:
		case *dns.DNSKEY:
			if rr.Flags&dns.ZONE == 0 {
				return nil, fmt.Errorf("%s: DNSKEY for %s is no zone key", file, rr.Hdr.Name)
			}
		default:
			return nil, fmt.Errorf("%s: %s record for %s: only DS and DNSKEY make anchors", file,
				dns.TypeToString[rr.Header().Rrtype], rr.Header().Name)
		}
		if len(out) == MaxAnchors {
			return nil, fmt.Errorf("%s: more than %d anchors", file, MaxAnchors)
		}
		out = append(out, rr)
	}
	if err := zp.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no DS or DNSKEY record", file)
	}
	return out, nil
}
