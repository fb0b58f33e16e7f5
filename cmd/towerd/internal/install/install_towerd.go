package install

// towerd's own files: its config (towerd.toml or its drop-in), its binary,
// and the towerd.socket and towerd.service units (systemd.Units, rendered
// from the copies embedded in the binary).

import (
	"path"
	"path/filepath"
	"strings"

	"github.com/towerd/towerd/systemd"
)

// writeConfig writes towerd.toml only where there is none or where it is
// still the one install wrote: an operator's config always wins.
func (in *installer) writeConfig(opts InstallOptions, p nodePlan) error {
	if p.keepConfig {
		msg := "an existing config wins"
		if rec := in.m.file(p.configPath); rec != nil {
			msg = "changed since towerd install wrote it"
		}
		switch {
		case p.manager.Follow != "":
			msg += "; zone \".\" should follow " + p.manager.Follow + " (resolv_conf)"
		}
		if opts.Docker {
			msg += "; add " + p.docker.Allow + " to allow there for Docker's containers"
			in.r.warn("%s is kept: add %q to its allow list (with the loopback networks), or towerd refuses Docker's containers", p.configPath, p.docker.Allow)
		}
		in.r.same("kept", p.configPath, msg)
		return nil
	}
	c := InstallConfig{Listen: towerdListenAddress + ":53", Servers: p.found.servers, Source: p.found.source, ResolvConf: p.found.follow,
		DropIn: p.configPath == ConfigDropIn}
	var detail string
	switch {
	case opts.Imported != nil:
		detail = "imported from " + opts.Imported.Source
		if !opts.Imported.RootServers {
			if c.ResolvConf != "" {
				detail += "; zone \".\" follows " + c.ResolvConf
			} else {
				detail += "; zone \".\" -> " + strings.Join(c.Servers, ", ") + " (from " + c.Source + ")"
			}
		}
	case c.ResolvConf != "":
		detail = "zone \".\" follows " + c.ResolvConf + " (resolv_conf), which " + string(p.manager.Manager) + " keeps current"
	default:
		detail = "zone \".\" -> " + strings.Join(c.Servers, ", ") + " (from " + c.Source + ")"
	}
	if opts.Docker {
		c.ExtraListen = []string{p.docker.Listen}
		c.Allow = []string{"127.0.0.0/8", "::1/128", p.docker.Allow}
		detail += "; listen adds " + p.docker.Listen + ", allow adds " + p.docker.Allow
	}
	if c.DropIn {
		detail += "; over " + ConfigPath + ", which sets nothing (the package's sample) and stays dpkg's"
		for _, o := range operatorDropIns(in.fsys) {
			in.r.same("found", o, "read after "+ConfigDropIn+": what it sets wins")
		}
	}
	return in.write(p.configPath, opts.RenderConfig(c), 0o644, detail, "", nil)
}

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
		return in.writeOwned(SysusersPath, []byte(systemd.Sysusers), 0o644, "the control socket's operators' group, towerd")
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

// sysusersNext is install's next step that creates the group now rather
// than at the next boot: towerd.socket gives the control socket to the
// group once it exists, and keeps it root's until then.
const sysusersNext = "systemd-sysusers " + systemd.SysusersName + "   # the control socket's group, towerd"
