package test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/md5"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The commands towerd has today; the package test also requires every
// command the packaged binary's `towerd help` lists, so commands added
// later are checked without touching this list.
var packagedCommands = []string{"serve", "check", "stats", "reload", "flush", "cache", "lookup", "log-queries", "install", "uninstall", "import-dnsmasq", "drill", "doctor", "completion", "version", "help"}

// commandTimeout bounds every program these tests run but make deb's build.
const commandTimeout = 60 * time.Second

// output runs a program to its end and returns its stdout, failing the test
// with stderr when it exits non-zero.
func output(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func gunzip(t *testing.T, path string) (string, *gzip.Header) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return string(b), &zr.Header
}

// TestDebPackage builds the package with make deb, as a release would,
// unpacks it with dpkg-deb into a temp dir (never into the system's dpkg
// database) and checks what an administrator would get.
func TestDebPackage(t *testing.T) {
	for _, tool := range []string{"make", "dpkg-deb", "zsh", "man", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the package test needs %s: run test/install-deps.sh", tool)
		}
	}
	const version = "v9.8.7-3-g1a2b3c4" // as git describe prints a commit after a tag
	const debVersion = "9.8.7+3.g1a2b3c4"
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "make", "-s", "-C", "..", "deb", "VERSION="+version, "DEB_DIR="+out, "SOURCE_DATE_EPOCH=1764460800")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make deb: %v\n%s", err, b)
	}
	debs, _ := filepath.Glob(filepath.Join(out, "towerd_*.deb"))
	if len(debs) != 1 || !strings.HasPrefix(filepath.Base(debs[0]), "towerd_"+debVersion+"_") {
		t.Fatalf("make deb built %v, want one towerd_%s_<arch>.deb", debs, debVersion)
	}
	deb := debs[0]
	root, ctrl := filepath.Join(t.TempDir(), "root"), filepath.Join(t.TempDir(), "DEBIAN")
	output(t, "", nil, "dpkg-deb", "-x", deb, root)
	output(t, "", nil, "dpkg-deb", "-e", deb, ctrl)

	t.Run("control", func(t *testing.T) {
		fields := output(t, "", nil, "dpkg-deb", "-f", deb, "Package", "Version", "Depends", "Pre-Depends", "Installed-Size", "Maintainer", "Description")
		for _, want := range []string{"Package: towerd\n", "Version: " + debVersion + "\n", "Maintainer: ", "Description: "} {
			if !strings.Contains(fields, want) {
				t.Errorf("control lacks %q:\n%s", want, fields)
			}
		}
		if strings.Contains(fields, "Depends:") {
			t.Errorf("a static binary depends on nothing, control says:\n%s", fields)
		}
		m := regexp.MustCompile(`Installed-Size: (\d+)`).FindStringSubmatch(fields)
		if m == nil {
			t.Fatalf("no Installed-Size:\n%s", fields)
		}
		kib, _ := strconv.Atoi(m[1])
		var bytesOnDisk int64
		_ = filepath.Walk(root, func(_ string, fi os.FileInfo, _ error) error {
			if fi.Mode().IsRegular() {
				bytesOnDisk += fi.Size()
			}
			return nil
		})
		if lo, hi := bytesOnDisk/1024, bytesOnDisk/1024+64; int64(kib) < lo || int64(kib) > hi {
			t.Errorf("Installed-Size %d KiB, files hold %d bytes (want %d..%d)", kib, bytesOnDisk, lo, hi)
		}
		if got := readFile(t, filepath.Join(ctrl, "conffiles")); got != "/etc/towerd/towerd.toml\n" {
			t.Errorf("conffiles = %q, want the sample config only", got)
		}
	})

	t.Run("md5sums", func(t *testing.T) {
		listed := map[string]bool{}
		sc := bufio.NewScanner(strings.NewReader(readFile(t, filepath.Join(ctrl, "md5sums"))))
		for sc.Scan() {
			sum, path, ok := strings.Cut(sc.Text(), "  ")
			if !ok {
				t.Fatalf("md5sums line %q", sc.Text())
			}
			listed[path] = true
			if got := fmt.Sprintf("%x", md5.Sum([]byte(readFile(t, filepath.Join(root, path))))); got != sum {
				t.Errorf("md5sums says %s for %s, the file's is %s", sum, path, got)
			}
		}
		_ = filepath.Walk(root, func(p string, fi os.FileInfo, _ error) error {
			rel, _ := filepath.Rel(root, p)
			if fi.Mode().IsRegular() && !listed[rel] && rel != "etc/towerd/towerd.toml" {
				t.Errorf("%s is not in md5sums", rel)
			}
			return nil
		})
	})

	bin := filepath.Join(root, "usr/bin/towerd")
	t.Run("binary", func(t *testing.T) {
		if got := output(t, "", nil, bin, "version"); got != "towerd "+version+"\n" {
			t.Errorf("towerd version = %q, want %q", got, "towerd "+version)
		}
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("usr/bin/towerd has an ELF interpreter: it is not static, yet the package depends on no libc")
			}
		}
	})

	t.Run("units", func(t *testing.T) {
		service := readFile(t, filepath.Join(root, "lib/systemd/system/towerd.service"))
		if !regexp.MustCompile(`(?m)^ExecStart=/usr/bin/towerd serve `).MatchString(service) {
			t.Errorf("towerd.service's ExecStart does not run /usr/bin/towerd:\n%s", service)
		}
		socket := readFile(t, filepath.Join(root, "lib/systemd/system/towerd.socket"))
		if strings.Contains(service+socket, "/usr/local/") {
			t.Errorf("the packaged units name /usr/local, where the package installs nothing")
		}
		if !strings.Contains(socket, "ListenDatagram=127.0.0.1:53") {
			t.Errorf("towerd.socket is not the repository's:\n%s", socket)
		}
	})

	t.Run("config", func(t *testing.T) {
		if got, want := readFile(t, filepath.Join(root, "etc/towerd/towerd.toml")), readFile(t, "../docs/towerd.toml"); got != want {
			t.Errorf("/etc/towerd/towerd.toml is not docs/towerd.toml")
		}
	})

	t.Run("maintainer scripts", func(t *testing.T) {
		starts := regexp.MustCompile(`(?m)^[^#\n]*\b(systemctl\b.*\s(start|enable|restart|try-restart|reload-or-restart)\b|deb-systemd-invoke\s+(start|restart)|deb-systemd-helper\s+enable|invoke-rc\.d)`)
		for _, name := range []string{"postinst", "prerm", "postrm"} {
			p := filepath.Join(ctrl, name)
			output(t, "", nil, "sh", "-n", p)
			if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o755 {
				t.Errorf("%s: %v, mode %v, want 0755", name, err, fi.Mode())
			}
			if m := starts.FindString(readFile(t, p)); m != "" {
				t.Errorf("%s starts or enables something: %q", name, m)
			}
		}
	})

	t.Run("dpkg --root", func(t *testing.T) { dpkgLifecycle(t, deb, debVersion) })
	t.Run("towerd install on a packaged node", func(t *testing.T) { debInstallOnANode(t, deb) })

	help := output(t, "", nil, "sh", "-c", `"$0" help 2>&1`, bin)
	commands := append([]string(nil), packagedCommands...)
	for _, m := range regexp.MustCompile(`(?m)^\s*(?:usage:\s+)?towerd\s+\[?([a-z][a-z0-9-]*)`).FindAllStringSubmatch(help, -1) {
		commands = appendUnique(commands, m[1])
	}

	t.Run("man pages", func(t *testing.T) {
		page, hdr := gunzip(t, filepath.Join(root, "usr/share/man/man8/towerd.8.gz"))
		if hdr.Name != "" || !hdr.ModTime.IsZero() {
			t.Errorf("towerd.8.gz keeps a name %q or time %v: not gzip -n", hdr.Name, hdr.ModTime)
		}
		for _, c := range commands {
			if !strings.Contains(page, "\n.B "+strings.ReplaceAll(c, "-", `\-`)+"\n") {
				t.Errorf("towerd(8) has no entry for the command %q", c)
			}
		}
		for _, m := range regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(output(t, "", nil, "sh", "-c", `"$0" -h 2>&1`, bin), -1) {
			if !strings.Contains(page, `\fB\-`+strings.ReplaceAll(m[1], "-", `\-`)+`\fR`) {
				t.Errorf("towerd(8) does not describe the flag -%s", m[1])
			}
		}
		conf, _ := gunzip(t, filepath.Join(root, "usr/share/man/man5/towerd.toml.5.gz"))
		for _, key := range regexp.MustCompile(`(?m)^#([a-z_]+) =`).FindAllStringSubmatch(readFile(t, "../docs/towerd.toml"), -1) {
			if !strings.Contains(conf, "#"+strings.ReplaceAll(key[1], "-", `\-`)+" =") {
				t.Errorf("towerd.toml(5) does not show the key %s", key[1])
			}
		}
		// man's own formatting, warnings on, as lintian runs it.
		for _, page := range []string{"man8/towerd.8.gz", "man5/towerd.toml.5.gz"} {
			cmd := exec.Command("man", "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", filepath.Join(root, "usr/share/man", page))
			cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8", "MANWIDTH=80")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil || stderr.Len() > 0 {
				t.Errorf("man %s: %v\n%s", page, err, stderr.String())
			}
		}
	})

	t.Run("completion", func(t *testing.T) {
		bash := filepath.Join(root, "usr/share/bash-completion/completions/towerd")
		complete := func(words ...string) []string {
			script := `source "$0"; COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); _towerd; printf '%s\n' "${COMPREPLY[@]}"`
			return strings.Fields(output(t, "", nil, "bash", append([]string{"-c", script, bash, "towerd"}, words...)...))
		}
		if got := complete(""); strings.Join(got, " ") != strings.Join(commands, " ") {
			t.Errorf("towerd <TAB> offers %v, want %v", got, commands)
		}
		if got := complete("stats", "-"); strings.Join(got, " ") != "-admin -config -control -json" {
			t.Errorf("towerd stats -<TAB> offers %v", got)
		}
		if got := complete("-con"); strings.Join(got, " ") != "-config -consul-dns -consul-http -control" {
			t.Errorf("towerd -con<TAB> offers %v", got)
		}
		if got := complete("doctor", "-"); strings.Join(got, " ") != "-admin -config -consul -json -list -root -rules -timeout" {
			t.Errorf("towerd doctor -<TAB> offers %v", got)
		}
		if got := complete("drill", "-clients", ""); len(got) != 0 {
			t.Errorf("towerd drill -clients <TAB> offers %v, want nothing (a number)", got)
		}
		zsh := filepath.Join(root, "usr/share/zsh/vendor-completions/_towerd")
		output(t, "", nil, "zsh", "-n", zsh)
		text := readFile(t, zsh)
		if !strings.HasPrefix(text, "#compdef towerd\n") {
			t.Errorf("_towerd does not start with #compdef towerd")
		}
		// _towerd with zsh's completion functions replaced by ones that
		// print what they were given: which list or which specs it chose.
		zcomplete := func(words ...string) string {
			script := `_describe() { print -r -- "describe ${(j:,:)${(P)4}}" }
_arguments() { print -rl -- "$@" }
words=("${@[2,-1]}"); CURRENT=$1; PREFIX=${words[CURRENT]}
source "$0"`
			return output(t, "", nil, "zsh", append([]string{"-fc", script, zsh, strconv.Itoa(len(words) + 1), "towerd"}, words...)...)
		}
		listed := zcomplete("")
		for _, c := range commands {
			if !regexp.MustCompile(`[ ,]` + regexp.QuoteMeta(c) + `:`).MatchString(listed) {
				t.Errorf("zsh: towerd <TAB> does not offer %q: %s", c, listed)
			}
		}
		// Each flag both ways, -flag and --flag, neither after the other.
		if got := zcomplete("stats", "-"); !strings.Contains(got, "\n(-json --json)-json[") || !strings.Contains(got, "\n(-json --json)--json[") ||
			!strings.Contains(got, "\n(-config --config)-config[") || strings.Contains(got, "-cache-size") {
			t.Errorf("zsh: towerd stats -<TAB> specs:\n%s", got)
		}
		if got := zcomplete("-config", ""); !regexp.MustCompile(`\n\(-config --config\)-config\[[^\n]*\]:file:_files\n`).MatchString(got) {
			t.Errorf("zsh: towerd -config <TAB> specs:\n%s", got)
		}
		if got := zcomplete("import-dnsmasq", ""); !strings.Contains(got, "\n1:file:_files") {
			t.Errorf("zsh: towerd import-dnsmasq <TAB> specs:\n%s", got)
		}
	})

	// Issue 25: the alert rules, their unit tests and the dashboard, as in
	// the repository, where Prometheus and Grafana can read them; the
	// packaged rules pass their packaged tests in place.
	t.Run("monitoring", func(t *testing.T) {
		dir := filepath.Join(root, "usr/share/towerd/monitoring")
		for _, name := range []string{"towerd.rules.yml", "towerd.rules.test.yml", "grafana-dashboard.json"} {
			if got, want := readFile(t, filepath.Join(dir, name)), readFile(t, filepath.Join("../monitoring", name)); got != want {
				t.Errorf("/usr/share/towerd/monitoring/%s is not monitoring/%s", name, name)
			}
		}
		if _, err := exec.LookPath("promtool"); err != nil {
			t.Skip("promtool not found (Debian package prometheus)")
		}
		if out := output(t, dir, nil, "promtool", "test", "rules", "towerd.rules.test.yml"); !strings.Contains(out, "SUCCESS") {
			t.Errorf("promtool test rules in %s:\n%s", dir, out)
		}
	})

	t.Run("docs", func(t *testing.T) {
		changelog, _ := gunzip(t, filepath.Join(root, "usr/share/doc/towerd/changelog.gz"))
		if !strings.HasPrefix(changelog, "towerd ("+debVersion+") unstable; urgency=medium\n") {
			t.Errorf("changelog.gz starts %q", strings.SplitN(changelog, "\n", 2)[0])
		}
		// The manual the man pages point to, as in the repository.
		for _, page := range []string{"README.md.gz", "docs/configuration.md.gz", "docs/operating.md.gz", "docs/alerts.md.gz"} {
			if text, _ := gunzip(t, filepath.Join(root, "usr/share/doc/towerd", page)); !strings.HasPrefix(text, "# ") {
				t.Errorf("%s does not start with a title: %.40q", page, text)
			}
		}
		copyright := readFile(t, filepath.Join(root, "usr/share/doc/towerd/copyright"))
		if !strings.Contains(copyright, "Files: *\nCopyright: Copyright (c) 2026 The towerd authors\nLicense: Expat\n") {
			t.Errorf("copyright does not give towerd's own license")
		}
		deps := regexp.MustCompile(`(?m)^\s*dep\s+(\S+)\s+(\S+)`).FindAllStringSubmatch(output(t, "", nil, "go", "version", "-m", bin), -1)
		if len(deps) == 0 {
			t.Fatal("go version -m lists no modules in the packaged binary")
		}
		for _, d := range deps {
			if !strings.Contains(copyright, "Files: "+d[1]+" "+d[2]+"\n") {
				t.Errorf("copyright has no entry for %s %s, linked into the binary", d[1], d[2])
			}
		}
	})
}

