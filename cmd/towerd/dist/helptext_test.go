package main

import (
	"reflect"
	"strings"
	"testing"
)

// The help of today's towerd and lines in the shape the operators' CLI
// (issue 15) will add: fixed words, alternatives, placeholders, a command
// on two lines.
const helpFixture = `usage: towerd [serve] [flags]   run the resolver (the default)
       towerd check [flags]     validate the configuration and exit
       towerd stats [-admin ADDR] [--json]
                                show a running towerd's figures
       towerd import-dnsmasq FILE
                                turn a dnsmasq configuration into towerd's
       towerd cache list [--zone Z] [--stale]
                                list the cache
       towerd cache dump|load FILE
                                the state dir's file format
       towerd log-queries on|off  switch the query log
       towerd lookup NAME [TYPE]  explain how NAME is answered
       towerd version           print the version

Run "towerd -h" for the flags.
`

func TestParseCommands(t *testing.T) {
	cmds := parseCommands(helpFixture)
	var names []string
	for _, c := range cmds {
		names = append(names, c.Name)
	}
	want := []string{"serve", "check", "stats", "import-dnsmasq", "cache", "log-queries", "lookup", "version"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("commands %v, want %v", names, want)
	}
	byName := map[string]*command{}
	for _, c := range cmds {
		byName[c.Name] = c
	}
	for _, tc := range []struct {
		name, summary string
		words, args   []string
	}{
		{"serve", "run the resolver (the default)", nil, nil},
		{"stats", "show a running towerd's figures", nil, nil},
		{"import-dnsmasq", "turn a dnsmasq configuration into towerd's", nil, []string{"FILE"}},
		{"cache", "list the cache the state dir's file format", []string{"list", "dump", "load"}, []string{"FILE"}},
		{"log-queries", "switch the query log", []string{"on", "off"}, nil},
		{"lookup", "explain how NAME is answered", nil, []string{"NAME"}},
		{"version", "print the version", nil, nil},
	} {
		c := byName[tc.name]
		if c.Summary != tc.summary || !reflect.DeepEqual(c.Words, tc.words) || !reflect.DeepEqual(c.Args, tc.args) {
			t.Errorf("%s: summary %q words %v args %v, want %q %v %v", tc.name, c.Summary, c.Words, c.Args, tc.summary, tc.words, tc.args)
		}
	}
	if got := byName["cache"].Usage; got != "towerd cache list [--zone Z] [--stale]\ntowerd cache dump|load FILE" {
		t.Errorf("cache usage %q", got)
	}
}

func TestParseFlags(t *testing.T) {
	help := `Usage of towerd drill:
  -clients int
    	simulated clients (default 8)
  -config string
    	config file (TOML); "" = built-in
    	defaults only
  -json
    	print JSON
  -v	log debug lines
`
	got := parseFlags(help)
	want := []flagHelp{
		{"clients", "int", "simulated clients (default 8)"},
		{"config", "string", `config file (TOML); "" = built-in defaults only`},
		{"json", "", "print JSON"},
		{"v", "", "log debug lines"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseFlags:\n got %+v\nwant %+v", got, want)
	}
}

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
	page := towerdManPage(parseCommands(helpFixture), "2026-01-01", "0.1.0")
	if !strings.Contains(page, ".B log\\-queries\n") {
		t.Errorf("towerd(8) lacks log-queries:\n%s", page)
	}
}
