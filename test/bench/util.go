package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
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

// upstreamQueries asks the synthetic upstream how many queries it answered.
func upstreamQueries() (uint64, error) {
	c := &dns.Client{Timeout: time.Second}
	m := new(dns.Msg)
	m.SetQuestion(controlName, dns.TypeTXT)
	var err error
	for range 5 { // the fault proxy may lose one
		var r *dns.Msg
		if r, _, err = c.Exchange(m, upstreamAddr); err == nil && len(r.Answer) == 1 {
			return strconv.ParseUint(r.Answer[0].(*dns.TXT).Txt[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("asking the upstream its count: %v", err)
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
	qps                   float64 // NOERROR answers per second
}

var noerrorRe = regexp.MustCompile(`Response codes:.*?NOERROR (\d+)`)

var perfRe = map[string]*regexp.Regexp{
	"sent":      regexp.MustCompile(`Queries sent:\s+(\d+)`),
	"completed": regexp.MustCompile(`Queries completed:\s+(\d+)`),
	"lost":      regexp.MustCompile(`Queries lost:\s+(\d+)`),
	"qps":       regexp.MustCompile(`Queries per second:\s+([\d.]+)`),
}

// dnsperf runs dnsperf against addr with the query file and extra flags.
func dnsperf(addr, file string, args ...string) (perfOut, error) {
	host, p, _ := strings.Cut(addr, ":")
	all := append([]string{"-s", host, "-p", p, "-d", file}, args...)
	cmd := exec.Command("dnsperf", all...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return perfOut{}, fmt.Errorf("dnsperf %s: %w\n%s", strings.Join(all, " "), err, out.String())
	}
	var r perfOut
	text := out.String()
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
	// Only NOERROR counts as answered (a SERVFAIL is quick but no answer).
	if r.completed > 0 {
		r.qps *= float64(r.noerror) / float64(r.completed)
	}
	return r, nil
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

// results holds each measure's values over the rounds.
type results struct{ v map[string][]float64 }

func newResults() *results { return &results{v: map[string][]float64{}} }

func (r *results) add(k string, v float64) { r.v[k] = append(r.v[k], v) }

// median of the rounds (the mean of the middle two for an even count).
func (r *results) median(k string) (float64, bool) {
	v := slices.Clone(r.v[k])
	if len(v) == 0 {
		return 0, false
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2], true
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2, true
}

// table prints the medians and towerd's ratios to the peers.
func (b *bench) table(w io.Writer) {
	all := append([]string{"null"}, b.servers...)
	fmt.Fprintf(w, "\nmedians of %d round(s)\n\n", b.rounds)
	fmt.Fprint(w, "| server |")
	for _, rate := range b.rates {
		fmt.Fprintf(w, " hit CPU µs/q @%dk | answered/s @%dk |", rate/1000, rate/1000)
	}
	fmt.Fprint(w, " miss answered/s | miss lost | upstream q per miss name |\n|---|")
	for range b.rates {
		fmt.Fprint(w, "---:|---:|")
	}
	fmt.Fprint(w, "---:|---:|---:|\n")
	cell := func(s, k, format string) string {
		v, ok := b.res[s].median(k)
		if !ok {
			return "–"
		}
		return fmt.Sprintf(format, v)
	}
	for _, s := range all {
		fmt.Fprintf(w, "| %s |", s)
		for _, rate := range b.rates {
			fmt.Fprintf(w, " %s | %s |", cell(s, fmt.Sprintf("hit%d.us", rate), "%.2f"), cell(s, fmt.Sprintf("hit%d.qps", rate), "%.0f"))
		}
		fmt.Fprintf(w, " %s | %s | %s |\n", cell(s, "miss.qps", "%.0f"), cell(s, "miss.lost", "%.2f %%"), cell(s, "miss.up", "%.3f"))
	}
	t, ok := b.res["towerd"]
	if !ok {
		return
	}
	fmt.Fprintln(w)
	ratio := func(k, peer string) string {
		a, ok1 := t.median(k)
		p, ok2 := b.res[peer]
		if !ok1 || !ok2 {
			return "–"
		}
		v, ok := p.median(k)
		if !ok || v == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f×", a/v)
	}
	for _, rate := range b.rates {
		k := fmt.Sprintf("hit%d.us", rate)
		fmt.Fprintf(w, "towerd hit CPU per query @%dk: %s unbound's, %s dnsmasq's, %s the null responder's\n",
			rate/1000, ratio(k, "unbound"), ratio(k, "dnsmasq"), ratio(k, "null"))
	}
	fmt.Fprintf(w, "towerd miss throughput: %s unbound's, %s dnsmasq's\n", ratio("miss.qps", "unbound"), ratio("miss.qps", "dnsmasq"))
}

// tail returns the last lines of a log file, for error messages.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], " | ")
}
