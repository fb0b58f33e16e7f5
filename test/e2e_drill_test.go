package test

import (
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// drillRow matches one row of towerd drill's table: label, queries,
// success %, p50, p99, max, timeouts, servfail, other, stale.
var drillRow = regexp.MustCompile(`(?m)^(direct|through towerd)\s+(\d+)\s+([\d.]+)%\s+(\S+)\s+(\S+)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)$`)

type drillFigures struct {
	queries  int
	success  float64
	p99      time.Duration
	timeouts int
}

// TestDrillDefaults (issue 7, test 1): `towerd drill` with its default
// faults (100 ms ± 50 ms, 0.5 % loss each way) and a 10 s run per path
// exits 0, towerd's success rate reaches 99.9 %, and the direct figures it
// prints beside it are worse. The "under 5 ms" p99 for cached names is
// printed for operators; the test asserts only a ratio against the direct
// path (wall-clock limits do not belong in a CI run on a shared machine).
func TestDrillDefaults(t *testing.T) {
	t.Parallel()
	p := startProcess(t, exec.Command(towerdBin, "drill", "-duration", "10s", "-seed", "20240611"))
	code := p.waitExit(t, 90*time.Second)
	out := p.stdout.String()
	t.Logf("towerd drill output:\n%s", out)
	if code != 0 {
		t.Fatalf("towerd drill exited %d, want 0\nstderr:\n%s", code, p.stderr)
	}
	rows := map[string]drillFigures{}
	for _, m := range drillRow.FindAllStringSubmatch(out, -1) {
		var f drillFigures
		var err error
		f.queries, _ = strconv.Atoi(m[2])
		f.success, _ = strconv.ParseFloat(m[3], 64)
		f.timeouts, _ = strconv.Atoi(m[7])
		if f.p99, err = time.ParseDuration(m[5]); err != nil {
			t.Fatalf("p99 %q of %s: %v", m[5], m[1], err)
		}
		rows[m[1]] = f
	}
	direct, through := rows["direct"], rows["through towerd"]
	if direct.queries == 0 || through.queries == 0 {
		t.Fatalf("no direct and through-towerd rows in the output")
	}
	if through.success < 99.9 {
		t.Errorf("success through towerd %.3f%%, want at least 99.9%%", through.success)
	}
	if !(direct.success < through.success || direct.p99 > through.p99) {
		t.Errorf("direct (%.3f%%, p99 %v) is not worse than through towerd (%.3f%%, p99 %v)",
			direct.success, direct.p99, through.success, through.p99)
	}
	// 100 ms ± 50 ms puts the direct p99 near 150 ms at the least; cached
	// answers are local, so half of it is a bound no loaded machine misses
	// unless towerd itself waits on the upstream.
	if through.p99*2 > direct.p99 {
		t.Errorf("p99 through towerd %v is not under half the direct p99 %v", through.p99, direct.p99)
	}
	if !regexp.MustCompile(`(?m)^cached names: p99 \S+ through towerd \(target under 5ms\)`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^PASS: `).MatchString(out) {
		t.Errorf("the output lacks the cached-names line or the PASS verdict")
	}
}
