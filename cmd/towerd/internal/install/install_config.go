package install

// towerd.toml, or its drop-in over the package's sample: what install
// decided for this node (config.InstallSettings), alone or completing a
// dnsmasq import.

import (
	"strings"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/cmd/towerd/internal/dnsmasqimport"
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
	s := in.settings(opts, p)
	var detail string
	switch {
	case opts.Import != nil:
		detail = "imported from dnsmasq's " + opts.Import.Source
		if !opts.Import.namesRootServers() {
			if s.ResolvConf != "" {
				detail += "; zone \".\" follows " + s.ResolvConf
			} else {
				detail += "; zone \".\" -> " + strings.Join(s.Servers, ", ") + " (from " + s.Source + ")"
			}
		}
	case s.ResolvConf != "":
		detail = "zone \".\" follows " + s.ResolvConf + " (resolv_conf), which " + string(p.manager.Manager) + " keeps current"
	default:
		detail = "zone \".\" -> " + strings.Join(s.Servers, ", ") + " (from " + s.Source + ")"
	}
	if opts.Docker {
		detail += "; listen adds " + p.docker.Listen + ", allow adds " + p.docker.Allow
	}
	if s.DropIn {
		detail += "; over " + ConfigPath + ", which sets nothing (the package's sample) and stays dpkg's"
		for _, o := range operatorDropIns(in.fsys) {
			in.r.same("found", o, "read after "+ConfigDropIn+": what it sets wins")
		}
	}
	return in.write(p.configPath, renderConfig(s, opts.Import), 0o644, detail, "", nil)
}

// settings are what install decided for towerd.toml on this node.
func (in *installer) settings(opts InstallOptions, p nodePlan) config.InstallSettings {
	s := config.InstallSettings{
		Listen: []string{towerdListenAddress + ":53"}, Servers: p.found.servers, Source: p.found.source,
		ResolvConf: p.found.follow, DropIn: p.configPath == ConfigDropIn,
	}
	if opts.Docker {
		s.Listen = append(s.Listen, p.docker.Listen)
		s.Allow = []string{"127.0.0.0/8", "::1/128", p.docker.Allow}
	}
	return s
}

// renderConfig is the towerd.toml of settings s, alone or completing imp.
func renderConfig(s config.InstallSettings, imp *Import) []byte {
	if imp == nil {
		return s.File().Render()
	}
	return s.Complete(imp.file()).Render()
}

// file maps the import (dnsmasqimport.Import, which reads no file) to
// towerd.toml's keys and zones, its header naming install.
func (imp *Import) file() config.File {
	f := dnsmasqimport.Import(imp.Source, imp.Directives).File
	f.Header[0] = "towerd configuration imported from " + imp.Source + " by `towerd install --from-dnsmasq`."
	return f
}

// namesRootServers reports whether the import names zone "."'s servers
// itself, so install needs to find none. False for no import.
func (imp *Import) namesRootServers() bool {
	if imp == nil {
		return false
	}
	for _, z := range imp.file().Zones {
		if z.Name == "." && len(z.Servers) > 0 {
			return true
		}
	}
	return false
}
