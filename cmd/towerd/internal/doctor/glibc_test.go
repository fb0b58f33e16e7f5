package doctor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/towerd/towerd/resolver"
)

// glibc itself decides the order of the names a lookup tries; doctor's
// model of it (resolver.SearchList.Tries) is held to the real thing: getent ahosts in a
// private mount and network namespace, whose resolv.conf has two search
// domains and names dnsmasq on the namespace's own 127.0.0.1, which logs
// every question and answers NXDOMAIN for all but the one name that
// exists.

// glibcQuestions runs getent ahosts name and returns the names asked, in
// order, A questions only (AAAA goes with each).
func glibcQuestions(t *testing.T, name, exists string, ndots int) []string {
	t.Helper()
	dir := t.TempDir()
	resolv := filepath.Join(dir, "resolv.conf")
	nss := filepath.Join(dir, "nsswitch.conf")
	conf := filepath.Join(dir, "dnsmasq.conf")
	logFile := filepath.Join(dir, "dnsmasq.log")
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(resolv, "nameserver 127.0.0.1\nsearch corp.example ec2.internal\noptions ndots:"+itoa(ndots)+" timeout:1 attempts:1\n")
	write(nss, "hosts: dns\n")
	write(conf, "listen-address=127.0.0.1\nbind-interfaces\nport=53\nno-resolv\nno-hosts\nlog-queries\n"+
		"user=root\naddress=/#/\naddress=/"+exists+"/192.0.2.7\naddress=/"+exists+"/2001:db8::7\n"+
		"log-facility="+logFile+"\npid-file="+filepath.Join(dir, "pid")+"\n")
	script := `set -e; ip link set lo up
mount --bind "$1" /etc/resolv.conf; mount --bind "$2" /etc/nsswitch.conf
dnsmasq --conf-file="$3" --keep-in-foreground & pid=$!
i=0; until grep -q "started, version" "$4" 2>/dev/null; do i=$((i+1)); [ $i -lt 200 ] || exit 3; sleep 0.05; done
getent ahosts "$5" >/dev/null || true
kill $pid; wait $pid || true`
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "unshare", "--mount", "--net", "--propagation", "private",
		"sh", "-c", script, "sh", resolv, nss, conf, logFile, name).CombinedOutput()
	if err != nil {
		t.Fatalf("getent in a namespace: %v\n%s", err, out)
	}
	data, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	for _, m := range regexp.MustCompile(`query\[A\] (\S+) from`).FindAllStringSubmatch(string(data), -1) {
		asked = append(asked, m[1])
	}
	return asked
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestGlibcTriesMatchGetent(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: unshare -mn, bind mounts, port 53")
	}
	for _, tool := range []string{"unshare", "ip", "getent", "mount", "dnsmasq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found", tool)
		}
	}
	search := []string{"corp.example", "ec2.internal"}
	for _, c := range []struct {
		name, exists string
		ndots        int
	}{
		{"web.service.consul", "web.service.consul", 1},
		{"web.service.consul", "web.service.consul", 5},
		{"ghost.bench.test", "nothing.test", 1},
		{"db", "db.corp.example", 1},
		{"api-service", "nothing.test", 1},
	} {
		t.Run(c.name+"-ndots"+itoa(c.ndots), func(t *testing.T) {
			t.Parallel()
			tries := resolver.SearchList{Domains: search, Ndots: c.ndots}.Tries(c.name)
			if i := slices.Index(tries, c.exists); i >= 0 {
				tries = tries[:i+1] // glibc stops at the name that exists
			}
			got := glibcQuestions(t, c.name, c.exists, c.ndots)
			t.Logf("glibc asked %v", got)
			if !slices.Equal(got, tries) {
				t.Errorf("glibc asked %v; glibcTries says %v", got, tries)
			}
		})
	}
}
