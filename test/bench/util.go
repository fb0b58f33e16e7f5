package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// proc is one child the bench started; it is stopped by its PID.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

type procSet struct {
	mu    sync.Mutex
	procs []*proc
}

func newProcSet() *procSet { return &procSet{} }

// start runs name with args, its output into logFile.
func (ps *procSet) start(label, logFile, name string, args ...string) (*proc, error) {
	f, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", label, err)
	}
	p := &proc{name: label, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	ps.mu.Lock()
	ps.procs = append(ps.procs, p)
	ps.mu.Unlock()
	return p, nil
}

// adopt makes cmd, started by the caller (who reads its output), one of
// the set's processes, stopped by its PID like the others.
func (ps *procSet) adopt(label string, cmd *exec.Cmd) *proc {
	p := &proc{name: label, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	ps.mu.Lock()
	ps.procs = append(ps.procs, p)
	ps.mu.Unlock()
	return p
}

// stop sends SIGTERM to p's PID, and SIGKILL after 5 s.
func (ps *procSet) stop(p *proc) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

func (ps *procSet) stopAll() {
	ps.mu.Lock()
	procs := slices.Clone(ps.procs)
	ps.mu.Unlock()
	for _, p := range slices.Backward(procs) {
		ps.stop(p)
	}
}

func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		p := dir + "/" + name
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

// waitAnswer asks addr for name until it answers, at most timeout.
func waitAnswer(addr, name string, timeout time.Duration) error {
	c := &dns.Client{Timeout: 300 * time.Millisecond}
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	if name == controlName {
		m.SetQuestion(name, dns.TypeTXT)
	}
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		var r *dns.Msg
		if r, _, err = c.Exchange(m, addr); err == nil && r.Response {
			return nil
		}
		time.Sleep(100 * time.Millisecond) // polling a child that has no readiness signal
	}
	return err
}

// upstreamCounts asks the synthetic upstream at up for its counts, on its
// control port: queries its zone answered, and queries it was sent (what the
// fault proxy in front read, lost ones included; the same without faults).
func upstreamCounts(up string) (answered, sent uint64, err error) {
	host, _, _ := strings.Cut(up, ":")
	c := &dns.Client{Timeout: time.Second}
	m := new(dns.Msg)
	m.SetQuestion(controlName, dns.TypeTXT)
	for range 3 {
		var r *dns.Msg
		if r, _, err = c.Exchange(m, host+":"+controlPort); err != nil {
			continue
		}
		if len(r.Answer) != 1 || len(r.Answer[0].(*dns.TXT).Txt) != 2 {
			return 0, 0, fmt.Errorf("unexpected control answer from %s: %v", up, r)
		}
		txt := r.Answer[0].(*dns.TXT).Txt
		a, err1 := strconv.ParseUint(txt[0], 10, 64)
		s, err2 := strconv.ParseUint(txt[1], 10, 64)
		return a, s, errors.Join(err1, err2)
	}
	return 0, 0, fmt.Errorf("asking the upstream %s its counts: %w", up, err)
}

// upstreamQueries is how many queries the main synthetic upstream answered.
func upstreamQueries() (uint64, error) {
	n, _, err := upstreamCounts(upstreamAddr)
	return n, err
}

