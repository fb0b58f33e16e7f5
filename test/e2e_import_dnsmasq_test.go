package test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// debianDnsmasqRoot is a Debian-style node's dnsmasq: /etc/default/dnsmasq
// with Debian's CONFIG_DIR and a DNSMASQ_OPTS that adds another conf-dir,
// a dnsmasq.conf with a conf-file= include, and beside what dnsmasq reads
// what it skips (a .dpkg-old file, a dot file, an editor backup, a file
// its *.conf filter leaves out, a file nothing names), plus an absolute
// link inside the root.
var debianDnsmasqRoot = map[string]string{
	"etc/default/dnsmasq": "# Debian's defaults\nENABLED=1\nCONFIG_DIR=/etc/dnsmasq.d,.dpkg-dist,.dpkg-old,.dpkg-new\n" +
		"DNSMASQ_OPTS=\"--conf-dir=/etc/extra.d,*.conf\"\n",
	"etc/dnsmasq.conf":              "# Configuration file for dnsmasq.\nconf-file=/etc/dnsmasq.more.conf\nserver=192.0.2.1\nno-resolv\n",
	"etc/dnsmasq.more.conf":         "server=/corp.example/192.0.2.53\n",
	"etc/dnsmasq.d/10-consul":       "server=/consul/127.0.0.1#8600\n",
	"etc/dnsmasq.d/20-old.dpkg-old": "server=/old.example/192.0.2.99\n",
	"etc/dnsmasq.d/.hidden":         "server=/hidden.example/192.0.2.99\n",
	"etc/dnsmasq.d/30-backup~":      "server=/backup.example/192.0.2.99\n",
	"etc/dnsmasq.d/40-site":         "->/etc/shared/site.conf",
	"etc/shared/site.conf":          "server=/site.example/192.0.2.54\n",
	"etc/extra.d/a.conf":            "cache-size=2000\n",
	"etc/extra.d/b.txt":             "server=/txt.example/192.0.2.99\n",
	"etc/unread.conf":               "server=/unread.example/192.0.2.99\n",
}

// TestImportReadsWhatDnsmasqReads: issue 25 item 2, against the real
// dnsmasq. On a Debian-style root, `towerd import-dnsmasq --root` names
// exactly the files dnsmasq 2.90 reads when Debian's unit starts it, in
// its order. dnsmasq is asked file by file: with a bad line appended to
// that file alone, `dnsmasq --test` run as the unit's checkconfig runs it
// (the defaults file sourced, CONFIG_DIR and DNSMASQ_OPTS on its command
// line), in a mount namespace where the root's /etc is /etc, names the
// file when it reads it and says "syntax check OK" when it does not.
func TestImportReadsWhatDnsmasqReads(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: a mount namespace with the root's /etc")
	}
	for _, tool := range []string{"unshare", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: %v", tool, err)
		}
	}
	dnsmasq := dnsmasqPath(t)
	root := t.TempDir()
	writeNode(t, root, debianDnsmasqRoot)

	code, toml, report := runToExit(t, "import-dnsmasq", "--root", root)
	if code != 0 {
		t.Fatalf("import-dnsmasq --root: status %d\n%s\n%s", code, toml, report)
	}
	var ours []string
	for _, m := range regexp.MustCompile(`(?m)^read (\S+) under `).FindAllStringSubmatch(report, -1) {
		if m[1] != "/etc/default/dnsmasq" { // the unit's shell reads it, not dnsmasq
			ours = append(ours, m[1])
		}
	}

	// Which files the real dnsmasq reads, and which first.
	checkconfig := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "sh", "-c",
			`set -e; mount --bind "$1/etc" /etc; . /etc/default/dnsmasq; `+
				`exec "$2" --test ${CONFIG_DIR:+ -7 ${CONFIG_DIR}} ${DNSMASQ_OPTS:+ ${DNSMASQ_OPTS}}`, "sh", root, dnsmasq)
		out, _ := cmd.CombinedOutput()
		return string(out)
	}
	bad := regexp.MustCompile(`bad option at line \d+ of (\S+)`)
	var files []string
	_ = filepath.WalkDir(filepath.Join(root, "etc"), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && !strings.HasSuffix(p, "/etc/default/dnsmasq") {
			files = append(files, p)
		}
		return err
	})
	var theirs []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, append(data, "towerd-probe-not-an-option\n"...), 0o644); err != nil {
			t.Fatal(err)
		}
		out := checkconfig()
		if err := os.WriteFile(f, data, 0o644); err != nil {
			t.Fatal(err)
		}
		switch m := bad.FindStringSubmatch(out); {
		case m != nil:
			theirs = append(theirs, m[1])
		case !strings.Contains(out, "syntax check OK"):
			t.Fatalf("dnsmasq --test with %s broken: %s", f, out)
		}
	}
	slices.Sort(theirs)
	sortedOurs := slices.Sorted(slices.Values(ours))
	if !slices.Equal(sortedOurs, theirs) {
		t.Errorf("towerd import-dnsmasq read %q\ndnsmasq reads            %q\n%s", sortedOurs, theirs, report)
	}
	// Every file broken at once: dnsmasq stops at the first it reads.
	for _, f := range files {
		data, _ := os.ReadFile(f)
		if err := os.WriteFile(f, append(data, "towerd-probe-not-an-option\n"...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if m := bad.FindStringSubmatch(checkconfig()); m == nil || len(ours) == 0 || m[1] != ours[0] {
		t.Errorf("dnsmasq reads %v first, towerd %q", m, ours)
	}

	// And the import routes what those files route.
	for _, want := range []string{`"consul."`, `"corp.example."`, `"site.example."`, `servers = ["192.0.2.1:53"]`, "size = 2000"} {
		if !strings.Contains(toml, want) {
			t.Errorf("the import lacks %s:\n%s", want, toml)
		}
	}
	for _, skipped := range []string{"old.example", "hidden.example", "backup.example", "txt.example", "unread.example"} {
		if strings.Contains(toml, skipped) {
			t.Errorf("the import has %s, which dnsmasq does not read:\n%s", skipped, toml)
		}
	}
}
