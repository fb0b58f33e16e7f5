package install

// towerd's own program: its binary and the towerd.socket and
// towerd.service units (systemd.Units, rendered from the copies embedded in
// the binary), or the Debian package's.

import (
	"path"
	"path/filepath"

	"github.com/towerd/towerd/systemd"
)

// writeProgram copies the binary and writes the units, unless towerd's
// Debian package provides them: then copies from an earlier install, which
// would override the package's units and drift from them at its next
// upgrade, are undone instead.
func (in *installer) writeProgram(opts InstallOptions, p nodePlan, binary []byte, units []systemd.Unit) error {
	if !p.packaged {
		if err := in.writeOwned(systemd.DefaultBinaryPath, binary, 0o755, "copy of "+opts.Binary); err != nil {
			return err
		}
		for _, u := range units {
			if err := in.writeOwned(path.Join(systemd.UnitDir, u.Name), []byte(u.Content), 0o644, ""); err != nil {
				return err
			}
		}
		return in.writeOwned(SysusersPath, []byte(systemd.Sysusers), 0o644, "user and group towerd: the service's user, the control socket's operators")
	}
	detail := "towerd's Debian package: its program and its units in " + PackagedUnitDir + " are used as they are, nothing is copied"
	root := opts.Root
	if root == "" {
		root = "/"
	}
	if filepath.Join(root, PackagedBinaryPath) != opts.Binary {
		detail += " (the units run " + PackagedBinaryPath + ", not this program, " + opts.Binary + ")"
	}
	in.r.same("found", PackagedBinaryPath, detail)
	for _, name := range []string{systemd.DefaultBinaryPath, path.Join(systemd.UnitDir, systemd.SocketUnitName),
		path.Join(systemd.UnitDir, systemd.ServiceUnitName), SysusersPath} {
		if in.m.file(name) == nil {
			if _, err := in.fsys.Lstat(name); err == nil && name != systemd.DefaultBinaryPath {
				in.r.warn("%s is not towerd install's and overrides the package's unit in %s: remove it (systemctl daemon-reload after) unless you mean it to",
					name, PackagedUnitDir)
			}
			continue
		}
		if err := in.retire(name, "an earlier install's copy, which would override the package's"); err != nil {
			return err
		}
	}
	return nil
}

// SysusersPath is where install puts the sysusers.d file of the control
// socket's group (systemd.Sysusers): the directory for the
// administrator's own, as /etc/systemd/system is for units.
const SysusersPath = "/etc/sysusers.d/" + systemd.SysusersName

// sysusersNext is install's next step that creates user and group towerd
// now rather than at the next boot: towerd.service runs as the user (it
// fails with 217/USER without it), and towerd.socket gives the control
// socket to the group.
const sysusersNext = "systemd-sysusers " + systemd.SysusersName + "   # user and group towerd, before towerd starts"
