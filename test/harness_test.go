// Package test holds towerd's end-to-end tests: they build the real binary,
// start it the way a user does, and talk to it with dig and with raw sockets
// while in-process DNS servers on 127.0.0.1:0 play its upstreams. No test
// ever sends a packet anywhere but to a loopback server it started itself.
package test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// towerdBin is the binary TestMain builds once for every test.
var towerdBin string

// Bounds on waiting for a process; none of them is a sleep, each is the
// longest a test waits before it fails instead of hanging.
const (
	readyTimeout = 30 * time.Second // start-up to the "serving" log line
	stopTimeout  = 15 * time.Second // SIGTERM to exit: query_timeout+1 s of drain, plus slack
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if addr := os.Getenv(checkerEnv); addr != "" {
		return runCachedChecker(addr) // TestFlood's checker process
	}
	if spec := os.Getenv(proxyEnv); spec != "" {
		return runProxyProc(spec) // a fault proxy in a namespace of its own
	}
	if _, err := exec.LookPath("dig"); err != nil {
		fmt.Fprintln(os.Stderr, "end-to-end tests need dig (Debian bind9-dnsutils): run test/install-deps.sh")
		return 1
	}
	dir, err := os.MkdirTemp("", "towerd-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	towerdBin = filepath.Join(dir, "towerd")
	args := []string{"build", "-o", towerdBin}
	if raceEnabled {
		// The daemon gets the race detector too when the tests run with it:
		// it then reports its own data races on stderr and exits 66, which
		// the clean-shutdown check of every test catches.
		args = append(args, "-race")
	}
	args = append(args, "../cmd/towerd")
	build := exec.Command("go", args...)
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building towerd (go %s): %v\n%s", strings.Join(args, " "), err, out)
		return 1
	}
	return m.Run()
}

// logLines collects a process's output line by line and lets a test wait
// for a line, so readiness is read from the log instead of guessed.
type logLines struct {
	mu      sync.Mutex
	lines   []string
	partial []byte
	changed chan struct{} // closed and replaced whenever a line arrives
}

func newLogLines() *logLines { return &logLines{changed: make(chan struct{})} }

// Write implements io.Writer for exec.Cmd's Stdout and Stderr.
func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	added := false
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.lines = append(l.lines, string(l.partial[:i]))
		l.partial = l.partial[i+1:]
		added = true
	}
	if added {
		close(l.changed)
		l.changed = make(chan struct{})
	}
	return len(p), nil
}

// String returns everything written so far.
func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := strings.Join(l.lines, "\n")
	if len(l.partial) > 0 {
		s += "\n" + string(l.partial)
	}
	return s
}

// waitFor returns the submatches of the first line matching re. It gives up
// after timeout, or once exited is closed and every line has been seen.
func (l *logLines) waitFor(re *regexp.Regexp, timeout time.Duration, exited <-chan struct{}) ([]string, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	processGone := false
	for next := 0; ; {
		l.mu.Lock()
		lines, changed := l.lines[next:], l.changed
		l.mu.Unlock()
		for _, line := range lines {
			if m := re.FindStringSubmatch(line); m != nil {
				return m, nil
			}
		}
		next += len(lines)
		if processGone {
			return nil, fmt.Errorf("process exited without logging a line matching %q", re)
		}
		select {
		case <-changed:
		case <-exited:
			// exec.Cmd.Wait copies all output before exited closes, so one
			// more pass sees every line the process wrote.
			processGone = true
		case <-deadline.C:
			return nil, fmt.Errorf("no line matching %q within %v", re, timeout)
		}
	}
}

// process is a child the test started and stops by its PID.
type process struct {
	cmd    *exec.Cmd
	stdout *logLines
	stderr *logLines
	exited chan struct{} // closed once Wait returned and all output is in
}

