package test

import (
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
)

// exitTimeout bounds a run of towerd that must end by itself (check, or a
// start-up that must fail).
const exitTimeout = 10 * time.Second

// runToExit runs towerd with args and returns its exit code, stdout and
// stderr. A towerd that keeps running is stopped by PID and fails the test.
func runToExit(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	p := startProcess(t, exec.Command(towerdBin, args...))
	code := p.waitExit(t, exitTimeout)
	return code, p.stdout.String(), p.stderr.String()
}

// zonesFor is the config text that points "." and "consul." at the two test
// upstreams, so no config a test writes reaches the system's resolvers.
func zonesFor(def, consul *testUpstream) string {
	return fmt.Sprintf(`
[[zone]]
name = "."
servers = [%q]

[[zone]]
name = "consul."
servers = [%q]
`, def.Addr, consul.Addr)
}

// TestConfigErrors: a bad config file stops start-up (and `towerd check`)
// with exit status 2 and a message naming the file, the line and the key.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	def, consul := newTestUpstream(t), newTestUpstream(t)
	tests := []struct {
		name    string
		body    string // the bad line is the one starting with badLine
		badLine string
		key     string
		msg     string
	}{
		{"unknown key", "# towerd\n[cache]\nsize = 100\nbogus = 1\n", "bogus", "cache.bogus", "unknown key"},
		{"unknown top-level key", "# towerd\nlisten_addrs = [\"127.0.0.1:53\"]\n", "listen_addrs", "listen_addrs", "unknown key"},
		{"bad duration", "# towerd\n\nquery_timeout = \"fast\"\n", "query_timeout", "query_timeout", "not a duration"},
		{"bad network", "# towerd\nallow = [\"10.0.0.0/33\"]\n", "allow", "allow[0]", "CIDR"},
		{"zero attempts", "# towerd\n[upstream]\n\nmax_attempts = 0\n", "max_attempts", "upstream.max_attempts", "at least 1"},
	}
	for _, tc := range tests {
		body := tc.body + zonesFor(def, consul)
		line := slices.IndexFunc(strings.Split(body, "\n"), func(l string) bool { return strings.HasPrefix(l, tc.badLine) }) + 1
		for _, command := range []string{"serve", "check"} {
			t.Run(tc.name+"/"+command, func(t *testing.T) {
				t.Parallel()
				path := writeConfig(t, body)
				code, _, stderr := runToExit(t, command, "-config", path, "-listen", "127.0.0.1:0")
				if code != 2 {
					t.Errorf("exit status %d, want 2", code)
				}
				want := fmt.Sprintf("%s:%d: key %q: ", path, line, tc.key)
				if !strings.Contains(stderr, want) || !strings.Contains(stderr, tc.msg) {
					t.Errorf("stderr does not name the file, line and key (want %q and %q):\n%s", want, tc.msg, stderr)
				}
				if servingLine.MatchString(stderr) {
					t.Errorf("towerd started serving with a bad config")
				}
			})
		}
	}
}

// TestRefusesToForwardToItself: an upstream that is towerd's own listen
// address would loop every query; start-up must fail with a config error.
func TestRefusesToForwardToItself(t *testing.T) {
	t.Parallel()
	consul := newTestUpstream(t)
	self := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	code, _, stderr := runToExit(t, "-config", "", "-listen", self, "-upstream", self, "-consul-dns", consul.Addr)
	if code != 2 {
		t.Errorf("exit status %d, want 2", code)
	}
	if !strings.Contains(stderr, `zone "."`) || !strings.Contains(stderr, "loop") {
		t.Errorf("stderr does not name the zone and the loop:\n%s", stderr)
	}
}