// dpkgLifecycle installs, removes and purges the package with dpkg --root
// in a scratch root with its own dpkg database; --force-script-chrootless
// runs the maintainer scripts with DPKG_ROOT set, which they honour, so
// nothing of the machine running the test is read or touched.
func dpkgLifecycle(t *testing.T, deb, debVersion string) {
	root := t.TempDir()
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "var/lib/dpkg/status"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dpkg := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
		defer cancel()
		args = append([]string{"--root=" + root, "--force-script-chrootless", "--log=" + filepath.Join(root, "dpkg.log")}, args...)
		b, err := exec.CommandContext(ctx, "dpkg", args...).CombinedOutput()
		return string(b), err
	}
	status := func() string {
		out, _ := dpkg("-s", "towerd")
		m := regexp.MustCompile(`(?m)^Status: (.*)$`).FindStringSubmatch(out)
		if m == nil {
			return "not installed"
		}
		return m[1]
	}
	if out, err := dpkg("-i", deb); err != nil {
		t.Fatalf("dpkg -i: %v\n%s", err, out)
	}
	if got := status(); got != "install ok installed" {
		t.Fatalf("after dpkg -i: %s", got)
	}
	if out, _ := dpkg("-s", "towerd"); !strings.Contains(out, "Version: "+debVersion+"\n") {
		t.Errorf("dpkg -s:\n%s", out)
	}
	for _, p := range []string{"usr/bin/towerd", "lib/systemd/system/towerd.service", "etc/towerd/towerd.toml", "usr/share/man/man8/towerd.8.gz"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("after dpkg -i: %v", err)
		}
	}
	// The control socket's operators' group exists (sysusers.d, issue 21),
	// in the root dpkg installed into.
	if group := readFile(t, filepath.Join(root, "etc/group")); !regexp.MustCompile(`(?m)^towerd:x:\d+:$`).MatchString(group) {
		t.Errorf("after dpkg -i, %s/etc/group has no towerd group:\n%s", root, group)
	}
	// Nothing was started or enabled: no wants links, no state directory.
	for _, p := range []string{"etc/systemd/system", "var/lib/towerd", "var/lib/private"} {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			t.Errorf("after dpkg -i, %s exists: the postinst enabled or started something", p)
		}
	}

	// The node's resolver is towerd and no other towerd would remain: the
	// removal is refused and the package stays.
	resolv := filepath.Join(root, "etc/resolv.conf")
	if err := os.WriteFile(resolv, []byte("# Managed by towerd\nnameserver 127.0.0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := dpkg("-r", "towerd")
	if err == nil || !strings.Contains(out, "towerd uninstall") {
		t.Errorf("dpkg -r with /etc/resolv.conf managed by towerd: %v, want a refusal naming towerd uninstall\n%s", err, out)
	}
	if got := status(); got != "deinstall ok installed" { // asked to go, still installed
		t.Errorf("after the refused removal: %s", got)
	}
	if _, err := os.Stat(filepath.Join(root, "usr/bin/towerd")); err != nil {
		t.Errorf("after the refused removal: %v", err)
	}

	// Edited config: remove keeps it, purge drops it and the saved cache.
	if err := os.Remove(resolv); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(root, "etc/towerd/towerd.toml")
	if err := os.WriteFile(conf, []byte("log_level = \"debug\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := dpkg("-r", "towerd"); err != nil {
		t.Fatalf("dpkg -r: %v\n%s", err, out)
	}
	if got := status(); got != "deinstall ok config-files" {
		t.Errorf("after dpkg -r: %s", got)
	}
	if got := readFile(t, conf); got != "log_level = \"debug\"\n" {
		t.Errorf("dpkg -r changed the edited conffile: %q", got)
	}
	if _, err := os.Stat(filepath.Join(root, "usr/bin/towerd")); err == nil {
		t.Errorf("dpkg -r left usr/bin/towerd")
	}
	cache := filepath.Join(root, "var/lib/private/towerd/cache.bin")
	if err := os.MkdirAll(filepath.Dir(cache), 0o700); err != nil {
		t.Fatal(err)
	}
	// Everything towerd saves there goes (issue 25 item 7: the Consul
	// watch set stayed): the cache, the watch set, what was set aside, a
	// save killed midway.
	for _, name := range []string{"cache.bin", "watch-set.json", "cache.bin.rejected", ".watch-set.json.1234567"} {
		if err := os.WriteFile(filepath.Join(filepath.Dir(cache), name), []byte("TOWERDC\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("private/towerd", filepath.Join(root, "var/lib/towerd")); err != nil {
		t.Fatal(err)
	}
	// systemctl enable's link to the package's socket goes with the purge;
	// one to towerd install's unit in /etc/systemd/system stays.
	ours := filepath.Join(root, "etc/systemd/system/sockets.target.wants/towerd.socket")
	theirs := filepath.Join(root, "etc/systemd/system/multi-user.target.wants/towerd.service")
	for link, target := range map[string]string{ours: "/lib/systemd/system/towerd.socket", theirs: "/etc/systemd/system/towerd.service"} {
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := dpkg("-P", "towerd"); err != nil {
		t.Fatalf("dpkg -P: %v\n%s", err, out)
	}
	if got := status(); got != "not installed" {
		t.Errorf("after dpkg -P: %s", got)
	}
	for _, p := range []string{"etc/towerd", "var/lib/towerd", "var/lib/private/towerd", "etc/systemd/system/sockets.target.wants/towerd.socket"} {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			t.Errorf("after dpkg -P, %s is still there", p)
		}
	}
	if _, err := os.Lstat(theirs); err != nil {
		t.Errorf("dpkg -P removed towerd install's enable link: %v", err)
	}
}

func appendUnique(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// TestSampleConfig: docs/towerd.toml, the package's /etc/towerd/towerd.toml,
// is accepted as it is, sets nothing (every key is commented out, so the
// defaults follow the binary), and with every key uncommented is still
// accepted and means the same, but for its example zone.
func TestSampleConfig(t *testing.T) {
	t.Parallel()
	sample := readFile(t, "../docs/towerd.toml")
	for i, line := range strings.Split(sample, "\n") {
		if regexp.MustCompile(`^\s*[a-z_]+\s*=|^\s*\[\[`).MatchString(line) {
			t.Errorf("docs/towerd.toml:%d sets a key; the sample shows defaults commented out: %q", i+1, line)
		}
	}
	uncommented := regexp.MustCompile(`(?m)^#(\[|[a-z_]+ =)`).ReplaceAllString(sample, "$1")
	path := filepath.Join(t.TempDir(), "towerd.toml")
	if err := os.WriteFile(path, []byte(uncommented), 0o644); err != nil {
		t.Fatal(err)
	}
	// -upstream gives zone "." its server, so check never reads the
	// machine's resolv.conf.
	code, asIs, errOut := runToExit(t, "check", "-config", "../docs/towerd.toml", "-upstream", "127.0.0.1:5300")
	if code != 0 {
		t.Fatalf("towerd check of docs/towerd.toml: exit %d\n%s%s", code, asIs, errOut)
	}
	code, all, errOut := runToExit(t, "check", "-config", path, "-upstream", "127.0.0.1:5300")
	if code != 0 {
		t.Fatalf("towerd check of docs/towerd.toml with every key uncommented: exit %d\n%s%s", code, all, errOut)
	}
	example := regexp.MustCompile(`(?m)^  zone corp\.example\. +-> 10\.0\.0\.53:53, 10\.0\.1\.53:53$`)
	if !example.MatchString(all) || strings.TrimSpace(example.ReplaceAllString(all, "")) != strings.TrimSpace(asIs) {
		t.Errorf("uncommenting the defaults changed the configuration:\nas is:\n%s\nuncommented:\n%s", asIs, all)
	}
}

// TestVersionRule: make's version is the git tag's, Debian's the same
// without the v, ordered as releases are; a clone without tags still gets
// a version that names the next release, not a bare hash.
func TestVersionRule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ git, deb string }{
		{"v0.1.0", "0.1.0"},
		{"v0.1.0-3-g1a2b3c4", "0.1.0+3.g1a2b3c4"},
		{"v0.1.0-3-g1a2b3c4-dirty", "0.1.0+3.g1a2b3c4.dirty"},
		{"v0.1.0~git1a2b3c4", "0.1.0~git1a2b3c4"},
	} {
		if got := output(t, "..", nil, "make", "-s", "version", "VERSION="+tc.git); got != tc.git+" "+tc.deb+"\n" {
			t.Errorf("make version VERSION=%s = %q, want %q", tc.git, got, tc.git+" "+tc.deb)
		}
	}
	ordered := []string{"0.1.0~git1a2b3c4", "0.1.0", "0.1.0+3.g1a2b3c4", "0.1.0+3.g1a2b3c4.dirty", "0.1.0+12.g0a0b0c0", "0.1.1~git1a2b3c4", "0.1.1"}
	for i := 1; i < len(ordered); i++ {
		output(t, "", nil, "dpkg", "--compare-versions", ordered[i-1], "lt", ordered[i])
	}

	clone := filepath.Join(t.TempDir(), "clone")
	output(t, "", nil, "git", "clone", "-q", "--no-tags", "--depth", "1", "file://"+mustAbs(t, ".."), clone)
	next := strings.TrimSpace(readFile(t, filepath.Join(clone, "VERSION")))
	hash := strings.TrimSpace(output(t, clone, nil, "git", "rev-parse", "--short", "HEAD"))
	want := "v" + next + "~git" + hash + " " + next + "~git" + hash + "\n"
	if got := output(t, clone, nil, "make", "-s", "version"); got != want {
		t.Errorf("make version in a clone without tags = %q, want %q", got, want)
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
