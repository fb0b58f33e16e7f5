package test

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// reloadTimeout bounds the wait for the log line that ends a reload.
const reloadTimeout = 10 * time.Second

// TestReload: SIGHUP swaps in a changed zone and TTL policy while the cache
// and a query in flight survive; a broken file is rejected with its reason
// logged, and the running configuration keeps serving; a last reload
// changes the allow-list.
func TestReload(t *testing.T) {
	t.Parallel()
	def, consul := newTestUpstream(t), newTestUpstream(t)
	before, after := newTestUpstream(t), newTestUpstream(t) // corp.example.'s servers
	before.Add(t, "cached.corp.example. 300 IN A 192.0.2.10", "held.corp.example. 300 IN A 192.0.2.11")
	after.Add(t,
		"cached.corp.example. 300 IN A 198.51.100.10",
		"new.corp.example. 300 IN A 198.51.100.20",
		"zero.corp.example. 0 IN A 198.51.100.30",
		"later.corp.example. 300 IN A 198.51.100.40",
	)
	// The counts below are of packets: a loopback reply late past the RTO
	// floor on a loaded machine would add a retransmission, so the floor is
	// raised well above any such delay, and the held query would be hedged,
	// so hedging is off (what is tested is the reload).
	config := func(head string, corp *testUpstream) string {
		return fmt.Sprintf("%s\n[upstream]\nmin_attempt_timeout = \"1.5s\"\nhedge_budget = 0\n[[zone]]\nname = \"corp.example.\"\nservers = [%q]\n", head, corp.Addr) + zonesFor(def, consul)
	}
	path := writeConfig(t, config("", before))
	d := startTowerd(t, "-config", path, "-listen", "127.0.0.1:0")

	if got := digAddrs(t, d.UDP, "cached.corp.example."); !slices.Equal(got, []string{"192.0.2.10"}) {
		t.Fatalf("before the reload: %v, want 192.0.2.10", got)
	}

	// A query waits at the old server while the reload happens.
	arrived, release := before.Hold("held.corp.example.")
	t.Cleanup(release)
	held := make(chan *dns.Msg, 1)
	go func() {
		reply, err := exchange(d.UDP, "udp", query("held.corp.example.", dns.TypeA, true))
		if err != nil {
			t.Errorf("held query: %v", err)
		}
		held <- reply
	}()
	select {
	case <-arrived:
	case <-time.After(reloadTimeout):
		t.Fatal("the held query did not reach the old server")
	}

	// The new file moves corp.example. to another server and holds even
	// TTL-0 answers for a minute.
	writeFileAt(t, path, config("[cache]\nmin_ttl = \"60s\"\n", after))
	d.signal(t, syscall.SIGHUP)
	if _, err := d.stderr.waitFor(regexp.MustCompile(`msg=reloaded`), reloadTimeout, d.exited); err != nil {
		t.Fatalf("no reload: %v", err)
	}
	release()
	if r := <-held; r == nil || r.Rcode != dns.RcodeSuccess || !slices.Equal(addresses(r.Answer), []string{"192.0.2.11"}) {
		t.Errorf("query in flight across the reload: %v; want its answer from the old server", r)
	}
	// The attempt in flight across the reload is counted for the old
	// server (before its answer is written). Read now: the old server's
	// series go upstream.timeout after the reload, and the steps
	// below can take that long on a loaded machine.
	_, mfs := scrape(t, d.Admin)
	if got := sample(mfs, "towerd_upstream_requests_total", map[string]string{"zone": "corp.example.", "server": before.Addr}); got != 2 {
		t.Errorf("towerd_upstream_requests_total for the old server %s = %v, want 2", before.Addr, got)
	}

	// Cached before the reload: answered from the cache, nobody asked.
	if got := digAddrs(t, d.UDP, "cached.corp.example."); !slices.Equal(got, []string{"192.0.2.10"}) {
		t.Errorf("cached name after the reload: %v, want the cached 192.0.2.10", got)
	}
	if n, m := before.Count("cached.corp.example.", dns.TypeA), after.Count("cached.corp.example.", dns.TypeA); n != 1 || m != 0 {
		t.Errorf("cached name: old server asked %d times, new %d; want 1 and 0 (the cache survived)", n, m)
	}
	// New names follow the new zone.
	if got := digAddrs(t, d.UDP, "new.corp.example."); !slices.Equal(got, []string{"198.51.100.20"}) {
		t.Errorf("new name after the reload: %v, want 198.51.100.20 from the new server", got)
	}
	// The new TTL policy: a TTL-0 answer is now cached for min_ttl.
	digAddrs(t, d.UDP, "zero.corp.example.")
	r := dig(t, d.UDP, "zero.corp.example.", "A")
	if n := after.Count("zero.corp.example.", dns.TypeA); n != 1 || len(r.Answer) != 1 || r.Answer[0].Header().Ttl < 59 {
		t.Errorf("TTL-0 name under min_ttl 60s: upstream asked %d times, answer %v; want 1 and a cached TTL near 60", n, r.Answer)
	}

	// A broken file: rejected, the reason logged, the old config serves on.
	writeFileAt(t, path, "[cache\nsize = 10\n")
	d.signal(t, syscall.SIGHUP)
	m, err := d.stderr.waitFor(regexp.MustCompile(`msg="reload rejected; the running configuration stays" err=(.*)`), reloadTimeout, d.exited)
	if err != nil {
		t.Fatalf("broken file: %v", err)
	}
	if !regexp.MustCompile(regexp.QuoteMeta(path) + `:1`).MatchString(m[1]) {
		t.Errorf("the logged reason does not name the file and line: %s", m[1])
	}
	if got := digAddrs(t, d.UDP, "later.corp.example."); !slices.Equal(got, []string{"198.51.100.40"}) {
		t.Errorf("after the rejected reload: %v, want 198.51.100.40 from the running config's server", got)
	}
	if n := before.Count("later.corp.example.", dns.TypeA); n != 0 {
		t.Errorf("the old server was asked %d times after the rejected reload", n)
	}

	s := readStats(t, d.Admin)
	if s.LastReload == nil || s.LastReload.OK || s.LastReload.Error == "" {
		t.Errorf("/stats last_reload: %+v; want the rejection and its reason", s.LastReload)
	}
	_, mfs = scrape(t, d.Admin)
	if got := sample(mfs, "towerd_config_last_reload_successful", nil); got != 0 {
		t.Errorf("towerd_config_last_reload_successful = %v, want 0", got)
	}
	for result, want := range map[string]float64{"success": 1, "failure": 1} {
		if got := sample(mfs, "towerd_config_reloads_total", map[string]string{"result": result}); got != want {
			t.Errorf("towerd_config_reloads_total{result=%q} = %v, want %v", result, got, want)
		}
	}
	if got := sample(mfs, "towerd_upstream_requests_total", map[string]string{"zone": "corp.example.", "server": after.Addr}); got != 3 {
		t.Errorf("towerd_upstream_requests_total for the new server %s = %v, want 3", after.Addr, got)
	}

	// The allow-list is reloaded too: loopback clients left out are refused.
	writeFileAt(t, path, config("allow = [\"192.0.2.0/24\"]\n", after))
	d.signal(t, syscall.SIGHUP)
	if err := waitForNth(d.stderr, regexp.MustCompile(`msg=reloaded`), 2, d.exited); err != nil {
		t.Fatalf("third reload: %v", err)
	}
	if r := dig(t, d.UDP, "new.corp.example.", "A"); r.Status != "REFUSED" {
		t.Errorf("after allow-list reload without loopback: status %s, want REFUSED", r.Status)
	}
}

// waitForNth waits until n lines match re: a reload logs the same line
// every time.
func waitForNth(l *logLines, re *regexp.Regexp, n int, exited <-chan struct{}) error {
	deadline := time.NewTimer(reloadTimeout)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		found := 0
		for _, line := range l.lines {
			if re.MatchString(line) {
				found++
			}
		}
		changed := l.changed
		l.mu.Unlock()
		if found >= n {
			return nil
		}
		select {
		case <-changed:
		case <-exited:
			return fmt.Errorf("process exited after %d lines matching %q, want %d", found, re, n)
		case <-deadline.C:
			return fmt.Errorf("%d lines matching %q within %v, want %d", found, re, reloadTimeout, n)
		}
	}
}

// writeFileAt replaces the file at path, as an operator editing it would.
func writeFileAt(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}
