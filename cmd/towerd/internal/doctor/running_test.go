package doctor

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/cmd/towerd/internal/daemon"
	"github.com/towerd/towerd/test/dnstest"
)

// freeAddr is a loopback TCP address nothing listens on (when called).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// A real towerd (daemon.New, as `towerd serve` builds it) on loopback:
// doctor reads its /stats, sees a zone whose only server refuses every
// query go down, and sees towerd gone once it stops.
func TestRunningTowerd(t *testing.T) {
	t.Parallel()
	up := dnstest.NewUpstream(t)
	dead := freeAddr(t) // UDP there: nothing listens, every query is refused
	cfg := config.DefaultConfig()
	cfg.Listen = []string{"127.0.0.1:0"}
	cfg.Admin.Listen = freeAddr(t)
	cfg.StateDir = ""
	cfg.Consul.Enabled = false
	cfg.Zones = []config.ZoneConfig{{Name: ".", Servers: []string{up.Addr}}, {Name: "consul.", Servers: []string{dead}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(daemon.Options{Config: cfg, Zones: cfg.Zones, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background()) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			d.Shutdown()
			<-done
		}
	}
	t.Cleanup(stop)
	<-d.Ready()
	var dnsAddr string
	for _, a := range d.Addrs() {
		if udp, ok := strings.CutPrefix(a, "udp/"); ok {
			dnsAddr = udp
		}
	}

	root := cleanNode(t).write(t)
	expectFindings(t, diagnose(t, root, Options{AdminAddr: cfg.Admin.Listen}))

	// Ask for consul. names until towerd marks its server down.
	c := &dns.Client{Timeout: 3 * time.Second}
	var r Report
	i := 0
	dnstest.Eventually(t, func() bool {
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn("n"+strings.Repeat("x", i%7)+".service.consul"), dns.TypeA)
		i++
		_, _, _ = c.Exchange(m, dnsAddr)
		r = diagnose(t, root, Options{AdminAddr: cfg.Admin.Listen})
		return len(r.Findings) > 0
	}, 30*time.Second, "a finding once towerd marks the consul zone's server down")
	expectFindings(t, r, "towerd-zone-unreachable:problem")
	if f := finding(t, r, "towerd-zone-unreachable"); !strings.Contains(strings.Join(items(f), " "), "zone consul.") {
		t.Errorf("items %q do not name zone consul.", items(f))
	}

	stop()
	r = diagnose(t, root, Options{AdminAddr: cfg.Admin.Listen})
	expectFindings(t, r, "towerd-not-running:problem")
	if f := finding(t, r, "towerd-not-running"); !strings.Contains(f.Saw, "refused") {
		t.Errorf("saw %q", f.Saw)
	}
}

// Whoever answers on the admin, Consul or Prometheus address cannot make
// doctor read more than maxBody or wait longer than -timeout.
func TestHostileHTTPAnswers(t *testing.T) {
	t.Parallel()
	endless := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		chunk := []byte(`{"a":"` + strings.Repeat("x", 64<<10))
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	t.Cleanup(endless.Close)
	release := make(chan struct{})
	silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(silent.Close)
	t.Cleanup(func() { close(release) })
	root := cleanNode(t).write(t)
	for _, c := range []struct {
		name, addr, want string
	}{
		{"endless", strings.TrimPrefix(endless.URL, "http://"), "larger than doctor reads"},
		{"silent", strings.TrimPrefix(silent.URL, "http://"), "deadline exceeded"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := diagnose(t, root, Options{AdminAddr: c.addr, ConsulAddr: c.addr, Rules: "http://" + c.addr, Timeout: time.Second})
			expectFindings(t, r, "towerd-not-running:problem", "consul-unreachable:warning")
			for _, id := range []string{"towerd-not-running", "consul-unreachable"} {
				if f := finding(t, r, id); !strings.Contains(f.Saw, c.want) {
					t.Errorf("%s: saw %q, want %q", id, f.Saw, c.want)
				}
			}
			skipped := false
			for _, s := range r.Skipped {
				skipped = skipped || (s.Area == areaMonitoring && strings.Contains(s.Reason, c.want))
			}
			if !skipped {
				t.Errorf("the rules' failure is not among %+v", r.Skipped)
			}
		})
	}
}
