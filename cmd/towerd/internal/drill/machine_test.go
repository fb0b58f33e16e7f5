package drill

import (
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fakeProc is a /proc of fixtures: PSI, two threads' schedstat, loadavg.
type fakeProc struct {
	dir   string
	files procFiles
}

func newFakeProc(t *testing.T) *fakeProc {
	t.Helper()
	dir := t.TempDir()
	p := &fakeProc{dir: dir, files: procFiles{
		pressure: filepath.Join(dir, "pressure-cpu"),
		tasks:    filepath.Join(dir, "task"),
		loadavg:  filepath.Join(dir, "loadavg"),
	}}
	return p
}

func (p *fakeProc) write(t *testing.T, name, content string) {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// set writes the counters: PSI some total (µs) and each thread's
// nanoseconds ran and waited.
func (p *fakeProc) set(t *testing.T, psiMicros string, threads map[string][2]string) {
	t.Helper()
	p.write(t, "pressure-cpu", "some avg10=12.00 avg60=8.00 avg300=1.00 total="+psiMicros+"\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
	for tid, st := range threads {
		p.write(t, filepath.Join("task", tid, "schedstat"), st[0]+" "+st[1]+" 42\n")
	}
	p.write(t, "loadavg", "8.63 6.39 3.98 3/153 5337\n")
}

// A window's figures are the counters' differences over its wall time;
// a thread born in the window counts whole, one gone is left out.
func TestWindowFromCounters(t *testing.T) {
	p := newFakeProc(t)
	p.set(t, "1000000", map[string][2]string{"10": {"100000000", "50000000"}, "11": {"0", "0"}})
	a := p.files.sample()
	p.set(t, "1500000", map[string][2]string{"10": {"200000000", "350000000"}, "12": {"100000000", "100000000"}})
	os.RemoveAll(filepath.Join(p.dir, "task", "11"))
	b := p.files.sample()
	a.at, b.at = time.Unix(100, 0), time.Unix(101, 0) // one second apart
	w := p.files.window("1 x", a, b)
	// PSI: 0.5 s of 1 s. Threads: ran 0.1 + 0.1 s, waited 0.3 + 0.1 s.
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-9 }
	if !near(w.pressure, 0.5) || !near(w.waitShare, 0.4/0.6) || !near(w.used, 0.2) || w.load1 != 8.63 || w.cpus != runtime.NumCPU() {
		t.Errorf("window %+v", w)
	}
	if s := w.String(); !strings.Contains(s, "CPU pressure 50%") || !strings.Contains(s, "waited for a CPU 67% of its runnable time and used 0.20 CPUs") ||
		!strings.Contains(s, "load 8.6 on ") {
		t.Errorf("String() = %q", s)
	}
}

// Without PSI and schedstat (another kernel, a container's /proc) the
// figures are unknown, never zero: unknown is not "quiet".
func TestWindowWithoutCounters(t *testing.T) {
	p := newFakeProc(t)
	a, b := p.files.sample(), p.files.sample()
	b.at = a.at.Add(time.Second)
	w := p.files.window("1 x", a, b)
	if w.pressure != -1 || w.waitShare != -1 || w.used != -1 || w.load1 != -1 || w.busy() {
		t.Errorf("window without counters %+v (busy %v)", w, w.busy())
	}
	if !strings.Contains(w.String(), "no CPU figures") {
		t.Errorf("String() = %q", w.String())
	}
}

// Bad counter files are not figures.
func TestReadCountersRejectsJunk(t *testing.T) {
	p := newFakeProc(t)
	for _, junk := range []string{"", "some avg10=1\n", "some total=-5\n", "some total=x\n", "full total=5\n"} {
		p.write(t, "pressure-cpu", junk)
		if _, ok := readPSISome(p.files.pressure); ok {
			t.Errorf("PSI %q read as a figure", junk)
		}
	}
	for _, junk := range []string{"", "12", "a b c", "-1 5 3"} {
		p.write(t, "schedstat", junk)
		if _, ok := readSchedstat(filepath.Join(p.dir, "schedstat")); ok {
			t.Errorf("schedstat %q read as a figure", junk)
		}
	}
	// An endless file is read up to the bound, not to its end.
	if _, ok := readPSISome("/dev/zero"); ok {
		t.Error("/dev/zero read as PSI")
	}
}

// The live counters of this machine, where the kernel keeps them, give
// figures in range.
func TestLiveWindow(t *testing.T) {
	a := liveProc.sample()
	deadline := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(deadline) { // some CPU time of our own
	}
	w := liveProc.window("1 x", a, liveProc.sample())
	if w.pressure > 1 || w.waitShare > 1 || (w.waitShare >= 0 && w.used <= 0) {
		t.Errorf("live window out of range: %+v", w)
	}
	t.Logf("live: %v", w)
}

// busy: contention by others, by either figure; never the drill's own.
func TestBusy(t *testing.T) {
	for _, tt := range []struct {
		name string
		w    cpuWindow
		busy bool
	}{
		{"idle", cpuWindow{pressure: 0.02, waitShare: 0.01, used: 0.1, cpus: 2}, false},
		{"pressure", cpuWindow{pressure: 0.6, waitShare: 0.05, used: 0.1, cpus: 2}, true},
		{"drill waits", cpuWindow{pressure: -1, waitShare: 0.9, used: 0.1, cpus: 2}, true},
		{"the drill's own doing", cpuWindow{pressure: 0.9, waitShare: 0.9, used: 1.5, cpus: 2}, false},
		{"unknown", cpuWindow{pressure: -1, waitShare: -1, used: -1, cpus: 2}, false},
	} {
		if got := tt.w.busy(); got != tt.busy {
			t.Errorf("%s: busy() = %v, want %v", tt.name, got, tt.busy)
		}
	}
}
