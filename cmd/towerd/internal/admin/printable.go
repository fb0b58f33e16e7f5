package admin

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Operator output carries text towerd does not write: the Consul agent's
// error bodies, an upstream's or a file's text in an error, names. Printed
// raw, an escape sequence in it moves a terminal's cursor, rewrites what is
// already on screen (issue 35: a carriage return and backspaces over a
// finding), or, on some terminals, answers back. So every such text goes
// to a terminal escaped: each control character (C0, DEL, C1), each byte
// that is not UTF-8, and the bidirectional overrides that reorder a line
// as Go writes them in a quoted string (\x1b, \r, \u202e).

// Printable is s with every control character escaped, line breaks too:
// one field of a line.
func Printable(s string) string { return escapeControls(s, false) }

// PrintableLines is s with every control character escaped but its line
// breaks: a whole text of lines towerd wrote around others' fields.
func PrintableLines(s string) string { return escapeControls(s, true) }

func escapeControls(s string, keepNewlines bool) string {
	if !needsEscape(s, keepNewlines) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])|0x100, 16)[1:])
		case r == '\n' && keepNewlines:
			b.WriteByte('\n')
		case unsafeRune(r):
			q := strconv.QuoteRuneToASCII(r) // '\x1b', '\r', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func needsEscape(s string, keepNewlines bool) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || (unsafeRune(r) && !(r == '\n' && keepNewlines)) {
			return true
		}
		i += size
	}
	return false
}

// unsafeRune: a control character, or a bidirectional embedding, override
// or isolate (U+202A..U+202E, U+2066..U+2069).
func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}