// startProcess starts cmd with its output captured. Callers stop it their
// own way (SIGTERM, a process group); whatever still runs when the test's
// cleanups reach this one is killed by PID.
func startProcess(t *testing.T, cmd *exec.Cmd) *process {
	t.Helper()
	p := &process{cmd: cmd, stdout: newLogLines(), stderr: newLogLines(), exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	if cmd.WaitDelay == 0 {
		// A grandchild holding the output pipes must not keep Wait, and so
		// the test, waiting forever.
		cmd.WaitDelay = 5 * time.Second
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", cmd.Path, err)
	}
	go func() {
		_ = cmd.Wait() // the exit status is read from ProcessState
		close(p.exited)
	}()
	t.Cleanup(func() {
		if p.running() {
			t.Errorf("pid %d (%s) still running at the end of the test; killing it", cmd.Process.Pid, cmd.Path)
			_ = cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// signal sends sig to the process by its PID.
func (p *process) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Errorf("sending %v to pid %d: %v", sig, p.cmd.Process.Pid, err)
	}
}

// waitExit waits for the process to end and returns its exit code (-1 when
// a signal killed it). After timeout it kills the process and fails.
func (p *process) waitExit(t *testing.T, timeout time.Duration) int {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.exited:
	case <-timer.C:
		t.Errorf("pid %d still running %v after it was told to stop; killing it", p.cmd.Process.Pid, timeout)
		_ = p.cmd.Process.Kill()
		<-p.exited // Kill cannot be ignored; Wait returns promptly
	}
	return p.cmd.ProcessState.ExitCode()
}

func (p *process) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// towerd is a running daemon under test.
type towerd struct {
	*process
	// UDP and TCP are the addresses from its "serving" log line.
	UDP, TCP string
	// Admin is the admin HTTP server's ip:port, "" when it is off.
	Admin string
	// Control is the control socket's path, "" when it is off.
	Control string
	// crashed is set by kill: no clean exit status is expected then.
	crashed bool
}

// kill ends the daemon with SIGKILL by its PID, as a crash or the OOM killer
// would: no drain, no save on stop.
func (d *towerd) kill(t *testing.T) {
	t.Helper()
	d.crashed = true
	d.signal(t, syscall.SIGKILL)
	if code := d.waitExit(t, stopTimeout); code != -1 {
		t.Errorf("towerd exited with status %d after SIGKILL, want -1 (killed by the signal)", code)
	}
}

var (
	servingLine = regexp.MustCompile(`level=INFO msg=serving addrs=("[^"]*"|\S+)`)
	adminLine   = regexp.MustCompile(`msg="admin server listening" addr=(\S+)`)
	controlLine = regexp.MustCompile(`msg="control socket listening" socket=(\S+)`)
)

// startTowerd runs the built binary with args (plus -log-level debug, an
// admin server on a free port and a control socket of its own, which args
// may override) and waits for its "serving" log line. It is stopped with SIGTERM by PID when the test ends,
// and must then exit 0 without a data race report.
func startTowerd(t *testing.T, args ...string) *towerd {
	t.Helper()
	return startTowerdVia(t, nil, args...)
}

// startTowerdVia is startTowerd with the binary started through wrapper, a
// command that execs its last argument (e.g. prlimit), so the PID is
// towerd's own.
func startTowerdVia(t *testing.T, wrapper []string, args ...string) *towerd {
	t.Helper()
	mustNotUseSystemResolvers(t, args)
	// The admin server's default port is fixed; parallel daemons each take
	// a free one instead. The Consul watch is off unless a test names the
	// agent it started (-consul-http): no test talks to an agent it does
	// not own. The cache is not saved unless a test names its own
	// -state-dir: parallel daemons must not load each other's answers.
	argv := append(append(append([]string(nil), wrapper...), towerdBin), append([]string{"-log-level", "debug", "-admin", "127.0.0.1:0",
		"-control", controlPath(t), "-consul-http", "off", "-state-dir", ""}, args...)...)
	cmd := exec.Command(argv[0], argv[1:]...)
	p := startProcess(t, cmd)
	d := &towerd{process: p}
	t.Cleanup(func() { d.stopAndCheck(t) })

	m, err := p.stderr.waitFor(servingLine, readyTimeout, p.exited)
	if err != nil {
		t.Fatalf("towerd %s did not become ready: %v\nstderr:\n%s", strings.Join(args, " "), err, p.stderr)
	}
	for _, a := range strings.Fields(strings.Trim(m[1], `"`)) {
		switch {
		case strings.HasPrefix(a, "udp/") && d.UDP == "":
			d.UDP = strings.TrimPrefix(a, "udp/")
		case strings.HasPrefix(a, "tcp/") && d.TCP == "":
			d.TCP = strings.TrimPrefix(a, "tcp/")
		}
	}
	if d.UDP == "" || d.TCP == "" {
		t.Fatalf("serving line without udp and tcp addresses: %q", m[0])
	}
	// The admin server starts before the DNS listeners serve, so its line,
	// if any, is in by now.
	if m := adminLine.FindStringSubmatch(p.stderr.String()); m != nil {
		d.Admin = m[1]
	}
	if m := controlLine.FindStringSubmatch(p.stderr.String()); m != nil {
		d.Control = m[1]
	}
	return d
}

// controlPath is a control socket path of the test's own, in a directory
// any user may enter (the tests that run the CLI as nobody need to reach
// the socket to be refused by it) and short enough for sun_path (108
// bytes, which t.TempDir's names can pass).
func controlPath(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "towerd-ctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "control.sock")
}

// stopAndCheck is the cleanup of every daemon: SIGTERM, exit 0 (unless the
// test killed it), no race.
func (d *towerd) stopAndCheck(t *testing.T) {
	if d.running() {
		d.signal(t, syscall.SIGTERM)
	}
	if code := d.waitExit(t, stopTimeout); code != 0 && !d.crashed {
		t.Errorf("towerd exited with status %d after SIGTERM, want 0", code)
	}
	logs := d.stderr.String()
	if strings.Contains(logs, "WARNING: DATA RACE") {
		t.Errorf("towerd reported a data race")
	}
	if t.Failed() {
		t.Logf("towerd stderr:\n%s", lastLines(logs, 300))
	}
}

// mustNotUseSystemResolvers keeps every test off the machine's resolvers:
// with built-in defaults towerd forwards "." to resolv.conf and "consul." to
// 127.0.0.1:8600, neither of which a test owns.
func mustNotUseSystemResolvers(t *testing.T, args []string) {
	t.Helper()
	flags := map[string]string{}
	for i := 0; i < len(args); i++ {
		if name, ok := strings.CutPrefix(args[i], "-"); ok && i+1 < len(args) {
			flags[strings.TrimPrefix(name, "-")] = args[i+1]
			i++
		}
	}
	file := flags["config"]
	var body []byte
	if file != "" {
		var err error
		if body, err = os.ReadFile(file); err != nil {
			t.Fatalf("reading %s: %v", file, err)
		}
	}
	configures := func(flag, zone string) bool {
		return flags[flag] != "" || regexp.MustCompile(`(?m)^\s*name\s*=\s*"`+regexp.QuoteMeta(zone)+`"`).Match(body)
	}
	// A resolv_conf under the temp dir is a file the test wrote: zone "."
	// then follows servers the test owns.
	followsTestFile := false
	if m := regexp.MustCompile(`(?m)^\s*resolv_conf\s*=\s*"([^"]+)"`).FindSubmatch(body); m != nil {
		followsTestFile = strings.HasPrefix(string(m[1]), os.TempDir()+"/")
	}
	if !(configures("upstream", ".") || followsTestFile) || !configures("consul-dns", "consul.") {
		t.Fatalf("towerd %v would forward to servers this test does not own: set -upstream and -consul-dns (or zones \".\" and \"consul.\", or resolv_conf at a file of the test)", args)
	}
}

// writeConfig writes a towerd config file into the test's temp dir.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "towerd.toml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// stack is the usual set-up: a default upstream, a Consul upstream, and a
// towerd with built-in defaults forwarding to them.
type stack struct {
	def, consul *testUpstream
	d           *towerd
}

func startStack(t *testing.T, extraArgs ...string) stack {
	t.Helper()
	def, consul := newTestUpstream(t), newTestUpstream(t)
	args := append([]string{"-config", "", "-listen", "127.0.0.1:0",
		"-upstream", def.Addr, "-consul-dns", consul.Addr}, extraArgs...)
	return stack{def: def, consul: consul, d: startTowerd(t, args...)}
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
