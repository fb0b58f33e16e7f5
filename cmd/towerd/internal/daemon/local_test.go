package daemon

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/resolver/local"
	"github.com/towerd/towerd/test/dnstest"
)

// localDaemon runs a quiet daemon whose [local] reads one hosts file
// holding hosts (its path returned), TTL 60 s, and that forwards "." to
// port 9 (discard): a forwarded question would time out, which the test
// would see as SERVFAIL. The zone is named in the configuration too, so a
// reload never reads the machine's resolv.conf. more changes the
// configuration and options before the daemon is built; Load returns the
// configuration it started with unless more sets it. ask answers with the
// rcode and the answer records, tabs as spaces.
func localDaemon(t *testing.T, hosts string, more func(cfg *config.Config, o *Options)) (
	d *Daemon, hostsFile string, ask func(name string, qtype uint16) string) {
	t.Helper()
	hostsFile = filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hostsFile, []byte(hosts), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := quietConfig()
	cfg.Local.HostsFiles = []string{hostsFile}
	cfg.Local.TTL = config.Dur(60e9)
	cfg.Zones = []config.ZoneConfig{{Name: ".", Servers: []string{"127.0.0.1:9"}}}
	o := Options{Zones: cfg.Zones, Log: slog.New(slog.DiscardHandler)}
	o.Load = func() (config.Config, error) { return o.Config, nil }
	if more != nil {
		more(&cfg, &o)
	}
	o.Config = cfg
	d, stop := runDaemon(t, o)
	t.Cleanup(func() { stop() })
	udp := strings.TrimPrefix(d.Addrs()[0], "udp/")
	return d, hostsFile, func(name string, qtype uint16) string {
		t.Helper()
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		r, err := dns.Exchange(m, udp)
		if err != nil {
			t.Fatal(err)
		}
		out := dns.RcodeToString[r.Rcode]
		for _, rr := range r.Answer {
			out += " " + strings.ReplaceAll(rr.String(), "\t", " ")
		}
		return out
	}
}

// The daemon answers from [local] before its upstreams, with the rules on
// by default, and a reload swaps local data only when the new
// configuration is taken.
func TestLocalDataFollowsReload(t *testing.T) {
	var next config.Config
	var loadErr error
	d, hosts, ask := localDaemon(t, "192.168.1.10 nas.lan nas\n", func(cfg *config.Config, o *Options) {
		cfg.Local.Records = []string{"old.lan. A 192.168.1.9"}
		next = *cfg
		o.Load = func() (config.Config, error) { return next, loadErr }
	})
	if got := ask("nas.lan.", dns.TypeA); got != "NOERROR nas.lan. 60 IN A 192.168.1.10" {
		t.Errorf("nas.lan. A = %s", got)
	}
	if got := ask("foo.", dns.TypeA); got != "NXDOMAIN" {
		t.Errorf("foo. A = %s, want NXDOMAIN (domain_needed by default)", got)
	}
	if got := ask("9.9.168.192.in-addr.arpa.", dns.TypePTR); got != "NXDOMAIN" {
		t.Errorf("a private PTR = %s, want NXDOMAIN (bogus_priv by default)", got)
	}

	// A failed reload keeps the running local data; a good one re-reads
	// the hosts files and takes the new [local] table.
	next.Local.Records = []string{"new.lan. A 192.168.1.11"}
	next.Local.Domains = []string{"lan."}
	loadErr = errors.New("broken file")
	if err := d.Reload(); err == nil {
		t.Fatal("reload with a load error succeeded")
	}
	if got := ask("old.lan.", dns.TypeA); got != "NOERROR old.lan. 60 IN A 192.168.1.9" {
		t.Errorf("after a failed reload, old.lan. A = %s, want the running record", got)
	}
	loadErr = nil
	if err := os.WriteFile(hosts, []byte("192.168.1.12 nas.lan\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.Reload(); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if got := ask("new.lan.", dns.TypeA); got != "NOERROR new.lan. 60 IN A 192.168.1.11" {
		t.Errorf("after the reload, new.lan. A = %s", got)
	}
	if got := ask("nas.lan.", dns.TypeA); got != "NOERROR nas.lan. 60 IN A 192.168.1.12" {
		t.Errorf("after the reload, nas.lan. A = %s: the hosts file is re-read on reload", got)
	}
	if got := ask("old.lan.", dns.TypeA); got != "NXDOMAIN" {
		t.Errorf("old.lan. A = %s, want NXDOMAIN from the local domain", got)
	}
	if d.local.Load() != d.localNext {
		t.Error("the polled source is not the one the handler answers from")
	}
}

// The hosts files are polled on the daemon's clock (Options.Clock, issue
// 33): an edit is not seen while the clock stands still, and is once the
// test steps it past the poll interval.
func TestLocalDataPolledOnTheDaemonClock(t *testing.T) {
	clk := dnstest.NewClock(time.Unix(1700000000, 0))
	d, hosts, ask := localDaemon(t, "192.168.1.10 nas.lan\n", func(_ *config.Config, o *Options) { o.Clock = clk })
	nas := func() string { return ask("nas.lan.", dns.TypeA) }
	// A new size, so the poll sees a change whatever the file system's
	// timestamp granularity.
	if err := os.WriteFile(hosts, []byte("192.168.1.111 nas.lan\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := nas(); got != "NOERROR nas.lan. 60 IN A 192.168.1.10" {
		t.Fatalf("before the clock moved: nas.lan. = %s, want the file as read at start", got)
	}
	clk.Advance(local.DefaultPollInterval - 1)
	if got := nas(); got != "NOERROR nas.lan. 60 IN A 192.168.1.10" {
		t.Fatalf("before the poll interval on the clock: nas.lan. = %s", got)
	}
	clk.Advance(1)
	// The poll runs on the poller's goroutine: no event to wait on.
	dnstest.Eventually(t, func() bool { return nas() == "NOERROR nas.lan. 60 IN A 192.168.1.111" }, 10*time.Second,
		"the edited hosts file read at the poll")
	// The poller's ticker is the clock's: stopping the poll disarms it.
	armed := clk.Timers()
	d.stopLocal()
	if got := clk.Timers(); got != armed-1 {
		t.Errorf("%d timers armed after the poll stopped, %d before: the poll's ticker is not the daemon clock's", got, armed)
	}
}
