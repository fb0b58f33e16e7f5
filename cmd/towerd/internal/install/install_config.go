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
		switch rec := in.m.file(p.configPath); {
		case p.keepWhy != "":
			msg = p.keepWhy + ": kept as it is; to change what install decides, edit it, or run install --from-dnsmasq again"
		case rec != nil:
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
	rec := in.m.file(p.configPath)
	var prev *configRecord
	if rec != nil {
		prev = rec.Config
	}
	detail := zoneDetail(s, p)
	switch {
	case opts.Import != nil && prev != nil && prev.Import != nil:
		detail = "imported again from dnsmasq's " + opts.Import.Source + ", in place of the import from " + prev.Import.Source + "; " + detail
	case opts.Import != nil:
		detail = "imported from dnsmasq's " + opts.Import.Source + "; " + detail
	case p.imp != nil:
		// Install's own settings changed (--upstream, --docker, what the
		// node's DHCP client writes): the earlier import is rendered
		// again with them, and nothing it carried over is lost.
		detail = "merged: what an earlier install imported from dnsmasq's " + p.imp.Source + " is kept; " + detail
		if prev != nil {
			detail += " (was: " + zoneDetail(prev.Settings, p) + ")"
		}
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
	in.config = &configRecord{Settings: s, Import: p.imp}
	if p.imp != nil && opts.Import == nil {
		in.unchanged = "holds what an earlier install imported from dnsmasq's " + p.imp.Source + ", and install's settings in it still hold"
	}
	defer func() { in.config, in.unchanged = nil, "" }()
	return in.write(p.configPath, renderConfig(s, p.imp), 0o644, detail, "", nil)
}

// zoneDetail says where zone "." gets its servers under settings s.
func zoneDetail(s config.InstallSettings, p nodePlan) string {
	switch {
	case p.imp.namesRootServers():
		return "zone \".\" as the import names it"
	case s.ResolvConf != "":
		return "zone \".\" follows " + s.ResolvConf + " (resolv_conf), which " + string(p.manager.Manager) + " keeps current"
	}
	return "zone \".\" -> " + strings.Join(s.Servers, ", ") + " (from " + s.Source + ")"
}

// importedBy ends the first line of every towerd.toml install imported
// (Import.file): how an older towerd's import, whose record does not keep
// the directives, is recognised.
const importedBy = "by `towerd install --from-dnsmasq`."

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
	f.Header[0] = "towerd configuration imported from " + imp.Source + " " + importedBy
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