// writeNames writes a dnsperf query file of n A questions <prefix><i>.bench.example.
func writeNames(path, prefix string, n int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<16)
	for i := range n {
		fmt.Fprintf(w, "%s%d.bench.example A\n", prefix, i)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

type perfOut struct {
	sent, completed, lost int
	noerror               int     // completed with NOERROR
	nxdomain              int     // completed with NXDOMAIN
	qps                   float64 // NOERROR answers per second
	rawQPS                float64 // completed queries per second, any rcode
}

var (
	noerrorRe  = regexp.MustCompile(`Response codes:.*?NOERROR (\d+)`)
	nxdomainRe = regexp.MustCompile(`Response codes:.*?NXDOMAIN (\d+)`)
)

var perfRe = map[string]*regexp.Regexp{
	"sent":      regexp.MustCompile(`Queries sent:\s+(\d+)`),
	"completed": regexp.MustCompile(`Queries completed:\s+(\d+)`),
	"lost":      regexp.MustCompile(`Queries lost:\s+(\d+)`),
	"qps":       regexp.MustCompile(`Queries per second:\s+([\d.]+)`),
}

// dnsperf runs dnsperf against addr with the query file and extra flags,
// as one of b's processes, so Ctrl-C stops it by its PID too.
func (b *bench) dnsperf(addr, file string, args ...string) (perfOut, error) {
	host, port, _ := strings.Cut(addr, ":")
	all := append([]string{"-s", host, "-p", port, "-d", file}, args...)
	logf := filepath.Join(b.dir, "dnsperf.out")
	p, err := b.procs.start("dnsperf", logf, "dnsperf", all...)
	if err != nil {
		return perfOut{}, err
	}
	<-p.done
	out, err := os.ReadFile(logf)
	if err != nil {
		return perfOut{}, err
	}
	text := string(out)
	if !p.cmd.ProcessState.Success() {
		return perfOut{}, fmt.Errorf("dnsperf %s: %v\n%s", strings.Join(all, " "), p.cmd.ProcessState, text)
	}
	var r perfOut
	for k, re := range perfRe {
		m := re.FindStringSubmatch(text)
		if m == nil {
			return r, fmt.Errorf("dnsperf output lacks %q:\n%s", k, text)
		}
		switch k {
		case "sent":
			r.sent, _ = strconv.Atoi(m[1])
		case "completed":
			r.completed, _ = strconv.Atoi(m[1])
		case "lost":
			r.lost, _ = strconv.Atoi(m[1])
		case "qps":
			r.qps, _ = strconv.ParseFloat(m[1], 64)
		}
	}
	if m := noerrorRe.FindStringSubmatch(text); m != nil {
		r.noerror, _ = strconv.Atoi(m[1])
	}
	if m := nxdomainRe.FindStringSubmatch(text); m != nil {
		r.nxdomain, _ = strconv.Atoi(m[1])
	}
	r.rawQPS = r.qps
	// Only NOERROR counts as answered (a SERVFAIL is quick but no answer).
	if r.completed > 0 {
		r.qps *= float64(r.noerror) / float64(r.completed)
	}
	return r, nil
}

// load is one dnsperf run against a server and what it cost: the server's
// CPU time over the run and the upstream queries counted around it.
type load struct {
	perfOut
	cpuUs    float64 // the server process's CPU time over the run, µs (utime+stime, 10 ms ticks)
	schedUs  float64 // the same from its threads' schedstat, to the nanosecond (cpuReading.since)
	upstream uint64  // upstream queries counted between before and after
}

// usPer is the server's CPU per answer, n answers given.
func (l load) usPer(n int) float64 { return l.cpuUs / float64(max(n, 1)) }

// measure runs dnsperf against addr with file and args, reading pid's CPU
// time and upCount (the upstream's query counter) before and after: the one
// way every scenario prices a load.
func (b *bench) measure(pid int, upCount func() (uint64, error), addr, file string, args ...string) (load, error) {
	up0, err := upCount()
	if err != nil {
		return load{}, err
	}
	cpu0, err := readCPU(pid)
	if err != nil {
		return load{}, err
	}
	out, err := b.dnsperf(addr, file, args...)
	if err != nil {
		return load{}, err
	}
	cpu1, err := readCPU(pid)
	if err != nil {
		return load{}, err
	}
	up1, err := upCount()
	if err != nil {
		return load{}, err
	}
	return load{perfOut: out, cpuUs: float64(cpu1.ticks-cpu0.ticks) * 1e6 / float64(clockTicks),
		schedUs: cpu1.since(cpu0), upstream: up1 - up0}, nil
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux build in practice.
var clockTicks = func() int64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if v, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil && v > 0 {
			return v
		}
	}
	return 100
}()

// cpuTicks returns utime+stime of pid (every thread), in clock ticks.
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state is field 3, utime 14, stime 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("unreadable /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("bad /proc stat")
	}
	return ut + st, nil
}

// tail returns the last lines of a log file, for error messages.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], " | ")
}

// cpuNanos returns the CPU time of pid's threads, in nanoseconds: the sum
// of each one's /proc/<pid>/task/<tid>/schedstat, which the scheduler
// keeps to the nanosecond, where utime and stime are in ticks (10 ms): a
// load of a few hundred milliseconds of CPU, as scenario 12's, read in
// ticks was ± 3 % from the rounding alone. A thread that exits during the
// load takes its time with it (cpuReading.since falls back to the ticks,
// which keep it).
func cpuNanos(pid int) (int64, error) {
	dirs, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, d := range dirs {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, d.Name()))
		if err != nil {
			continue // exited meanwhile
		}
		f := strings.Fields(string(b))
		if len(f) < 1 {
			continue
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, errors.New("bad schedstat")
		}
		sum += v
	}
	return sum, nil
}

// cpuReading is a process's CPU time read both ways (cpuNanos, cpuTicks).
type cpuReading struct{ ns, ticks int64 }

func readCPU(pid int) (cpuReading, error) {
	ns, err := cpuNanos(pid)
	if err != nil {
		return cpuReading{}, err
	}
	t, err := cpuTicks(pid)
	return cpuReading{ns, t}, err
}

// since is the CPU time from r0 to r, in microseconds: the threads'
// nanoseconds, unless they are short of the ticks by more than a tick a
// thread could round away (a thread exited, its time lost to schedstat).
func (r cpuReading) since(r0 cpuReading) float64 {
	ns, tickNs := r.ns-r0.ns, 1_000_000_000/clockTicks
	if byTicks := (r.ticks - r0.ticks) * tickNs; ns < byTicks-16*tickNs {
		return float64(byTicks) / 1e3
	}
	return float64(ns) / 1e3
}

// rotated is s begun k further along.
func rotated[T any](s []T, k int) []T {
	k %= len(s)
	return append(slices.Clone(s[k:]), s[:k]...)
}
