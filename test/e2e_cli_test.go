package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/miekg/dns"
)

// The operators' CLI (issue 15), run as a user runs it: the built binary
// against a running towerd's control socket (issue 21), outputs and exit
// statuses asserted.

// allSubcommands is the table `towerd help` must list, in its order.
var allSubcommands = []string{"serve", "check", "stats", "reload", "flush", "cache list", "cache dump", "cache load",
	"lookup", "log-queries", "install", "uninstall", "import-dnsmasq", "drill", "doctor", "completion", "version", "help"}

// closedAdminAddr is a loopback address where nothing listens, for the
// test's whole run: a TCP socket bound to a port the kernel picks but
// never listening holds the port (nobody else can bind it, as they could
// a listener's port closed at once), and a connection to it is refused.
func closedAdminAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}

// cli runs `towerd args...` to its exit and fails the test unless the exit
// status is want; it returns stdout and stderr.
func cli(t *testing.T, want int, args ...string) (string, string) {
	t.Helper()
	code, stdout, stderr := runToExit(t, args...)
	if code != want {
		t.Fatalf("towerd %s: exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, stdout, stderr)
	}
	return stdout, stderr
}

func mustContain(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("%s does not contain %q:\n%s", what, w, text)
		}
	}
}

// Help lists every subcommand one per line ("  towerd NAME SYNOPSIS  summary"),
// the same from -h, --help and help; unknown subcommands and flags are
// named, with the usage, exit 2.
func TestCLIHelpAndUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		out, _ := cli(t, 0, args...)
		var listed []string
		line := regexp.MustCompile(`^  towerd ([a-z-]+(?: [a-z]+)?)(?: [^ ].*?)?  +\S`)
		for _, l := range strings.Split(out, "\n") {
			if m := line.FindStringSubmatch(l); m != nil {
				listed = append(listed, m[1])
			}
		}
		if got, want := strings.Join(listed, ","), strings.Join(allSubcommands, ","); got != want {
			t.Errorf("towerd %s lists %s\nwant %s\n%s", args[0], got, want, out)
		}
	}
	out, _ := cli(t, 0, "help", "flush")
	mustContain(t, "help flush", out, "usage: towerd flush NAME | -zone ZONE | -all", "-zone", "-all", "-control")

	_, stderr := cli(t, 2, "stat")
	mustContain(t, "towerd stat", stderr, `unknown subcommand "stat" (did you mean "stats"?)`, "subcommands:", "  towerd lookup NAME")
	_, stderr = cli(t, 2, "cache")
	mustContain(t, "towerd cache", stderr, "towerd cache: name a subcommand: list, dump, load", "subcommands:")
	out, _ = cli(t, 0, "help", "cache")
	mustContain(t, "help cache", out, "usage: towerd cache list", "usage: towerd cache dump FILE", "usage: towerd cache load FILE")
	_, stderr = cli(t, 2, "cache", "show")
	mustContain(t, "towerd cache show", stderr, `unknown subcommand "cache show"`, "  towerd cache list")
	for _, args := range [][]string{{"flush", "-bogus"}, {"lookup", "x.example.", "--nope"}, {"stats", "-bogus"}, {"reload", "-bogus"}} {
		_, stderr := cli(t, 2, args...)
		bad := strings.TrimLeft(args[len(args)-1], "-")
		mustContain(t, "towerd "+strings.Join(args, " "), strings.ToLower(stderr), "flag provided but not defined: -"+bad, "usage", "-control")
	}
	_, stderr = cli(t, 2, "flush")
	mustContain(t, "towerd flush", stderr, "name exactly one of NAME, -zone ZONE or -all", "usage: towerd flush")
	_, stderr = cli(t, 2, "log-queries", "maybe")
	mustContain(t, "towerd log-queries maybe", stderr, `"maybe" is neither on nor off`)
	_, stderr = cli(t, 2, "completion", "fish")
	mustContain(t, "towerd completion fish", stderr, "bash or zsh")
	out, _ = cli(t, 0, "version")
	if strings.TrimSpace(out) != "towerd dev" {
		t.Errorf("towerd version = %q, want %q (no -ldflags in the test build)", out, "towerd dev")
	}
}

