package main

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// Flags as flag.PrintDefaults prints them: a typed flag, usage over two
// lines, a boolean, a one-letter boolean; sorted by name.
func TestParseFlagHelp(t *testing.T) {
	help := `Usage of towerd drill:
  -v	log debug lines
  -config string
    	config file (TOML); "" = built-in
    	defaults only
  -clients int
    	simulated clients (default 8)
  -json
    	print JSON
`
	got := parseFlagHelp(help)
	want := []flagDoc{
		{"clients", "int", "simulated clients (default 8)"},
		{"config", "string", `config file (TOML); "" = built-in defaults only`},
		{"json", "", "print JSON"},
		{"v", "", "log debug lines"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseFlagHelp:\n got %+v\nwant %+v", got, want)
	}
}

// `towerd help -json`, which the package's man page is written from, has
// every entry of the table, in order, with the flags its -h lists.
func TestHelpJSON(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"help", "-json"}, &out, &errOut); code != exitOK {
		t.Fatalf("towerd help -json: exit %d: %s", code, errOut.String())
	}
	var docs []commandDoc
	if err := json.Unmarshal(out.Bytes(), &docs); err != nil {
		t.Fatal(err)
	}
	if len(docs) != len(commands) {
		t.Fatalf("%d entries, want %d", len(docs), len(commands))
	}
	byName := map[string]commandDoc{}
	for i, d := range docs {
		if d.Name != commands[i].Name || d.Summary != commands[i].Summary {
			t.Errorf("entry %d: %q %q, want %q %q", i, d.Name, d.Summary, commands[i].Name, commands[i].Summary)
		}
		byName[d.Name] = d
	}
	if got := byName["cache list"].Flags; len(got) != 5 || got[3] != (flagDoc{"stale", "", "only entries past their TTL (served stale, or expired)"}) {
		t.Errorf("cache list flags %+v", got)
	}
	var doctorFlags []string
	for _, f := range byName["doctor"].Flags {
		doctorFlags = append(doctorFlags, f.Name+"="+valueKind(f))
	}
	if got := strings.Join(doctorFlags, " "); got != "admin=value config=file consul=value json= list= root=dir rules=file timeout=value" {
		t.Errorf("doctor flags: %s", got)
	}
	// Flags come sorted by name, each with the kind of value it takes.
	if got := byName["drill"].Flags; len(got) < 2 || got[1].Name != "clients" || got[1].Value != "int" {
		t.Errorf("drill flags %+v", got)
	}
}
