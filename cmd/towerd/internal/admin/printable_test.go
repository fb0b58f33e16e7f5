package admin

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestPrintableEscapesControls(t *testing.T) {
	for _, tc := range []struct{ in, field, lines string }{
		{"plain text", "plain text", "plain text"},
		{"red\x1b[31mALERT", `red\x1b[31mALERT`, `red\x1b[31mALERT`},
		{"ok\rPROBLEM\b\b", `ok\rPROBLEM\b\b`, `ok\rPROBLEM\b\b`},
		{"two\nlines", `two\nlines`, "two\nlines"},
		{"bad \xff byte", `bad \xff byte`, `bad \xff byte`},
		{"c1 \u009b1m", `c1 \u009b1m`, `c1 \u009b1m`},
		{"rtl \u202egnp.exe", `rtl \u202egnp.exe`, `rtl \u202egnp.exe`},
		{"tab\there", `tab\there`, `tab\there`},
		{"ünïcode ok", "ünïcode ok", "ünïcode ok"},
	} {
		if got := Printable(tc.in); got != tc.field {
			t.Errorf("Printable(%q) = %q, want %q", tc.in, got, tc.field)
		}
		if got := PrintableLines(tc.in); got != tc.lines {
			t.Errorf("PrintableLines(%q) = %q, want %q", tc.in, got, tc.lines)
		}
	}
}

// towerd stats prints the Consul agent's last error, a reload's error and
// every other field with their control characters escaped (issue 35).
func TestRenderEscapesOthersText(t *testing.T) {
	var r Report
	r.Version = "1.0\x1b]0;owned\x07"
	r.ConsulWatch = &WatchStatus{State: "failing", LastError: "HTTP 500: \x1b[2J\rall good\bX"}
	r.LastReload = &ReloadStatus{At: time.Now(), OK: false, Error: "line 3: \x1b[31mbad\nsecond line"}
	var buf bytes.Buffer
	Render(&buf, r, time.Now())
	out := buf.String()
	for _, c := range []string{"\x1b", "\r", "\b", "\x07"} {
		if strings.Contains(out, c) {
			t.Errorf("stats output holds %q raw:\n%s", c, out)
		}
	}
	for _, want := range []string{`\x1b[2J\rall good\bX`, `\x1b]0;owned\a`, `line 3: \x1b[31mbad\nsecond line`} {
		if !strings.Contains(out, want) {
			t.Errorf("stats output lacks %q:\n%s", want, out)
		}
	}
}