// Without a towerd at the control socket every control subcommand says so,
// exit 1; stats, without one at the admin address.
func TestCLIDaemonNotRunning(t *testing.T) {
	t.Parallel()
	addr := closedAdminAddr(t)
	sock := controlPath(t)
	dump := filepath.Join(t.TempDir(), "cache.bin")
	if err := os.WriteFile(dump, []byte("TOWERDC\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr := cli(t, 1, "stats", "-admin", addr)
	mustContain(t, "towerd stats", stderr, "no towerd admin server at "+addr+" (connection refused)")
	for _, args := range [][]string{{"stats"}, {"reload"}, {"flush", "-all"}, {"cache", "list"}, {"cache", "dump", "-"},
		{"cache", "load", dump}, {"lookup", "www.example."}, {"log-queries", "on"}} {
		_, stderr := cli(t, 1, append(args, "-control", sock)...)
		mustContain(t, "towerd "+strings.Join(args, " "), stderr, "no towerd control socket at "+sock+" (no such file)")
	}
}

// The completion scripts parse, and bash's completes subcommands, group
// words, flags and fixed arguments from the table.
func TestCLICompletion(t *testing.T) {
	t.Parallel()
	bash, _ := cli(t, 0, "completion", "bash")
	zsh, _ := cli(t, 0, "completion", "zsh")
	dir := t.TempDir()
	bashFile, zshFile := filepath.Join(dir, "towerd.bash"), filepath.Join(dir, "_towerd")
	os.WriteFile(bashFile, []byte(bash), 0o600)
	os.WriteFile(zshFile, []byte(zsh), 0o600)
	if out, err := exec.Command("bash", "-n", bashFile).CombinedOutput(); err != nil {
		t.Errorf("bash -n: %v\n%s", err, out)
	}
	if _, err := exec.LookPath("zsh"); err == nil {
		if out, err := exec.Command("zsh", "-n", zshFile).CombinedOutput(); err != nil {
			t.Errorf("zsh -n: %v\n%s", err, out)
		}
	}
	mustContain(t, "zsh completion", zsh, "#compdef towerd", "compadd -- list dump load",
		"('flush')\n\t\t_arguments -s \\\n\t\t\t'(-all --all)'{-all,--all}'[",
		"'(-zone --zone)'{-zone,--zone}'[forget every name at or below ZONE]:string: '")
	for _, tc := range []struct {
		words string
		want  string
	}{
		{"towerd ca", "cache"},
		{"towerd cache l", "list load"},
		{"towerd flush -", "-all -config -control -zone"},
		{"towerd cache list -s", "-stale"},
		{"towerd log-queries o", "off on"},
		{"towerd lookup www.example. AA", "AAAA"},
		{"towerd lookup -control /run/x.sock www.example. AA", "AAAA"},
		{"towerd lookup -control /run/x.sock AA", ""},
		{"towerd -con", "-config -consul-dns -consul-http -control"},
		{"towerd drill -clients ''", ""},
		{"towerd completion z", "zsh"},
		// Both spellings of a flag, as the usage lines write them (issue
		// 25: install's --root and --dry-run did not complete).
		{"towerd install --r", "--root"},
		{"towerd install --dry", "--dry-run"},
		{"towerd install -dry", "-dry-run"},
		{"towerd flush --", "--all --config --control --zone"},
		{"towerd cache list --s", "--stale"},
		{"towerd --con", "--config --consul-dns --consul-http --control"},
		{"towerd lookup --control /run/x.sock www.example. AA", "AAAA"},
	} {
		script := fmt.Sprintf("source %s\nCOMP_WORDS=(%s)\nCOMP_CWORD=$((${#COMP_WORDS[@]}-1))\n_towerd\nprintf '%%s\\n' \"${COMPREPLY[@]}\" | sort | tr '\\n' ' '", bashFile, tc.words)
		out, err := exec.Command("bash", "-c", script).CombinedOutput()
		if got := strings.TrimSpace(string(out)); err != nil || got != tc.want {
			t.Errorf("completing %q: %q (%v), want %q", tc.words, got, err, tc.want)
		}
	}
	// A directory after --root: the value of a flag spelled with two
	// dashes completes as the flag's own.
	if err := os.Mkdir(filepath.Join(dir, "node"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("source %s\nCOMP_WORDS=(towerd install --root %s/n)\nCOMP_CWORD=3\n_towerd\nprintf '%%s ' \"${COMPREPLY[@]}\"", bashFile, dir)
	if out, err := exec.Command("bash", "-c", script).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != dir+"/node" {
		t.Errorf("completing towerd install --root %s/n: %q (%v), want %s/node", dir, out, err, dir)
	}

	// zsh: the specs _arguments is handed once zsh has expanded the
	// script (a stub _arguments prints them): each flag both ways.
	if _, err := exec.LookPath("zsh"); err != nil {
		t.Log("no zsh: its completion is checked by zsh -n in the package test only")
		return
	}
	for _, tc := range []struct {
		words string
		want  []string
	}{
		{"towerd install ''", []string{"(-root --root)-root[", "(-root --root)--root[", "(-dry-run --dry-run)--dry-run[", "(-dry-run --dry-run)-dry-run["}},
		{"towerd flush ''", []string{"(-zone --zone)--zone[forget every name at or below ZONE]:string: ", "(-all --all)-all[forget everything cached]"}},
		{"towerd cache list ''", []string{"(-stale --stale)--stale["}},
	} {
		script := fmt.Sprintf("compdef() { : }\nsource %s\n_arguments() { print -rl -- \"$@\" }\n_describe() { : }\ncompadd() { : }\n"+
			"words=(%s)\nCURRENT=${#words}\n_towerd", zshFile, tc.words)
		out, err := exec.Command("zsh", "-f", "-c", script).CombinedOutput()
		specs := strings.Split(strings.TrimSpace(string(out)), "\n")
		if err != nil {
			t.Errorf("zsh completing %s: %v\n%s", tc.words, err, out)
			continue
		}
		for _, w := range tc.want {
			if !slices.ContainsFunc(specs, func(s string) bool { return strings.HasPrefix(s, w) }) {
				t.Errorf("zsh completing %s: no spec %q among\n%s", tc.words, w, out)
			}
		}
	}
}

// Every control subcommand against a running towerd: lookup explains the
// path (zone, server health, cache state, source), cache list filters,
// the query log's lines appear and stop, flush by name, zone and all, and
// a dump loaded back answers from the cache again.
func TestCLIAgainstDaemon(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	s.def.Add(t, "www.example. 300 IN A 192.0.2.10", "a.corp.example. 300 IN A 192.0.2.20", "b.corp.example. 300 IN A 192.0.2.21")
	admin := []string{"-control", s.d.Control}
	ctl := func(want int, args ...string) (string, string) {
		t.Helper()
		return cli(t, want, append(args, admin...)...)
	}

	out, _ := ctl(0, "lookup", "www.example.")
	mustContain(t, "first lookup", out, "www.example. A", "zone      . -> "+s.def.Addr+" (up",
		"nothing cached for this type", "NOERROR from upstream "+s.def.Addr, "192.0.2.10")
	out, _ = ctl(0, "lookup", "www.example", "a")
	mustContain(t, "second lookup", out, "cache     fresh, positive, ", "of 5m0s left", "NOERROR from the cache (fresh)", "192.0.2.10")
	out, _ = ctl(5, "lookup", "nothing.example.", "AAAA") // NXDOMAIN exits 5
	mustContain(t, "NXDOMAIN lookup", out, "nothing.example. AAAA", "NXDOMAIN from upstream "+s.def.Addr)
	_, stderr := ctl(2, "lookup", "www.example.", "NOTATYPE")
	mustContain(t, "bad type", stderr, `"NOTATYPE" is not a DNS type`, "usage: towerd lookup")

	for _, name := range []string{"a.corp.example.", "b.corp.example."} {
		if r, err := exchange(s.d.UDP, "udp", query(name, dns.TypeA, false)); err != nil || len(r.Answer) != 1 {
			t.Fatalf("%s: %v %v", name, r, err)
		}
	}
	out, _ = ctl(0, "cache", "list")
	mustContain(t, "cache list", out, "NAME ", "www.example.", "a.corp.example.", "b.corp.example.", "fresh", "192.0.2.20", "3 entries")
	out, _ = ctl(0, "cache", "list", "-zone", "corp.example")
	mustContain(t, "cache list -zone", out, "a.corp.example.", "b.corp.example.", "2 entries")
	if strings.Contains(out, "www.example.") {
		t.Errorf("cache list -zone corp.example lists www.example.:\n%s", out)
	}
	out, _ = ctl(0, "cache", "list", "-stale")
	mustContain(t, "cache list -stale", out, "0 entries")
	out, _ = ctl(0, "cache", "list", "-json")
	mustContain(t, "cache list -json", out, `"name": "a.corp.example."`, `"state": "fresh"`)

	// The query log: off, on (a cache line and an upstream line), off.
	out, _ = ctl(0, "log-queries")
	mustContain(t, "log-queries", out, "query log off")
	out, _ = ctl(0, "log-queries", "on")
	mustContain(t, "log-queries on", out, "query log on (was off)")
	exchange(s.d.UDP, "udp", query("www.example.", dns.TypeA, false))
	s.def.Add(t, "new.example. 300 IN A 192.0.2.30")
	exchange(s.d.TCP, "tcp", query("NEW.example.", dns.TypeA, false))
	cacheLine := regexp.MustCompile(`level=INFO msg=query client=127\.0\.0\.1 name=www\.example\. type=A rcode=NOERROR source=cache zone=\. proto=udp duration=\S+`)
	upstreamLine := regexp.MustCompile(`level=INFO msg=query client=127\.0\.0\.1 name=new\.example\. type=A rcode=NOERROR source=upstream upstream=` + regexp.QuoteMeta(s.def.Addr) + ` zone=\. proto=tcp duration=\S+`)
	for _, re := range []*regexp.Regexp{cacheLine, upstreamLine} {
		if _, err := s.d.stderr.waitFor(re, readyTimeout, s.d.exited); err != nil {
			t.Errorf("no query log line %s: %v", re, err)
		}
	}
	out, _ = ctl(0, "stats")
	mustContain(t, "stats", out, "towerd dev (go1.", "query log    on")
	out, _ = ctl(0, "log-queries", "off")
	mustContain(t, "log-queries off", out, "query log off (was on)")
	before := strings.Count(s.d.stderr.String(), "msg=query ")
	exchange(s.d.UDP, "udp", query("www.example.", dns.TypeA, false))
	// Log lines reach the test late (towerd's log buffer, a pipe) but in
	// order: once a marker query asked with the log back on is in, a line
	// for the query above would be in too.
	ctl(0, "log-queries", "on")
	exchange(s.d.UDP, "udp", query("marker.example.", dns.TypeA, false))
	if _, err := s.d.stderr.waitFor(regexp.MustCompile(`msg=query .*name=marker\.example\.`), readyTimeout, s.d.exited); err != nil {
		t.Fatalf("no query line for the marker: %v", err)
	}
	if after := strings.Count(s.d.stderr.String(), "msg=query "); after != before+1 {
		t.Errorf("%d query lines after log-queries off", after-before-1)
	}
	ctl(0, "log-queries", "off")

	// Dump, flush, load: the entries come back with their ages.
	dump := filepath.Join(t.TempDir(), "cache.bin")
	out, _ = ctl(0, "cache", "dump", dump)
	mustContain(t, "cache dump", out, "wrote "+dump)
	_, stderr = ctl(1, "cache", "dump", dump)
	mustContain(t, "cache dump over a file", stderr, "file exists")
	out, _ = ctl(0, "flush", "www.example")
	mustContain(t, "flush NAME", out, "flushed 1 entry for www.example")
	out, _ = ctl(0, "flush", "-zone", "corp.example.")
	mustContain(t, "flush -zone", out, "flushed 2 entries at or below corp.example.")
	out, _ = ctl(0, "flush", "-all")
	mustContain(t, "flush -all", out, "flushed 1 entry (the whole cache)") // new.example.
	out, _ = ctl(0, "cache", "list")
	mustContain(t, "cache list after flush", out, "0 entries")
	out, _ = ctl(0, "cache", "load", dump)
	mustContain(t, "cache load", out, "loaded 4 entries from "+dump, "0 rejected")
	// A loaded entry is never shown as an upstream's (issue 21).
	out, _ = ctl(0, "lookup", "a.corp.example.")
	mustContain(t, "lookup after load", out, "from towerd cache load (zone .)",
		"NOERROR from the cache (fresh), an entry put there by towerd cache load (zone .)", "192.0.2.20")
	out, _ = ctl(0, "cache", "list", "-zone", "corp.example")
	mustContain(t, "cache list after load", out, " FROM ", "cache load")

	// The file is the operator's: towerd checks the entries, not who may
	// write the file, and never renames it (issue 25: it was set aside as
	// .rejected); a damaged one is refused by towerd, the file kept too.
	os.Chmod(dump, 0o666)
	ctl(0, "flush", "-all")
	out, _ = ctl(0, "cache", "load", dump)
	mustContain(t, "cache load of a writable file", out, "loaded 4 entries")
	bad := filepath.Join(t.TempDir(), "bad.bin")
	os.WriteFile(bad, []byte("TOWERDC\nnot really"), 0o600)
	_, stderr = ctl(1, "cache", "load", bad)
	mustContain(t, "cache load of a damaged file", stderr, "snapshot refused, the cache is unchanged")
	for _, f := range []string{dump, bad} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("the operator's file %s: %v", f, err)
		}
		if _, err := os.Stat(f + ".rejected"); err == nil {
			t.Errorf("%s was set aside", f)
		}
	}
}

// reload says what changed and what waits for a restart; a broken file is
// refused with the reason, exit 1, and the running configuration stays.
func TestCLIReload(t *testing.T) {
	t.Parallel()
	def, consul := newTestUpstream(t), newTestUpstream(t)
	def.Add(t, "www.example. 300 IN A 192.0.2.10")
	base := "listen = [\"127.0.0.1:0\"]\n[upstream]\ntimeout = \"5s\"\n" + zonesFor(def, consul)
	path := writeConfig(t, base)
	d := startTowerd(t, "-config", path)
	admin := []string{"-control", d.Control}

	out, _ := cli(t, 0, append([]string{"reload"}, admin...)...)
	if strings.TrimSpace(out) != "reloaded: nothing changed" {
		t.Errorf("reload of the same file: %q", out)
	}
	changed := strings.Replace(base, `timeout = "5s"`, "timeout = \"4s\"\nmax_attempts = 2", 1)
	changed = strings.Replace(changed, `listen = ["127.0.0.1:0"]`, "listen = [\"127.0.0.1:0\"]\nlog_queries = true\n[cache]\nsize = 500", 1)
	os.WriteFile(path, []byte(changed), 0o600)
	out, _ = cli(t, 0, append([]string{"reload"}, admin...)...)
	mustContain(t, "reload", out, "applied:         log_queries, upstream.timeout, upstream.max_attempts",
		"needs a restart: cache.size (the running values stay until then)")
	out, _ = cli(t, 0, append([]string{"log-queries"}, admin...)...)
	mustContain(t, "log-queries after reload", out, "query log on")
	// The edit still differs from what runs; reverted, it needs no restart
	// (issue 25: the comparison is with the running config, not the file
	// read last).
	out, _ = cli(t, 0, append([]string{"reload"}, admin...)...)
	mustContain(t, "reload of the same edit", out, "needs a restart: cache.size")
	os.WriteFile(path, []byte(base), 0o600)
	out, _ = cli(t, 0, append([]string{"reload"}, admin...)...)
	mustContain(t, "reload of the reverted file", out, "applied:         log_queries, upstream.timeout, upstream.max_attempts")
	if strings.Contains(out, "needs a restart") {
		t.Errorf("reload of the reverted file still needs a restart:\n%s", out)
	}

	os.WriteFile(path, []byte(changed+"\n[cache]\nbogus = 1\n"), 0o600)
	_, stderr := cli(t, 1, append([]string{"reload"}, admin...)...)
	mustContain(t, "reload of a broken file", stderr, "409 Conflict", "reload rejected; the running configuration stays")
	if r, err := exchange(d.UDP, "udp", query("www.example.", dns.TypeA, false)); err != nil || len(r.Answer) != 1 {
		t.Errorf("after a rejected reload: %v %v", r, err)
	}
}

// `towerd check` with the built binary: config messages name the key and
// what it wants (no Go type names), host names in servers are refused as
// such, a missing -config file is named, and a valid config whose listen
// addresses allow does not cover passes with a warning.
func TestCheckMessagesAndWarnings(t *testing.T) {
	t.Parallel()
	def, consul := newTestUpstream(t), newTestUpstream(t)
	zones := zonesFor(def, consul)
	for _, tc := range []struct {
		body string
		want string
	}{
		{"[cache]\nsize = \"10\"\n" + zones, `:2: key "cache.size": want an integer, got string "10"`},
		{"query_timeout = 2\n" + zones, `:1: key "query_timeout": want a duration string such as "30s", got 2`},
		{"[[zone]]\nname = \"corp.\"\nservers = [\"ns1.corp.example\"]\n" + zones, `:3: key "zone[0].servers[0]": "ns1.corp.example" is a host name; servers must be IP addresses`},
		{"[[zone]]\nname = \"corp.\"\nservers = [\"10.0.0.300\"]\n" + zones, `:3: key "zone[0].servers[0]": "10.0.0.300" is not an IP address (each of the four numbers goes from 0 to 255)`},
	} {
		path := writeConfig(t, tc.body)
		_, stderr := cli(t, 2, "check", "-config", path)
		mustContain(t, "check", stderr, path+tc.want)
		for _, leak := range []string{"config.", "main.", "missing port", "of type"} {
			if strings.Contains(stderr, leak) {
				t.Errorf("check message contains %q: %s", leak, stderr)
			}
		}
	}
	missing := filepath.Join(t.TempDir(), "nope.toml")
	_, stderr := cli(t, 2, "check", "-config", missing)
	mustContain(t, "check of a missing file", stderr, "config file "+missing+" does not exist")

	path := writeConfig(t, "listen = [\"0.0.0.0:5353\", \"192.0.2.7:53\"]\nallow = [\"127.0.0.0/8\"]\n"+zones)
	out, stderr := cli(t, 0, "check", "-config", path)
	mustContain(t, "check stdout", out, "config ok: listen 0.0.0.0:5353, 192.0.2.7:53")
	mustContain(t, "check warnings", stderr,
		"warning: listen 0.0.0.0:5353 takes queries on every interface, but allow (127.0.0.0/8) admits only loopback clients",
		"warning: listen 192.0.2.7:53 is not loopback and allow (127.0.0.0/8) does not cover its network")
	path = writeConfig(t, "listen = [\"127.0.0.1:5353\"]\n"+zones)
	if _, stderr := cli(t, 0, "check", "-config", path); stderr != "" {
		t.Errorf("check of a loopback config warns: %s", stderr)
	}
}

// `towerd version`, /stats and `towerd stats` show the version set with
// -ldflags (the Makefile's VERSION), and the Go version that built it.
func TestVersionFromLdflags(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "towerd")
	build := exec.Command("go", "build", "-ldflags", "-X main.version=v0.9.9-test", "-o", bin, "../cmd/towerd")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil || strings.TrimSpace(string(out)) != "towerd v0.9.9-test" {
		t.Fatalf("version: %q %v", out, err)
	}
	def, consul := newTestUpstream(t), newTestUpstream(t)
	p := startProcess(t, exec.Command(bin, "-config", "", "-listen", "127.0.0.1:0", "-admin", "127.0.0.1:0",
		"-control", "", "-upstream", def.Addr, "-consul-dns", consul.Addr, "-consul-http", "off", "-state-dir", ""))
	d := &towerd{process: p}
	t.Cleanup(func() { d.stopAndCheck(t) })
	m, err := p.stderr.waitFor(adminLine, readyTimeout, p.exited)
	if err != nil {
		t.Fatalf("no admin server: %v\n%s", err, p.stderr)
	}
	if _, err := p.stderr.waitFor(servingLine, readyTimeout, p.exited); err != nil {
		t.Fatalf("not serving: %v", err)
	}
	body := string(adminGet(t, m[1], "/stats"))
	mustContain(t, "/stats", body, `"version": "v0.9.9-test"`, `"go_version": "go1.`)
	stats, _ := cli(t, 0, "stats", "-admin", m[1])
	mustContain(t, "towerd stats", stats, "towerd v0.9.9-test (go1.")
	metrics := string(adminGet(t, m[1], "/metrics"))
	if !regexp.MustCompile(`towerd_build_info\{goversion="go1\.[^"]+",version="v0\.9\.9-test"\} 1`).MatchString(metrics) {
		t.Errorf("no towerd_build_info with the version in /metrics")
	}
}

// Servers of zone "." read from resolv_conf are followed live (issue 14):
// the change is applied without a reload, so the reload that comes after
// it has nothing left to apply and says so. No query is sent to those
// servers (loopback addresses on port 53, which resolv.conf implies;
// nothing needs to answer there).
func TestCLIReloadResolvConf(t *testing.T) {
	t.Parallel()
	consul := newTestUpstream(t)
	rc := filepath.Join(t.TempDir(), "resolv.conf")
	os.WriteFile(rc, []byte("nameserver 127.0.0.201\n"), 0o600)
	path := writeConfig(t, fmt.Sprintf("listen = [\"127.0.0.1:0\"]\nresolv_conf = %q\n[[zone]]\nname = \".\"\nservers = []\n[[zone]]\nname = \"consul.\"\nservers = [%q]\n", rc, consul.Addr))
	d := startTowerd(t, "-config", path)
	out, _ := cli(t, 0, "reload", "-control", d.Control)
	mustContain(t, "reload with resolv.conf unchanged", out, "reloaded: nothing changed")
	os.WriteFile(rc, []byte("nameserver 127.0.0.202\n"), 0o600)
	followed := regexp.MustCompile(`servers changed: its resolv.conf changed.*new=127\.0\.0\.202:53`)
	if _, err := d.stderr.waitFor(followed, readyTimeout, d.exited); err != nil {
		t.Fatalf("the resolv.conf change was not followed: %v", err)
	}
	out, _ = cli(t, 0, "reload", "-control", d.Control)
	mustContain(t, "reload after the change was followed", out, "reloaded: nothing changed")
}
