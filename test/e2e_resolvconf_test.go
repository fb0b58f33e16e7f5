package test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/dnslisten"
)

// resolvFollowTimeout is issue 14's bound: a change of the followed resolv.conf
// is applied within 2 s. inotify reports it at once; the 1 s poll is the
// fallback.
const resolvFollowTimeout = 2 * time.Second

// followedLine is the daemon's log line for an applied change.
var followedLine = regexp.MustCompile(`servers changed: its resolv.conf changed" file=\S+ old=(""|\S+) new=(\S+)`)

// TestFollowResolvConf: zone "." without servers follows its resolv_conf
// file while towerd runs (issue 14). The file moves from upstream A to B,
// as a DHCP client rewrites it (a rename) or as an editor does (in place);
// within 2 s and with no signal sent, a new name is asked of B and not of A,
// a name cached from A is still answered from the cache, and the change is
// counted but is not a reload.
func TestFollowResolvConf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		write func(t *testing.T, path, body string)
	}{
		{"rename", renameOver},
		{"in place", writeFileAt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, b, consul := newPort53Upstream(t), newPort53Upstream(t), newTestUpstream(t)
			a.Add(t, "cached.follow.test. 300 IN A 192.0.2.1", "new.follow.test. 300 IN A 192.0.2.2")
			b.Add(t, "cached.follow.test. 300 IN A 198.51.100.1", "new.follow.test. 300 IN A 198.51.100.2")
			resolv := filepath.Join(t.TempDir(), "resolv.conf")
			writeFileAt(t, resolv, "nameserver "+hostOf(t, a.Addr)+"\nsearch corp.example\n")
			d := startTowerd(t, "-config", followConfig(t, resolv, consul), "-listen", "127.0.0.1:0")

			if got := digAddrs(t, d.UDP, "cached.follow.test."); !slices.Equal(got, []string{"192.0.2.1"}) {
				t.Fatalf("before the change: %v, want 192.0.2.1 from A", got)
			}

			tc.write(t, resolv, "# a new lease\nnameserver "+hostOf(t, b.Addr)+"\n")
			m, err := d.stderr.waitFor(followedLine, resolvFollowTimeout, d.exited)
			if err != nil {
				t.Fatalf("the change was not applied within %v: %v", resolvFollowTimeout, err)
			}
			if m[1] != a.Addr || m[2] != b.Addr {
				t.Errorf("logged old=%s new=%s, want %s -> %s", m[1], m[2], a.Addr, b.Addr)
			}

			if got := digAddrs(t, d.UDP, "new.follow.test."); !slices.Equal(got, []string{"198.51.100.2"}) {
				t.Errorf("new name after the change: %v, want 198.51.100.2 from B", got)
			}
			if na, nb := a.Count("new.follow.test.", dns.TypeA), b.Count("new.follow.test.", dns.TypeA); na != 0 || nb != 1 {
				t.Errorf("new name: A asked %d times, B %d; want 0 and 1", na, nb)
			}
			// The cache survived the change.
			if got := digAddrs(t, d.UDP, "cached.follow.test."); !slices.Equal(got, []string{"192.0.2.1"}) {
				t.Errorf("cached name after the change: %v, want the cached 192.0.2.1", got)
			}
			if na, nb := a.Count("cached.follow.test.", dns.TypeA), b.Count("cached.follow.test.", dns.TypeA); na != 1 || nb != 0 {
				t.Errorf("cached name: A asked %d times, B %d; want 1 and 0", na, nb)
			}

			_, mfs := scrape(t, d.Admin)
			if got := sample(mfs, "towerd_upstream_resolvconf_changes_total", nil); got != 1 {
				t.Errorf("towerd_upstream_resolvconf_changes_total %v, want 1", got)
			}
			if got := sample(mfs, "towerd_config_reloads_total", nil); got != 0 {
				t.Errorf("towerd_config_reloads_total %v, want 0: following the file is not a reload", got)
			}
		})
	}
}

// TestFollowResolvConfMissingAtStart: a followed file that does not exist
// yet (its DHCP client has not run) does not keep towerd from starting;
// zone "." answers SERVFAIL until the file appears, then its servers serve.
func TestFollowResolvConfMissingAtStart(t *testing.T) {
	t.Parallel()
	up, consul := newPort53Upstream(t), newTestUpstream(t)
	up.Add(t, "www.follow.test. 300 IN A 192.0.2.7")
	resolv := filepath.Join(t.TempDir(), "run", "resolv.conf") // not even the directory exists
	config := followConfig(t, resolv, consul)

	code, _, errOut := runToExit(t, "check", "-config", config)
	if code != 0 || !strings.Contains(errOut, "zone \".\" has no servers: "+resolv+" does not exist") {
		t.Errorf("towerd check with the file missing: exit %d, want 0 and a warning naming the file:\n%s", code, errOut)
	}

	d := startTowerd(t, "-config", config, "-listen", "127.0.0.1:0")
	if r := dig(t, d.UDP, "www.follow.test.", "A"); r.Status != "SERVFAIL" {
		t.Errorf("before the file exists: %s, want SERVFAIL", r.Status)
	}
	if err := os.MkdirAll(filepath.Dir(resolv), 0o755); err != nil {
		t.Fatal(err)
	}
	renameOver(t, resolv, "nameserver "+hostOf(t, up.Addr)+"\n")
	m, err := d.stderr.waitFor(followedLine, resolvFollowTimeout, d.exited)
	if err != nil {
		t.Fatalf("the file's servers were not taken within %v: %v", resolvFollowTimeout, err)
	}
	if m[1] != `""` || m[2] != up.Addr {
		t.Errorf("logged old=%q new=%s, want none -> %s", m[1], m[2], up.Addr)
	}
	r := dig(t, d.UDP, "www.follow.test.", "A")
	if r.Status != "NOERROR" || !slices.Equal(addresses(r.Answer), []string{"192.0.2.7"}) {
		t.Errorf("after the file appeared: %s %v, want 192.0.2.7\n%s", r.Status, addresses(r.Answer), r.Output)
	}
}

// followConfig is a towerd.toml whose zone "." follows resolv and whose
// consul. goes to the test's own server.
func followConfig(t *testing.T, resolv string, consul *testUpstream) string {
	t.Helper()
	return writeConfig(t, fmt.Sprintf("resolv_conf = %q\n\n[[zone]]\nname = \"consul.\"\nservers = [%q]\n", resolv, consul.Addr))
}

// newPort53Upstream is a test upstream on port 53 of a free 127.53.14.x:
// resolv.conf's nameserver lines have no port, so a followed file can only
// name servers on 53. The 127.53.14.0/24 block is used by no other test.
func newPort53Upstream(t *testing.T) *testUpstream {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("binding port 53 of 127.53.14.x needs root (resolv.conf names servers on port 53 only)")
	}
	var lastErr error
	for i := 1; i < 255; i++ {
		pc, l, err := dnslisten.Pair(fmt.Sprintf("127.53.14.%d:53", i))
		if err != nil {
			lastErr = err
			continue
		}
		return newTestUpstreamOn(t, pc, l)
	}
	t.Fatalf("no free port 53 in 127.53.14.0/24: %v", lastErr)
	return nil
}

// renameOver writes body beside path and renames it over path, as DHCP
// clients, resolved and NetworkManager replace their files.
func renameOver(t *testing.T, path, body string) {
	t.Helper()
	tmp := path + ".tmp"
	writeFileAt(t, tmp, body)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func hostOf(t *testing.T, addr string) string {
	t.Helper()
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return host
}
