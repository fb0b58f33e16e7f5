// Command dist lays out the file tree of towerd's Debian package from a
// built towerd binary: the binary, the systemd units rendered by the same
// code `towerd install` uses (so ExecStart names the packaged binary), the
// sample configuration as a conffile, the README and the manual of docs/,
// the man page written from the binary's subcommand table (`towerd help
// -json`), the binary's own shell completions (`towerd completion
// bash|zsh`), the sysusers.d file of the control socket's group, the
// Prometheus rules and Grafana dashboard of monitoring/, the copyright file
// of everything linked into it, and the DEBIAN control files. `make deb`
// runs it and packs
// the tree with dpkg-deb; no debhelper is needed.
//
//	go run ./cmd/towerd/dist -binary bin/deb/towerd -version 0.1.0 -arch amd64 -out bin/deb/root
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/towerd/towerd/systemd"
)

// Where the package puts towerd. /usr/bin, not /usr/sbin: besides the
// daemon, the binary is the tool every user of the node reaches for
// (towerd stats, lookup, check, drill), and /usr/sbin is not on their PATH;
// Debian's own Go daemons (prometheus, prometheus-node-exporter) do the same.
const (
	binaryPath = "/usr/bin/towerd"
	unitDir    = "/lib/systemd/system"
	// sysusersDir is where packages put sysusers.d(5) files.
	sysusersDir = "/usr/lib/sysusers.d"
	configPath  = "/etc/towerd/towerd.toml"
	docDir      = "/usr/share/doc/towerd"
	// monitoringDir holds the alert rules, their unit tests and the
	// dashboard, for Prometheus and Grafana to read in place: data, not
	// documentation, so not under /usr/share/doc, which minimal images
	// leave out (dpkg path-exclude).
	monitoringDir = "/usr/share/towerd/monitoring"
)

// monitoringFiles are the files of monitoring/ the package ships, as they
// are: the rule file's unit tests name it by its base name, so the two
// stay side by side.
var monitoringFiles = []string{"towerd.rules.yml", "towerd.rules.test.yml", "grafana-dashboard.json"}

func main() {
	var o options
	flag.StringVar(&o.binary, "binary", "bin/deb/towerd", "the towerd binary to package (built with CGO_ENABLED=0)")
	flag.StringVar(&o.out, "out", "bin/deb/root", "directory to lay the package tree out in (emptied first)")
	flag.StringVar(&o.version, "version", "", "Debian version of the package (the git tag without the v)")
	flag.StringVar(&o.arch, "arch", "", "Debian architecture (amd64, arm64, ...)")
	flag.StringVar(&o.maintainer, "maintainer", "towerd maintainers <towerd@users.noreply.github.com>", "Maintainer field and changelog signature")
	flag.StringVar(&o.sampleConfig, "config", "docs/towerd.toml", "sample configuration installed as "+configPath)
	flag.StringVar(&o.readme, "readme", "README.md", "README installed in "+docDir)
	flag.StringVar(&o.docs, "docs", "docs", "directory whose *.md files are installed in "+docDir+"/docs (the manual the README points to)")
	flag.StringVar(&o.monitoring, "monitoring", "monitoring", "directory holding the alert rules, their tests and the dashboard installed in "+monitoringDir)
	flag.StringVar(&o.license, "license", "LICENSE", "towerd's own license")
	flag.StringVar(&o.scripts, "scripts", "cmd/towerd/dist/debian", "directory holding postinst, prerm, postrm and lintian-overrides")
	flag.Int64Var(&o.epoch, "source-date-epoch", 0, "time stamp of every file and of the changelog (default $SOURCE_DATE_EPOCH, else now)")
	flag.Parse()
	if o.version == "" || o.arch == "" {
		fmt.Fprintln(os.Stderr, "dist: -version and -arch are required")
		os.Exit(2)
	}
	if o.epoch == 0 {
		o.epoch = sourceDateEpoch()
	}
	if err := build(o); err != nil {
		fmt.Fprintln(os.Stderr, "dist:", err)
		os.Exit(1)
	}
}

