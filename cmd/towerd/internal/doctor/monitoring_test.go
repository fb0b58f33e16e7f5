package doctor

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/towerd/towerd/test/dnstest"
)

// shippedRules is the repository's monitoring directory.
func shippedRules(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "..", "monitoring")
}

func rulesDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const latencyOnly = `groups:
  - name: mine
    rules:
      - alert: DNSSlow
        expr: histogram_quantile(0.99, sum by (le) (rate(towerd_request_duration_seconds_bucket[5m]))) > 0.5
`

const alertsWithoutRecords = `groups:
  - name: towerd.alerts
    rules:
      - alert: TowerdUpstreamFailureRatioHigh
        expr: instance_zone:towerd_upstream_failure_ratio:rate5m > 0.05
      - alert: TowerdLookupLatencyHigh
        expr: instance:towerd_request_duration_seconds:p99_5m{job="towerd"} > 0.5
      - alert: TowerdConsulWatchErrors
        expr: rate(towerd_consul_watch_errors_total[10m:1m]) > 0
`

func TestRulesFiles(t *testing.T) {
	t.Parallel()
	root := cleanNode(t).write(t)
	cases := []struct {
		name  string
		rules string
		want  []string
		items []string
	}{
		{"the shipped rules cover every signal", shippedRules(t), nil, nil},
		{"the shipped rules file alone", filepath.Join(shippedRules(t), "towerd.rules.yml"), nil, nil},
		{"one alert of one's own, on latency", rulesDir(t, map[string]string{"dns.yml": latencyOnly}),
			[]string{"monitoring-signal-missing:warning"},
			[]string{"resolver failures (SERVFAIL, timeouts)", "Consul health (check timeouts, the watch)"}},
		{"alerts without their recording rules", rulesDir(t, map[string]string{"a.yaml": alertsWithoutRecords}),
			[]string{"monitoring-recording-rule-missing:warning"},
			[]string{"TowerdUpstreamFailureRatioHigh", "TowerdLookupLatencyHigh"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := diagnose(t, root, Options{Rules: c.rules})
			expectFindings(t, r, c.want...)
			if len(c.want) > 0 {
				expectItems(t, finding(t, r, strings.Split(c.want[0], ":")[0]), c.items...)
			}
			for _, s := range r.Skipped {
				if s.Area == areaMonitoring {
					t.Errorf("skipped: %s", s.Reason)
				}
			}
		})
	}
}

// A FIFO, an 8 GiB file and a file that is not YAML in the rules
// directory: each is named as not read, the others are read.
func TestRulesHostileFiles(t *testing.T) {
	t.Parallel()
	dir := rulesDir(t, map[string]string{"dns.yml": latencyOnly, "broken.yml": "groups: [\n"})
	mkfifo(t, filepath.Join(dir, "fifo.yml"))
	huge := filepath.Join(dir, "huge.yml")
	if err := os.WriteFile(huge, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 8<<30); err != nil {
		t.Fatal(err)
	}
	r := diagnose(t, cleanNode(t).write(t), Options{Rules: dir})
	expectFindings(t, r, "monitoring-signal-missing:warning")
	var unread []string
	for _, s := range r.Skipped {
		if s.Area == areaMonitoring {
			unread = append(unread, filepath.Base(strings.Fields(s.Reason)[0]))
		}
	}
	if strings.Join(unread, " ") != "broken.yml: fifo.yml: huge.yml:" {
		t.Errorf("not read: %q", unread)
	}
	if r := diagnose(t, cleanNode(t).write(t), Options{Rules: t.TempDir()}); len(r.Findings) != 0 {
		t.Errorf("an empty directory: %v", got(r))
	}
}

// A real Prometheus (Debian's) with the shipped rules loaded: doctor reads
// what it has loaded from /api/v1/rules.
func TestRulesFromPrometheus(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus not installed (Debian package prometheus; test/install-deps.sh)")
	}
	dir := t.TempDir()
	rules, err := filepath.Abs(filepath.Join(shippedRules(t), "towerd.rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(conf, []byte("rule_files: ["+rules+"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--config.file="+conf, "--web.listen-address="+addr,
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--log.level=warn")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("prometheus's output:\n%s", out.String())
		}
	})
	// A real Prometheus starting beside the suite: a generous bound.
	dnstest.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 60*time.Second, "prometheus's readiness endpoint")
	root := cleanNode(t).write(t)
	r := diagnose(t, root, Options{Rules: "http://" + addr})
	expectFindings(t, r)
	for _, s := range r.Skipped {
		if s.Area == areaMonitoring {
			t.Errorf("skipped: %s", s.Reason)
		}
	}
}
