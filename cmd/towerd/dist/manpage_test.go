package main

import (
	"strings"
	"testing"
)

func TestRoff(t *testing.T) {
	for in, want := range map[string]string{
		`-config \n`: `\-config \en`,
		".hidden":    `\&.hidden`,
		"'quoted":    `\&'quoted`,
	} {
		if got := roff(in); got != want {
			t.Errorf("roff(%q) = %q, want %q", in, got, want)
		}
	}
}

// A group gets an entry of its own before its members', serve's flags are
// the OPTIONS, and every other subcommand's flags stand under it.
func TestTowerdManPage(t *testing.T) {
	cmds := []command{
		{Name: "serve", Synopsis: "[flags]", Summary: "run the resolver", Flags: []flagHelp{{"config", "string", "config file"}}},
		{Name: "stats", Synopsis: "[-json]", Summary: "show figures", Flags: []flagHelp{{"json", "", "print JSON"}}},
		{Name: "cache list", Summary: "list cached answers", Flags: []flagHelp{{"stale", "", "only stale"}}},
		{Name: "cache dump", Synopsis: "FILE", Summary: "write the cache"},
		{Name: "log-queries", Synopsis: "[on|off]", Summary: "switch the query log"},
	}
	page := towerdManPage(cmds, "2026-01-01", "0.1.0")
	for _, want := range []string{
		"towerd stats [\\-json]\n",
		".TP\n.B cache\nits subcommands list, dump follow.\n.TP\n.B cache list\nlist cached answers.\n.RS\n.TP\n\\fB\\-stale\\fR\nonly stale\n.RE\n.TP\n.B cache dump\n",
		".B log\\-queries\n",
		".SH OPTIONS\nThe flags of\n.B serve\nand\n.BR check :\n.TP\n\\fB\\-config\\fR \\fIstring\\fR\nconfig file\n",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("towerd(8) lacks %q:\n%s", want, page)
		}
	}
	if strings.Count(page, ".B cache\n") != 1 {
		t.Errorf("the cache group has %d entries, want 1", strings.Count(page, ".B cache\n"))
	}
}
