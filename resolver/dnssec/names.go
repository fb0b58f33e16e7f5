package dnssec

import (
	"bytes"
	"strings"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/dnswire"
)

// Name helpers on fully qualified names in miekg/dns's presentation form.

// under reports whether name is zone or below it (case-insensitive).
func under(name, zone string) bool { return dnswire.InZoneText(name, zone) }

// parent is name without its first label; "." has none.
func parent(name string) (string, bool) {
	if name == "." || name == "" {
		return "", false
	}
	off, end := dns.NextLabel(name, 0)
	if end {
		return ".", true
	}
	return name[off:], true
}

// ancestorWithLabels is name's ancestor (or name) with n labels.
func ancestorWithLabels(name string, n int) string {
	idx := dns.Split(name)
	if n >= len(idx) {
		return name
	}
	if n <= 0 {
		return "."
	}
	return name[idx[len(idx)-n]:]
}

// canonicalLabels are name's labels in wire form, lower case, from the
// root outwards: the order RFC 4034 §6.1 compares them in.
func canonicalLabels(name string) [][]byte {
	buf := make([]byte, 256)
	n, err := dns.PackDomainName(dns.Fqdn(name), buf, 0, nil, false)
	if err != nil {
		return nil
	}
	wire := bytes.ToLower(buf[:n])
	var labels [][]byte
	for i := 0; i < len(wire) && wire[i] != 0; i += int(wire[i]) + 1 {
		labels = append(labels, wire[i+1:i+1+int(wire[i])])
	}
	for i, j := 0, len(labels)-1; i < j; i, j = i+1, j-1 {
		labels[i], labels[j] = labels[j], labels[i]
	}
	return labels
}

// canonicalCompare orders two names as RFC 4034 §6.1 does: label by label
// from the right, each label as lower-case bytes.
func canonicalCompare(a, b string) int {
	la, lb := canonicalLabels(a), canonicalLabels(b)
	for i := 0; i < len(la) && i < len(lb); i++ {
		if c := bytes.Compare(la[i], lb[i]); c != 0 {
			return c
		}
	}
	return len(la) - len(lb)
}

// nsecCovers reports whether the NSEC interval (owner, next) holds name
// strictly between its ends; the zone's last NSEC (next is the apex,
// before owner) covers everything after owner.
func nsecCovers(owner, next, name string) bool {
	if canonicalCompare(owner, next) < 0 {
		return canonicalCompare(owner, name) < 0 && canonicalCompare(name, next) < 0
	}
	return canonicalCompare(owner, name) < 0 || canonicalCompare(name, next) < 0
}

// commonAncestor is the longest name both a and b are at or below.
func commonAncestor(a, b string) string {
	n := dns.CompareDomainName(a, b)
	return ancestorWithLabels(a, n)
}

func equalNames(a, b string) bool { return strings.EqualFold(a, b) }
