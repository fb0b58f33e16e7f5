package dnswire

import (
	"errors"

	"github.com/miekg/dns"
)

// Names on the wire (RFC 1035 section 3.1 and 4.1.4): labels of up to 63
// bytes, each with its length byte, ended by the root's zero byte, or by a
// compression pointer to an earlier spelling of the rest. A name's
// uncompressed wire form is at most MaxNameLen bytes.

// MaxNameLen is the longest name in uncompressed wire form (RFC 1035
// section 2.3.4).
const MaxNameLen = 255

// maxPointers bounds the compression pointers one name may follow, as
// miekg/dns bounds them (maxCompressionPointers): a name can hold at most
// that many labels, so more pointers than that is a loop.
const maxPointers = (MaxNameLen+1)/2 - 2

// ErrName is a name that cannot be read: cut short, a label type other than
// a length or a pointer (RFC 6891 section 5's extended types are obsolete),
// longer than MaxNameLen, or a pointer loop.
var ErrName = errors.New("malformed domain name")

// ReadName reads the name at off in msg, appends its uncompressed wire form
// to dst, and returns it with the offset just past the name where it
// starts. It accepts what miekg/dns's UnpackDomainName accepts (pointers to
// any offset inside msg, at most maxPointers of them, a name of at most
// MaxNameLen bytes), so that a message this package reads is one the
// dns.Msg path would read too.
func ReadName(msg []byte, off int, dst []byte) ([]byte, int, error) {
	return walkName(msg, off, dst, true)
}

// skipName checks the name at off in msg by ReadName's rules, without
// copying it, and returns the offset just past it where it starts.
func skipName(msg []byte, off int) (int, error) {
	_, next, err := walkName(msg, off, nil, false)
	return next, err
}

// walkName is ReadName, appending the labels to dst only when keep is set.
func walkName(msg []byte, off int, dst []byte, keep bool) ([]byte, int, error) {
	next := -1
	budget := MaxNameLen // as miekg/dns counts: every label and its length byte
	for pointers := 0; ; {
		if off >= len(msg) {
			return nil, 0, ErrName
		}
		c := int(msg[off])
		switch c & 0xC0 {
		case 0x00:
			if c == 0 {
				if next < 0 {
					next = off + 1
				}
				if keep {
					dst = append(dst, 0)
				}
				return dst, next, nil
			}
			if off+1+c > len(msg) {
				return nil, 0, ErrName
			}
			if budget -= c + 1; budget <= 0 {
				return nil, 0, ErrName
			}
			if keep {
				dst = append(dst, msg[off:off+1+c]...)
			}
			off += 1 + c
		case 0xC0:
			if off+1 >= len(msg) {
				return nil, 0, ErrName
			}
			if next < 0 {
				next = off + 2
			}
			if pointers++; pointers > maxPointers {
				return nil, 0, ErrName
			}
			off = (c&0x3F)<<8 | int(msg[off+1])
		default:
			return nil, 0, ErrName
		}
	}
}

// lower is c in ASCII lower case: names compare without case in ASCII
// only (RFC 4343 section 3).
func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// EqualName reports whether a and b, names in uncompressed wire form, are
// the same name: equal bytes, ASCII letters without case (RFC 4343).
func EqualName(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] && lower(a[i]) != lower(b[i]) {
			return false
		}
	}
	return true
}

// InZone reports whether name is zone or below it (both in uncompressed
// wire form), letters compared without case. The root zone holds every
// name.
func InZone(name, zone []byte) bool {
	for i := 0; i < len(name); i += 1 + int(name[i]) {
		if len(name)-i == len(zone) && EqualName(name[i:], zone) {
			return true
		}
		if name[i] == 0 {
			break
		}
	}
	return false
}

// InZoneText is InZone for names in presentation form, fully qualified
// (as miekg/dns and the configuration write them): name is zone or below
// it, ASCII letters compared without case, labels ended by a dot that no
// backslash escapes. The one "is this name inside that zone" of every
// name held as text (routing, the cache's flush, the validator, the
// search list); names read off the wire use InZone. It does not allocate.
func InZoneText[N ~string | ~[]byte](name N, zone string) bool {
	// The common cases, inlined: a name that ends otherwise than zone
	// (its last label's last letter differs), and a canonical name
	// inside it (one comparison).
	n := len(name) - len(zone)
	switch {
	case n < 0 || len(zone) >= 2 && lower(name[len(name)-2]) != lower(zone[len(zone)-2]):
		return zone == "."
	case n > 0 && string(name[n:]) == zone && name[n-1] == '.' && (n < 2 || name[n-2] != '\\'):
		return true
	}
	return inZoneText(name, zone)
}

// inZoneText is InZoneText's whole rule.
func inZoneText[N ~string | ~[]byte](name N, zone string) bool {
	if zone == "." {
		return true
	}
	n := len(name) - len(zone)
	if n < 0 {
		return false
	}
	for i := range len(zone) {
		if c := name[n+i]; c != zone[i] && lower(c) != lower(zone[i]) {
			return false
		}
	}
	if n == 0 {
		return true
	}
	if name[n-1] != '.' {
		return false
	}
	escapes := 0 // an odd run of backslashes before the dot escapes it
	for i := n - 2; i >= 0 && name[i] == '\\'; i-- {
		escapes++
	}
	return escapes%2 == 0
}

// AppendText appends name (uncompressed wire form) to dst in presentation
// form, fully qualified, escaped as miekg/dns escapes it (a special
// character after a backslash, other bytes outside printable ASCII as
// \DDD), with ASCII letters in lower case when fold is set: with fold it
// is dns.CanonicalName of the name miekg/dns would unpack, towerd's cache
// key (cache.NewKey).
func AppendText(dst, name []byte, fold bool) []byte {
	if len(name) <= 1 {
		return append(dst, '.')
	}
	for i := 0; i < len(name) && name[i] != 0; i += 1 + int(name[i]) {
		for _, c := range name[i+1 : i+1+int(name[i])] {
			switch {
			case c == '.' || c == ' ' || c == '\'' || c == '@' || c == ';' || c == '(' || c == ')' || c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c < ' ' || c > '~':
				dst = append(dst, '\\', '0'+c/100, '0'+c/10%10, '0'+c%10)
			case fold:
				dst = append(dst, lower(c))
			default:
				dst = append(dst, c)
			}
		}
		dst = append(dst, '.')
	}
	return dst
}

// PlainLabels reports whether every label of name (uncompressed wire
// form) is made of letters, digits, '-' and '_': a name whose presentation
// form needs no escape, so that its text is its bytes with dots.
func PlainLabels(name []byte) bool {
	for i := 0; i < len(name) && name[i] != 0; i += 1 + int(name[i]) {
		for _, c := range name[i+1 : i+1+int(name[i])] {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// AppendWireName appends the uncompressed wire form of text, a name in
// presentation form (escapes as miekg/dns writes them, fully qualified or
// not), to dst; it reports false for text that is no name. For names
// towerd holds as text (cache keys, zone names, the upstream query's);
// anything read from outside is read with ReadName.
func AppendWireName(dst []byte, text string) ([]byte, bool) {
	var buf [MaxNameLen]byte
	n, err := dns.PackDomainName(dns.Fqdn(text), buf[:], 0, nil, false)
	if err != nil {
		return dst, false
	}
	return append(dst, buf[:n]...), true
}
