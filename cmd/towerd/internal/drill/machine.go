package drill

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// The drill judges latency on the machine it runs on, which may be a
// production node at peak (issue 25: its p99 target failed on busy nodes
// for the machine's contention, not towerd's). So it measures, for each
// phase, how much the CPU was contended, from counters the kernel keeps
// anyway:
//
//   - PSI (/proc/pressure/cpu, Linux 4.20+): the share of the time during
//     which some runnable task of the machine waited for a CPU;
//   - schedstat (/proc/self/task/*/schedstat): how long this process's
//     threads (the clients, the stand-ins and the towerd under test) ran
//     and how long they waited on a run queue while runnable.
//
// A timing target missed while either says the machine was busy is
// INCONCLUSIVE, not FAIL (report.go's judge).
const (
	// busyShare is the share of a phase (PSI) or of the drill's runnable
	// time (schedstat) spent waiting for a CPU from which the machine
	// counts as busy: far above an idle node's, far below what a CPU hog
	// beside the drill gives (docs/operating.md).
	busyShare = 0.20
	// ownShare is the share of the machine's CPUs the drill itself may use
	// before the contention counts as its own doing (the towerd under
	// test burning CPU, or a load the node cannot generate): then a miss
	// stays a FAIL. A default drill uses a small part of one CPU.
	ownShare = 0.5
)

// procFiles are where the counters are read; tests point them at fixtures.
type procFiles struct {
	pressure string // PSI of the CPU
	tasks    string // the directory of this process's threads
	loadavg  string
}

var liveProc = procFiles{pressure: "/proc/pressure/cpu", tasks: "/proc/self/task", loadavg: "/proc/loadavg"}

// cpuSample is the counters at one instant; two make a cpuWindow, so a
// phase's figures are its own whatever ran before the drill.
type cpuSample struct {
	at         time.Time
	pressure   time.Duration // PSI "some" total
	pressureOK bool
	threads    map[string]schedstat // by thread id
}

// schedstat is one thread's line of /proc/<pid>/task/<tid>/schedstat.
type schedstat struct {
	ran, waited time.Duration
}

func (p procFiles) sample() cpuSample {
	s := cpuSample{at: time.Now(), threads: map[string]schedstat{}}
	s.pressure, s.pressureOK = readPSISome(p.pressure)
	tasks, _ := os.ReadDir(p.tasks)
	for _, t := range tasks {
		if st, ok := readSchedstat(filepath.Join(p.tasks, t.Name(), "schedstat")); ok {
			s.threads[t.Name()] = st
		}
	}
	return s
}

// maxProcFile bounds a read of these small kernel files.
const maxProcFile = 4096

func readSmall(path string) ([]byte, bool) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	buf := make([]byte, maxProcFile)
	n, _ := f.Read(buf)
	return buf[:n], n > 0
}

// readPSISome reads the "some ... total=" counter, in microseconds, of a
// PSI file (the kernel's Documentation/accounting/psi.rst).
func readPSISome(path string) (time.Duration, bool) {
	data, ok := readSmall(path)
	if !ok {
		return 0, false
	}
	for line := range strings.Lines(string(data)) {
		rest, ok := strings.CutPrefix(line, "some ")
		if !ok {
			continue
		}
		for _, f := range strings.Fields(rest) {
			if v, ok := strings.CutPrefix(f, "total="); ok {
				us, err := strconv.ParseInt(v, 10, 64)
				return time.Duration(us) * time.Microsecond, err == nil && us >= 0
			}
		}
	}
	return 0, false
}

// readSchedstat reads a thread's nanoseconds on a CPU and waiting on a run
// queue (Documentation/scheduler/sched-stats.rst).
func readSchedstat(path string) (schedstat, bool) {
	data, ok := readSmall(path)
	if !ok {
		return schedstat{}, false
	}
	f := strings.Fields(string(data))
	if len(f) < 2 {
		return schedstat{}, false
	}
	ran, err1 := strconv.ParseInt(f[0], 10, 64)
	waited, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil || ran < 0 || waited < 0 {
		return schedstat{}, false
	}
	return schedstat{ran: time.Duration(ran), waited: time.Duration(waited)}, true
}

// readLoad1 reads the one-minute load average.
func readLoad1(path string) (float64, bool) {
	data, ok := readSmall(path)
	if !ok {
		return 0, false
	}
	first, _, _ := bytes.Cut(data, []byte(" "))
	v, err := strconv.ParseFloat(string(first), 64)
	return v, err == nil
}

// cpuWindow is how contended the CPU was during one phase. A figure the
// kernel does not keep is -1.
type cpuWindow struct {
	phase string
	wall  time.Duration
	// pressure is PSI's share of the window with some task waiting.
	pressure float64
	// waitShare is the share of the drill's runnable time spent waiting
	// for a CPU; used how many CPUs the drill itself kept busy.
	waitShare, used float64
	load1           float64
	cpus            int // the CPUs this process may run on
}

func (p procFiles) window(phase string, a, b cpuSample) cpuWindow {
	w := cpuWindow{phase: phase, wall: b.at.Sub(a.at), pressure: -1, waitShare: -1, used: -1, load1: -1,
		cpus: runtime.NumCPU()}
	if l, ok := readLoad1(p.loadavg); ok {
		w.load1 = l
	}
	if w.wall <= 0 {
		return w
	}
	if a.pressureOK && b.pressureOK && b.pressure >= a.pressure {
		w.pressure = min(1, float64(b.pressure-a.pressure)/float64(w.wall))
	}
	var ran, waited time.Duration
	for tid, end := range b.threads {
		start := a.threads[tid] // a thread born in the window counts whole
		ran += end.ran - start.ran
		waited += end.waited - start.waited
	}
	if ran+waited > 0 {
		w.waitShare = float64(waited) / float64(ran+waited)
		w.used = ran.Seconds() / w.wall.Seconds()
	}
	return w
}

// ownDoing says the drill itself kept the CPUs busy: contention it caused
// excuses nothing.
func (w cpuWindow) ownDoing() bool {
	return w.used >= ownShare*float64(w.cpus)
}

// busy says the CPU was contended by others during the window.
func (w cpuWindow) busy() bool {
	return !w.ownDoing() && (w.pressure >= busyShare || w.waitShare >= busyShare)
}

// String gives the window's figures, for the report.
func (w cpuWindow) String() string {
	var parts []string
	if w.pressure >= 0 {
		parts = append(parts, fmt.Sprintf("CPU pressure %.0f%%", 100*w.pressure))
	}
	if w.waitShare >= 0 {
		parts = append(parts, fmt.Sprintf("the drill waited for a CPU %.0f%% of its runnable time and used %.2f CPUs",
			100*w.waitShare, w.used))
	}
	if w.load1 >= 0 {
		cpus := fmt.Sprintf("%d CPUs", w.cpus)
		if w.cpus == 1 {
			cpus = "1 CPU"
		}
		parts = append(parts, fmt.Sprintf("load %.1f on %s", w.load1, cpus))
	}
	if len(parts) == 0 {
		return "no CPU figures (the kernel has neither PSI nor schedstat)"
	}
	return strings.Join(parts, "; ")
}
