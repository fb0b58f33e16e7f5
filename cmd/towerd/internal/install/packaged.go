package install

import (
	"bytes"
	"path"
	"regexp"
	"strings"

	"github.com/towerd/towerd/systemd"
)

// Where the Debian package (cmd/towerd/dist) puts towerd, relative to the
// root. On a node that has it, install leaves the program and its units to
// dpkg: a copy in /usr/local/bin and /etc/systemd/system would override
// them and drift from them at the next upgrade.
const (
	PackagedBinaryPath = "/usr/bin/towerd"
	PackagedUnitDir    = "/lib/systemd/system"
	// ConfigDropInDir holds towerd.toml's drop-ins (towerd.d/*.toml, read
	// in name order over towerd.toml; cmd/towerd/internal/config.Load).
	ConfigDropInDir = "/etc/towerd/towerd.d"
	// ConfigDropIn is install's own drop-in: what it decided for this node
	// when towerd.toml is the package's sample. Its name sorts first, so
	// any drop-in of the operator's overrides it.
	ConfigDropIn = ConfigDropInDir + "/00-install.toml"
)

// packagedUnits reports whether the package's units are under the root:
// towerd.service in /lib/systemd/system running /usr/bin/towerd, which is
// there too. Then the package owns the program and the units.
func packagedUnits(fsys fileSystem) bool {
	service, err := fsys.ReadFile(path.Join(PackagedUnitDir, systemd.ServiceUnitName))
	if err != nil || !bytes.Contains(service, []byte("\nExecStart="+PackagedBinaryPath+" ")) {
		return false
	}
	if _, err := fsys.ReadFile(path.Join(PackagedUnitDir, systemd.SocketUnitName)); err != nil {
		return false
	}
	info, err := fsys.Lstat(PackagedBinaryPath)
	return err == nil && info.Mode().IsRegular()
}

// isSample reports whether a towerd.toml sets nothing: every line blank,
// a comment or a table header ("[cache]"), as the package's conffile ships
// (docs/towerd.toml, every key commented out at its default under its
// table). Such a file is no operator's decision, so install does not keep
// it as one; any version of the sample counts. "[[zone]]" adds a zone: a
// setting.
func isSample(data []byte) bool {
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || tableHeader.MatchString(line) {
			continue
		}
		return false
	}
	return true
}

var tableHeader = regexp.MustCompile(`^\[\s*[a-z_]+\s*\]\s*(#.*)?$`)

// configTarget is where install writes its configuration: towerd.toml, or
// its drop-in when towerd.toml is the package's sample (or, on a packaged
// node, was deleted: dpkg remembers a deleted conffile as the admin's
// choice). Writing over the sample would make it a conffile the admin
// changed, and dpkg would stop at every upgrade whose sample changed to ask
// which to keep (an unattended upgrade fails there); the drop-in leaves the
// conffile to dpkg. A drop-in install wrote before stays the target.
func (in *installer) configTarget(packaged bool) (string, error) {
	if in.m.file(ConfigDropIn) != nil {
		return ConfigDropIn, nil
	}
	if in.m.file(ConfigPath) != nil {
		return ConfigPath, nil
	}
	cur, err := look(in.fsys, ConfigPath)
	if err != nil {
		return "", err
	}
	switch {
	case cur.exists && !cur.isLink() && isSample(cur.data):
		return ConfigDropIn, nil
	case !cur.exists && packaged:
		return ConfigDropIn, nil
	}
	return ConfigPath, nil
}

// operatorDropIns lists drop-ins in towerd.d that are not install's.
func operatorDropIns(fsys fileSystem) []string {
	entries, err := fsys.ReadDir(ConfigDropInDir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		p := path.Join(ConfigDropInDir, e.Name())
		if strings.HasSuffix(e.Name(), ".toml") && p != ConfigDropIn {
			out = append(out, p)
		}
	}
	return out
}

// retire undoes, as uninstall would, a file an earlier install wrote that
// the package provides now (the copied binary and units, which would
// override the package's). A copy changed since is left with a warning.
func (in *installer) retire(name, why string) error {
	p := in.m.file(name)
	if p == nil {
		return nil
	}
	rec := *p
	if !rec.Pending {
		inTransition := rec
		inTransition.Pending = true
		if err := in.record(inTransition); err != nil {
			return err
		}
	}
	in.r.same("found", name, why)
	if err := undoFile(in.fsys, in.r, rec); err != nil {
		return err
	}
	in.m.removeFile(name)
	return in.saveManifest()
}
