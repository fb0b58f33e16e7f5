package dnswire

import (
	"bytes"
	"testing"

	"github.com/miekg/dns"
)

func TestReadPlainName(t *testing.T) {
	// "www.example.com." at 0, then "mail" + a pointer to "example.com." (offset 4).
	msg := []byte{3, 'w', 'w', 'w', 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 3, 'c', 'o', 'm', 0,
		4, 'M', 'a', 'i', 'l', 0xC0, 4}
	long := bytes.Repeat([]byte{63}, 1)
	for range 4 {
		long = append(long, bytes.Repeat([]byte{'a'}, 63)...)
		long = append(long, 63)
	}
	long = append(long[:len(long)-1], 0)
	cases := []struct {
		name string
		msg  []byte
		off  int
		want string // "" when refused
		end  int
	}{
		{"plain", msg, 0, "www.example.com.", 17},
		{"backward pointer, case kept", msg, 17, "Mail.example.com.", 24},
		{"pointer to itself", []byte{0xC0, 0}, 0, "", 0},
		{"forward pointer", []byte{0xC0, 2, 0}, 0, "", 0},
		{"pointer loop", []byte{3, 'a', 'b', 'c', 0xC0, 0}, 0, "", 0},
		{"escape needed", []byte{3, 'a', ' ', 'c', 0}, 0, "", 0},
		{"extended label type", []byte{0x41, 0}, 0, "", 0},
		{"cut short", []byte{3, 'a', 'b'}, 0, "", 0},
		{"over 255 bytes", long, 0, "", 0},
	}
	for _, c := range cases {
		got, end, ok := ReadPlainName(c.msg, c.off, nil)
		if c.want == "" {
			if ok {
				t.Errorf("%s: accepted %q", c.name, got)
			}
			continue
		}
		if !ok {
			t.Errorf("%s: refused", c.name)
			continue
		}
		want := make([]byte, 256)
		n, err := dns.PackDomainName(c.want, want, 0, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want[:n]) || end != c.end {
			t.Errorf("%s: %q ending at %d, want %q ending at %d", c.name, got, end, want[:n], c.end)
		}
	}
}

func TestSkipPlainOPT(t *testing.T) {
	opt := func(rcodeHi byte, opts ...byte) []byte {
		b := []byte{0, 0, 41, 4, 0xD0, rcodeHi, 0, 0x80, 0, 0, byte(len(opts))}
		return append(b, opts...)
	}
	cases := []struct {
		name string
		rr   []byte
		ok   bool
	}{
		{"bare", opt(0), true},
		{"cookie", opt(0, 0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8), true},
		{"padding", opt(0, 0, 12, 0, 2, 0, 0), true},
		{"extended rcode", opt(1), false},
		{"EDE option", opt(0, 0, 15, 0, 2, 0, 3), false},
		{"option cut short", opt(0, 0, 10, 0, 9, 1), false},
	}
	for _, c := range cases {
		end, ok := SkipPlainOPT(c.rr, 0)
		if ok != c.ok || (ok && end != len(c.rr)) {
			t.Errorf("%s: end %d ok %v, want ok %v at %d", c.name, end, ok, c.ok, len(c.rr))
		}
	}
}