// TestCheckCommand: `towerd check` accepts a good file, exits 0 and prints
// the zones it would forward.
func TestCheckCommand(t *testing.T) {
	t.Parallel()
	def, consul := newTestUpstream(t), newTestUpstream(t)
	path := writeConfig(t, `listen = ["127.0.0.1:0"]
allow = ["127.0.0.0/8", "10.0.0.0/8"]
query_timeout = "2s"

[cache]
size = 500
max_ttl = "1h"

[serve_stale]
answer_ttl = "30s"
`+zonesFor(def, consul))
	code, stdout, stderr := runToExit(t, "check", "-config", path)
	if code != 0 {
		t.Fatalf("exit status %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"config ok", def.Addr, consul.Addr} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
}

// TestMakeRun: `make run` builds towerd and serves in the foreground, as the
// README tells a newcomer; one dig query gets the test upstream's answer,
// and the control command make run prints works as printed, without root
// powers over anything but the socket it names.
func TestMakeRun(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	def, consul := newTestUpstream(t), newTestUpstream(t)
	def.Add(t, "make.example. 300 IN A 192.0.2.90")
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))

	// RUN_ADMIN on port 0: other test runs on this machine may hold 9253;
	// RUN_CONTROL of the test's own, for the same reason.
	control := controlPath(t)
	cmd := exec.Command("make", "-C", "..", "run", "RUN_LISTEN="+listen, "RUN_ADMIN=127.0.0.1:0", "RUN_CONTROL="+control,
		"ARGS=-upstream "+def.Addr+" -consul-dns "+consul.Addr+" -consul-http off")
	// make runs towerd as its child: both go in a process group of their
	// own, which the cleanup stops as one.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	p := startProcess(t, cmd)
	t.Cleanup(func() {
		pgid := p.cmd.Process.Pid
		if p.running() {
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
		}
		select {
		case <-p.exited:
		case <-time.After(stopTimeout):
			t.Errorf("make run (process group %d) still running after SIGTERM; killing it", pgid)
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-p.exited // WaitDelay bounds this once make is dead
		}
		if !regexp.MustCompile(`msg=stopped`).MatchString(p.stderr.String()) {
			t.Errorf("towerd did not log a clean stop after SIGTERM")
		}
		if t.Failed() {
			t.Logf("make run stdout:\n%s\nstderr:\n%s", p.stdout, lastLines(p.stderr.String(), 100))
		}
	})

	// The first run builds with -trimpath, which recompiles everything.
	m, err := p.stderr.waitFor(servingLine, 3*time.Minute, p.exited)
	if err != nil {
		t.Fatalf("make run did not serve: %v", err)
	}
	if !strings.Contains(m[1], "udp/"+listen) {
		t.Errorf("serving %s, want udp/%s", m[1], listen)
	}
	r := dig(t, listen, "make.example.", "A")
	if r.Status != "NOERROR" || !slices.Equal(addresses(r.Answer), []string{"192.0.2.90"}) {
		t.Errorf("status %s, answer %v; want NOERROR 192.0.2.90\n%s", r.Status, r.Answer, r.Output)
	}
	if got := def.Count("make.example.", dns.TypeA); got != 1 {
		t.Errorf("test upstream saw %d queries, want 1", got)
	}

	// The printed control hint, run as printed (from the repository's
	// root, where make runs it) with the name swapped: the answer is the
	// cached one.
	// make echoes it to stdout before it starts towerd, but stdout and
	// stderr are two pipes read by two goroutines: the serving line seen
	// on one says nothing of the other.
	hint, err := p.stdout.waitFor(regexp.MustCompile(`^control:   (\./bin/towerd lookup) example\.org (-control \S+)   \(`), readyTimeout, p.exited)
	if err != nil || hint[2] != "-control "+control {
		t.Fatalf("make run printed no control hint naming %s:\n%s", control, p.stdout)
	}
	args := append(strings.Fields(hint[1]), "make.example.")
	args = append(args, strings.Fields(hint[2])...)
	lookup := exec.Command(args[0], args[1:]...)
	lookup.Dir = ".."
	out, err := lookup.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "NOERROR from the cache (fresh)") {
		t.Errorf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// freePort returns a port free on 127.0.0.1 for both UDP and TCP at the
// time of the call, for programs that cannot be told to use port 0.
func freePort(t *testing.T) int {
	t.Helper()
	pc, l := dnstest.ListenPair(t)
	port := pc.LocalAddr().(*net.UDPAddr).Port
	pc.Close()
	l.Close()
	return port
}

// TestShutdownDrains sends SIGTERM while a query waits at the upstream. The
// client must get an answer (drained) or SERVFAIL, never silence, and
// towerd must exit 0.
func TestShutdownDrains(t *testing.T) {
	t.Parallel()
	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			t.Parallel()
			s := startStack(t)
			const name = "slow.example."
			s.def.Add(t, name+" 300 IN A 192.0.2.60")
			arrived, release := s.def.Hold(name)
			t.Cleanup(release)

			type result struct {
				reply *dns.Msg
				err   error
			}
			answered := make(chan result, 1)
			go func() {
				reply, err := exchange(s.d.UDP, network, query(name, dns.TypeA, true))
				answered <- result{reply, err}
			}()
			select {
			case <-arrived:
			case <-time.After(5 * time.Second):
				t.Fatal("the query did not reach the upstream")
			}
			s.d.signal(t, syscall.SIGTERM)
			if _, err := s.d.stderr.waitFor(regexp.MustCompile(`msg="shutting down"`), 5*time.Second, s.d.exited); err != nil {
				t.Fatalf("towerd did not start shutting down: %v", err)
			}
			release()

			r := <-answered // the client gives up after 5 s
			code := s.d.waitExit(t, stopTimeout)
			switch {
			case r.err != nil:
				t.Errorf("client got no answer: %v", r.err)
			case r.reply.Rcode == dns.RcodeSuccess && slices.Equal(addresses(r.reply.Answer), []string{"192.0.2.60"}):
				t.Logf("client got its answer: the query was drained")
			case r.reply.Rcode == dns.RcodeServerFailure:
				t.Logf("client got SERVFAIL")
			default:
				t.Errorf("client got rcode %s, answer %v; want NOERROR 192.0.2.60 or SERVFAIL",
					dns.RcodeToString[r.reply.Rcode], r.reply.Answer)
			}
			if code != 0 {
				t.Errorf("exit status %d after SIGTERM, want 0", code)
			}
		})
	}
}