type options struct {
	binary, out, version, arch, maintainer string
	sampleConfig, readme, docs, monitoring string
	license, scripts                       string
	epoch                                  int64
}

func sourceDateEpoch() int64 {
	var t int64
	if _, err := fmt.Sscan(os.Getenv("SOURCE_DATE_EPOCH"), &t); err == nil && t > 0 {
		return t
	}
	return time.Now().Unix()
}

func build(o options) error {
	if err := os.RemoveAll(o.out); err != nil {
		return err
	}
	t := &tree{root: o.out}
	stamp := time.Unix(o.epoch, 0).UTC()

	bin, err := os.ReadFile(o.binary)
	if err != nil {
		return err
	}
	t.add(binaryPath, bin, 0o755)
	if err := addUnits(t); err != nil {
		return err
	}
	// The operators' group of the control socket (the postinst creates it).
	t.add(sysusersDir+"/"+systemd.SysusersName, []byte(systemd.Sysusers), 0o644)

	sample, err := os.ReadFile(o.sampleConfig)
	if err != nil {
		return err
	}
	t.add(configPath, sample, 0o644)

	cmds, err := readCLI(o.binary)
	if err != nil {
		return err
	}
	date := stamp.Format("2006-01-02")
	t.add("/usr/share/man/man8/towerd.8.gz", gz([]byte(towerdManPage(cmds, date, o.version))), 0o644)
	t.add("/usr/share/man/man5/towerd.toml.5.gz", gz([]byte(configManPage(string(sample), date, o.version))), 0o644)
	// The completions are the binary's own `towerd completion`, as a user
	// would install them by hand.
	for _, c := range [][2]string{
		{"bash", "/usr/share/bash-completion/completions/towerd"},
		{"zsh", "/usr/share/zsh/vendor-completions/_towerd"},
	} {
		script, err := runBinary(o.binary, "completion", c[0])
		if err != nil {
			return err
		}
		t.add(c[1], script, 0o644)
	}

	readme, err := os.ReadFile(o.readme)
	if err != nil {
		return err
	}
	t.add(docDir+"/README.md.gz", gz(readme), 0o644)
	// The manual beside it, as the README's links name it (docs/NAME.md):
	// the man pages point there for what a key or a metric means.
	manual, err := filepath.Glob(filepath.Join(o.docs, "*.md"))
	if err != nil {
		return err
	}
	if len(manual) == 0 {
		return fmt.Errorf("no *.md in %s: the manual the man pages point to", o.docs)
	}
	for _, path := range manual {
		page, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		t.add(docDir+"/docs/"+filepath.Base(path)+".gz", gz(page), 0o644)
	}
	for _, name := range monitoringFiles {
		data, err := os.ReadFile(filepath.Join(o.monitoring, name))
		if err != nil {
			return err
		}
		t.add(monitoringDir+"/"+name, data, 0o644)
	}
	// towerd is a native package (its packaging lives in its own
	// repository; the version has no Debian revision), whose changelog is
	// changelog.gz: Policy 12.7, lintian's wrong-name-for-changelog-of-native-package.
	t.add(docDir+"/changelog.gz", gz([]byte(changelog(o.version, o.maintainer, stamp))), 0o644)
	copyright, err := copyrightFile(o.binary, o.license)
	if err != nil {
		return err
	}
	t.add(docDir+"/copyright", []byte(copyright), 0o644)
	overrides, err := os.ReadFile(filepath.Join(o.scripts, "lintian-overrides"))
	if err != nil {
		return err
	}
	t.add("/usr/share/lintian/overrides/towerd", overrides, 0o644)

	for _, name := range []string{"postinst", "prerm", "postrm"} {
		script, err := os.ReadFile(filepath.Join(o.scripts, name))
		if err != nil {
			return err
		}
		t.addControl(name, script, 0o755)
	}
	t.addControl("conffiles", []byte(configPath+"\n"), 0o644)
	t.addControl("md5sums", t.md5sums(), 0o644)
	t.addControl("control", []byte(control(o, t.installedSizeKiB())), 0o644)
	return t.write(stamp)
}
