package test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Issue 21, item 6: every file towerd follows is opened without blocking,
// must be a regular file and is read up to a size. Before: resolv.conf at
// /dev/zero took 1.63 GB in 4 s, a 100 MB one kept 311 MB; a FIFO at start
// kept towerd from serving (towerd check blocked too); a FIFO swapped in
// before SIGHUP wedged the main loop (watchdog pings stopped, SIGTERM was
// ignored); hosts files the same, /dev/urandom growing ~23 MB/s.

// hostileFile is one kind of file planted where towerd reads one.
type hostileFile struct {
	name  string
	why   string // what towerd's log says of it
	plant func(t *testing.T, path string)
}

func hostileFiles(t *testing.T) []hostileFile {
	big := filepath.Join(t.TempDir(), "100MB")
	writeFileAt(t, big, "")
	if err := os.Truncate(big, 100<<20); err != nil { // sparse: 100 MB that cost no disk
		t.Fatal(err)
	}
	link := func(target string) func(t *testing.T, path string) {
		return func(t *testing.T, path string) {
			t.Helper()
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}
	}
	return []hostileFile{
		{"FIFO", "it is a FIFO, not a regular file", func(t *testing.T, path string) {
			t.Helper()
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"/dev/zero", "it is a device, not a regular file", link("/dev/zero")},
		{"/dev/urandom", "it is a device, not a regular file", link("/dev/urandom")},
		{"100 MB", "it has 104857600 bytes", link(big)},
	}
}

// swapIn puts what plant makes in path's place with one rename, as a DHCP
// client replaces resolv.conf.
func swapIn(t *testing.T, path string, plant func(t *testing.T, path string)) {
	t.Helper()
	tmp := path + ".new"
	os.Remove(tmp)
	plant(t, tmp)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// fileRSSSlack is what RSS may grow by while hostile files are swapped in
// and reloaded: none of them may be read, so only the reloads' garbage
// (new upstream groups, a new local table) counts.
const fileRSSSlack = 24 << 20

// TestFollowedFilesSwappedBeforeSIGHUP: zone "."'s resolv.conf and a hosts
// file are each replaced by a FIFO, /dev/zero, /dev/urandom and a 100 MB
// file, then towerd gets SIGHUP. Each time the reload returns (RELOADING=1
// then READY=1), watchdog pings keep coming, the last good servers and
// hosts entries stay: a cached name, a miss (from the real upstream) and a
// hosts name are answered, and the log says why each file was refused.
// RSS stays bounded; SIGTERM stops towerd (the harness's cleanup).
func TestFollowedFilesSwappedBeforeSIGHUP(t *testing.T) {
	t.Parallel()
	up, consul := newPort53Upstream(t), newTestUpstream(t)
	up.Add(t, "cached.files.test. 300 IN A 192.0.2.1")
	dir := t.TempDir()
	resolv, hosts := filepath.Join(dir, "resolv.conf"), filepath.Join(dir, "hosts")
	writeFileAt(t, resolv, "nameserver "+hostOf(t, up.Addr)+"\n")
	writeFileAt(t, hosts, "192.0.2.77 host.files.test\n")
	cfg := writeConfig(t, fmt.Sprintf("resolv_conf = %q\n[local]\nhosts_files = [%q]\n[[zone]]\nname = \"consul.\"\nservers = [%q]\n",
		resolv, hosts, consul.Addr))
	notify := newNotifySocket(t)
	const watchdog = time.Second
	d := startTowerdVia(t, []string{"env", "-u", "WATCHDOG_PID", "-u", "LISTEN_FDS", "-u", "LISTEN_PID",
		"NOTIFY_SOCKET=" + notify.Path, fmt.Sprintf("WATCHDOG_USEC=%d", watchdog.Microseconds())},
		"-config", cfg, "-listen", "127.0.0.1:0")
	if ready := notify.nextNot(t, readyTimeout); !ready.has("READY=1") {
		t.Fatalf("first message %q, want READY=1", ready.Raw)
	}
	answers := func(name, want string) {
		t.Helper()
		r := dig(t, d.UDP, name, "A")
		if r.Status != "NOERROR" || !slices.Equal(addresses(r.Answer), []string{want}) {
			t.Errorf("%s: %s %v, want %s\n%s", name, r.Status, addresses(r.Answer), want, r.Output)
		}
	}
	answers("cached.files.test.", "192.0.2.1")
	answers("host.files.test.", "192.0.2.77")
	idleRSS, err := processRSS(d.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	bound := idleRSS + fileRSSSlack
	if raceEnabled {
		bound = idleRSS * rssRaceFactor
	}

	for i, h := range hostileFiles(t) {
		swapIn(t, resolv, h.plant)
		swapIn(t, hosts, h.plant)
		d.signal(t, syscall.SIGHUP)
		pings := 0
		for reloaded := false; !reloaded; {
			m := notify.next(t, 2*watchdog) // a ping at least every half of it
			switch {
			case m.has("WATCHDOG=1"):
				pings++
			case m.has("RELOADING=1"):
			case m.has("READY=1"):
				reloaded = true
			default:
				t.Fatalf("%s: unexpected %q", h.name, m.Raw)
			}
		}
		if m := notify.next(t, 2*watchdog); !m.has("WATCHDOG=1") {
			t.Errorf("%s: after the reload got %q, want the next watchdog ping", h.name, m.Raw)
		}
		miss := fmt.Sprintf("miss-%d.files.test.", i)
		up.Add(t, miss+" 300 IN A 192.0.2.10")
		answers(miss, "192.0.2.10")
		if n := up.Count(miss, dns.TypeA); n != 1 {
			t.Errorf("%s: the miss reached the upstream %d times, want 1", h.name, n)
		}
		answers("cached.files.test.", "192.0.2.1")
		if n := up.Count("cached.files.test.", dns.TypeA); n != 1 {
			t.Errorf("%s: the cached name reached the upstream %d times, want 1", h.name, n)
		}
		answers("host.files.test.", "192.0.2.77")
		for _, line := range []*regexp.Regexp{
			regexp.MustCompile(`hosts file not read; its last good entries stay" file=` + regexp.QuoteMeta(hosts) + ` err=".*` + regexp.QuoteMeta(h.why)),
			regexp.MustCompile(`zone \\"\.\\" keeps its servers: its resolv.conf gives none" why="` + regexp.QuoteMeta(h.why)),
		} {
			if _, err := d.stderr.waitFor(line, readyTimeout, d.exited); err != nil {
				t.Errorf("%s: %v", h.name, err)
			}
		}
		rss, err := processRSS(d.cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s swapped in: reload returned with %d watchdog pings meanwhile; RSS %.1f MiB (idle %.1f, bound %.1f)",
			h.name, pings, mib(rss), mib(idleRSS), mib(bound))
		if rss > bound {
			t.Errorf("%s: RSS %.1f MiB, bound %.1f MiB", h.name, mib(rss), mib(bound))
		}
	}
	_, mfs := scrape(t, d.Admin)
	if got := sample(mfs, "towerd_config_reloads_total", map[string]string{"result": "success"}); got != 4 {
		t.Errorf("towerd_config_reloads_total{result=success} = %v, want 4", got)
	}
}

// TestFollowedFilesHostileAtStart: a FIFO as resolv.conf and as a hosts
// file does not keep towerd from serving: the other zones answer, zone "."
// waits for its file as for a missing one (SERVFAIL), and the warning
// names the file and why; the files' real content is taken once it
// replaces them. `towerd check` returns and says the same. These files
// are not required; the config file and the Consul token are: a FIFO there
// stops `towerd` and `towerd check` at once with exit 2, naming it.
func TestFollowedFilesHostileAtStart(t *testing.T) {
	t.Parallel()
	up, consul := newPort53Upstream(t), newTestUpstream(t)
	up.Add(t, "www.files.test. 300 IN A 192.0.2.7")
	consul.Add(t, "web.service.consul. 0 IN A 192.0.2.8")
	dir := t.TempDir()
	resolv, hosts, fifo := filepath.Join(dir, "resolv.conf"), filepath.Join(dir, "hosts"), filepath.Join(dir, "fifo")
	for _, p := range []string{resolv, hosts, fifo} {
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := writeConfig(t, fmt.Sprintf("resolv_conf = %q\n[local]\nhosts_files = [%q]\n[[zone]]\nname = \"consul.\"\nservers = [%q]\n",
		resolv, hosts, consul.Addr))

	code, _, errOut := runToExit(t, "check", "-config", cfg)
	if want := `zone "." has no servers: ` + resolv + ": it is a FIFO"; code != 0 || !strings.Contains(errOut, want) {
		t.Errorf("towerd check with resolv.conf a FIFO: exit %d, want 0 and %q:\n%s", code, want, errOut)
	}
	tokenFIFO := writeConfig(t, fmt.Sprintf("[consul]\ntoken_file = %q\n", fifo))
	for _, args := range [][]string{{"check", "-config", fifo}, {"-config", fifo}, {"check", "-config", tokenFIFO}} {
		code, _, errOut := runToExit(t, args...)
		if code != 2 || !strings.Contains(errOut, fifo+": it is a FIFO, not a regular file") {
			t.Errorf("towerd %s: exit %d, want 2 and the FIFO named:\n%s", strings.Join(args, " "), code, errOut)
		}
	}

	d := startTowerd(t, "-config", cfg, "-listen", "127.0.0.1:0")
	if r := dig(t, d.UDP, "web.service.consul.", "A"); r.Status != "NOERROR" || !slices.Equal(addresses(r.Answer), []string{"192.0.2.8"}) {
		t.Errorf("consul. with resolv.conf a FIFO: %s %v\n%s", r.Status, addresses(r.Answer), r.Output)
	}
	if r := dig(t, d.UDP, "www.files.test.", "A"); r.Status != "SERVFAIL" {
		t.Errorf("zone . before its file is usable: %s, want SERVFAIL", r.Status)
	}
	for _, line := range []*regexp.Regexp{
		regexp.MustCompile(`zone \\"\.\\" has no servers until its resolv.conf names some.*why="it is a FIFO, not a regular file" file=` + regexp.QuoteMeta(resolv)),
		regexp.MustCompile(`hosts file not read; its last good entries stay" file=` + regexp.QuoteMeta(hosts) + ` err=".*it is a FIFO`),
	} {
		if _, err := d.stderr.waitFor(line, readyTimeout, d.exited); err != nil {
			t.Error(err)
		}
	}

	renameOver(t, resolv, "nameserver "+hostOf(t, up.Addr)+"\n")
	if _, err := d.stderr.waitFor(followedLine, resolvFollowTimeout, d.exited); err != nil {
		t.Fatalf("the file's servers were not taken within %v: %v", resolvFollowTimeout, err)
	}
	if r := dig(t, d.UDP, "www.files.test.", "A"); r.Status != "NOERROR" || !slices.Equal(addresses(r.Answer), []string{"192.0.2.7"}) {
		t.Errorf("after the FIFO was replaced: %s %v\n%s", r.Status, addresses(r.Answer), r.Output)
	}
	renameOver(t, hosts, "192.0.2.77 host.files.test\n")
	waitFor(t, "the hosts file's names once it is a file", func() bool {
		r := dig(t, d.UDP, "host.files.test.", "A")
		return r.Status == "NOERROR" && slices.Equal(addresses(r.Answer), []string{"192.0.2.77"})
	})
}
