package install

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/towerd/towerd/cmd/towerd/internal/base"
)

// TestInstallFlagsThatCannotTakeEffect: refused with status 2 before
// install reads or writes anything.
func TestInstallFlagsThatCannotTakeEffect(t *testing.T) {
	root := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--root", root, "--activate"}, "--activate runs this machine's systemctl"},
		{[]string{"--root", root, "--activate-timeout", "3s"}, "--activate-timeout without --activate"},
		{[]string{"--root", root, "--from-dnsmasq", "/etc/dnsmasq.conf", "extra"}, `unexpected argument "extra"`},
	} {
		var out, errOut bytes.Buffer
		if code := Run(tc.args, &out, &errOut); code != base.ExitConfig || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("install %q: status %d, stderr %q; want %d and %q", tc.args, code, errOut.String(), base.ExitConfig, tc.want)
		}
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("a refused install wrote %v", entries)
	}
}

// TestInstallFromDnsmasqTakesAnOptionalPath: "--from-dnsmasq DIR" followed
// by more flags reads DIR (as the node sees it) and still parses the flags
// after it; a dry run writes nothing.
func TestInstallFromDnsmasqTakesAnOptionalPath(t *testing.T) {
	root := t.TempDir()
	for name, body := range map[string]string{
		"etc/resolv.conf":         "nameserver 192.0.2.53\n",
		"etc/dnsmasq.d/10-consul": "server=/consul/127.0.0.1#8600\n",
	} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out, errOut bytes.Buffer
	code := Run([]string{"--from-dnsmasq", "/etc/dnsmasq.d", "--root", root, "--dry-run"}, &out, &errOut)
	if code != base.ExitOK || !strings.Contains(out.String(), "would write     /etc/towerd/towerd.toml: imported from dnsmasq's /etc/dnsmasq.d") ||
		!strings.Contains(out.String(), `zone "." -> 192.0.2.53:53`) {
		t.Errorf("status %d\n%s%s", code, out.String(), errOut.String())
	}
	if _, err := os.Stat(filepath.Join(root, "etc/towerd")); !os.IsNotExist(err) {
		t.Errorf("a dry run created /etc/towerd: %v", err)
	}
}
