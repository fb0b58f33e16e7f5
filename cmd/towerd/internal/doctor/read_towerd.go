package doctor

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/miekg/dns"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/cmd/towerd/internal/install"
	"github.com/towerd/towerd/cmd/towerd/internal/nodefs"
	"github.com/towerd/towerd/cmd/towerd/internal/resolvconf"
	"github.com/towerd/towerd/systemd"
	"github.com/towerd/towerd/upstream"
)

// Where a towerd shows it is installed: install's program and units, the
// Debian package's, and the config file.
var towerdPaths = []string{systemd.DefaultBinaryPath, install.PackagedBinaryPath,
	path.Join(systemd.UnitDir, systemd.ServiceUnitName), path.Join(install.PackagedUnitDir, systemd.ServiceUnitName)}

// socketWants is the link `systemctl enable towerd.socket` makes.
var socketWants = path.Join(systemd.UnitDir, "sockets.target.wants", systemd.SocketUnitName)

// readTowerdFiles reads towerd's config, units and state directory.
func readTowerdFiles(nr *nodefs.Root, n *Node, configPath string, mustExist bool) {
	t := &n.Towerd
	t.ConfigPath = configPath
	for _, p := range append(slices.Clone(towerdPaths), configPath) {
		t.Installed = t.Installed || exists(nr, p)
	}
	files, err := readConfigFiles(nr, configPath, mustExist)
	if err == nil {
		t.Config, err = config.Parse(files)
	}
	if err == nil {
		err = validate(t.Config, files, configPath)
	}
	t.ConfigErr = err
	if err != nil {
		t.Config = config.DefaultConfig()
	}
	t.SocketEnabled = exists(nr, socketWants)
	service := unitFiles(nr, systemd.ServiceUnitName)
	for _, p := range service {
		data, err := nr.ReadFile(p)
		if err != nil {
			continue
		}
		for _, kv := range iniValues(data, "Service") {
			switch kv[0] {
			case "StateDirectory":
				t.StateDirectory = slices.Contains(strings.Fields(kv[1]), "towerd")
			case "LoadCredential":
				if id, file, ok := strings.Cut(kv[1], ":"); ok && id == systemd.ConsulTokenCredential {
					t.TokenSource = file
				}
			}
		}
	}
	t.StateDir = readStateDir(nr, t.Config.StateDir)
	t.RootZone = readRootZone(nr, t.Config)
	t.ConsulToken, t.TokenSource = consulToken(nr, t.Config.Consul, t.TokenSource)
}

// readConfigFiles reads the config file and its drop-ins (towerd.d/*.toml
// beside it, in name order), as config.Load does, each with a bound.
func readConfigFiles(nr *nodefs.Root, configPath string, mustExist bool) ([]config.Source, error) {
	var files []config.Source
	data, err := nr.ReadFileMax(configPath, maxConfigFile)
	switch {
	case err == nil:
		files = append(files, config.Source{Path: configPath, Data: data})
	case errors.Is(err, fs.ErrNotExist) && !mustExist:
	default:
		return nil, fmt.Errorf("reading %s: %w", configPath, err)
	}
	dir := path.Join(path.Dir(configPath), config.DropInDirName)
	for _, e := range readDir(nr, dir) {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") || !strings.HasSuffix(e.Name(), ".toml") {
			continue
		}
		p := path.Join(dir, e.Name())
		data, err := nr.ReadFileMax(p, maxConfigFile)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		files = append(files, config.Source{Path: p, Data: data})
	}
	return files, nil
}

// validate runs config.Validate as Load does. Validate reads
// consul.token_file and consul.tls_ca_file on this machine, whole and
// outside the root; doctor reads them itself (consulToken), so Validate
// is handed /dev/null, which is always there and always empty, in their
// place.
func validate(cfg config.Config, files []config.Source, configPath string) error {
	if cfg.Consul.TokenFile != "" {
		cfg.Consul.TokenFile = "/dev/null"
	}
	if cfg.Consul.TLSCAFile != "" {
		cfg.Consul.TLSCAFile = "/dev/null"
	}
	return config.Attribute(cfg.Validate(), files, configPath)
}

// unitFiles are a unit's file (the administrator's, else the package's)
// and its drop-ins, in the order systemd reads them.
func unitFiles(nr *nodefs.Root, unit string) []string {
	var out []string
	for _, dir := range []string{systemd.UnitDir, install.PackagedUnitDir, "/usr/lib/systemd/system"} {
		if p := path.Join(dir, unit); exists(nr, p) {
			out = append(out, p)
			break
		}
	}
	dropIns := path.Join(systemd.UnitDir, unit+".d")
	for _, e := range readDir(nr, dropIns) {
		if strings.HasSuffix(e.Name(), ".conf") {
			out = append(out, path.Join(dropIns, e.Name()))
		}
	}
	return out
}

func readStateDir(nr *nodefs.Root, dir string) stateDir {
	s := stateDir{Path: dir}
	if dir == "" {
		return s
	}
	s.Info, s.Err = nr.Lstat(dir)
	// A DynamicUser= service's StateDirectory= (an older towerd's unit, or
	// a drop-in) is a link systemd makes, /var/lib/towerd -> private/towerd:
	// what counts is where it leads.
	for hops := 0; s.Err == nil && s.Info.Mode()&fs.ModeSymlink != 0; hops++ {
		target, err := nr.Readlink(dir)
		if err != nil || hops == 8 {
			s.Info, s.Err = nil, fmt.Errorf("%s: a symlink that does not resolve", s.Path)
			break
		}
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(dir), target)
		}
		dir = target
		s.Info, s.Err = nr.Lstat(dir)
	}
	return s
}

// readRootZone finds zone "."'s servers the way config.ForwardZones does
// (configured servers; else resolv_conf; else resolved's file, else
// /etc/resolv.conf, or, when that is towerd's own, the files install
// follows), reading under the root with a bound, and leaves out towerd's
// own listen addresses.
func readRootZone(nr *nodefs.Root, cfg config.Config) rootZone {
	var z rootZone
	var servers []string
	for _, zone := range cfg.MergedZones() {
		if zone.Name == "." && len(zone.Servers) > 0 {
			z.Configured, servers = true, zone.Servers
		}
	}
	if !z.Configured {
		candidates, skipEmpty := []string{cfg.ResolvConf}, false
		if cfg.ResolvConf == "" {
			candidates = []string{install.ResolvedUpstreams, install.ResolvConfPath}
			if data, err := nr.ReadFile(install.ResolvConfPath); err == nil && bytes.HasPrefix(data, []byte(resolvconf.ManagedMarker)) {
				candidates, skipEmpty = append([]string{install.ResolvedUpstreams}, resolvconf.InstallFollowed...), true
			}
		}
		z.File, z.Err = candidates[len(candidates)-1], fs.ErrNotExist
		for _, p := range candidates {
			data, err := nr.ReadFile(p)
			if errors.Is(err, fs.ErrNotExist) || (err == nil && skipEmpty && len(bytes.TrimSpace(data)) == 0) {
				continue
			}
			z.File, z.Err = p, err
			if err == nil {
				servers = nodeFile{Data: data}.resolvConf().Nameservers
			}
			break
		}
	}
	for _, s := range servers {
		norm, err := upstream.NormalizeAddress(s)
		if err != nil {
			continue // Validate names it
		}
		if len(resolvconf.WithoutAddresses([]string{norm}, cfg.Listen)) == 0 {
			z.Dropped = append(z.Dropped, norm)
		} else {
			z.Servers = append(z.Servers, norm)
		}
	}
	return z
}

// consulZoneServers are the servers of the zone Consul's names go to.
func consulZoneServers(cfg config.Config) []string {
	domain := dns.CanonicalName(cfg.Consul.Domain)
	if cfg.Consul.Domain == "" {
		domain = "consul."
	}
	for _, z := range cfg.MergedZones() {
		if z.Name == domain {
			return z.Servers
		}
	}
	return nil
}

// maxTokenFile bounds the Consul token file: a token is a UUID.
const maxTokenFile = 4096

// consulToken is the token towerd's watch sends: consul.token, else the
// file consul.token_file names (its ${CREDENTIALS_DIRECTORY} being the
// LoadCredential= source in towerd.service's drop-ins, by default
// /etc/towerd/consul-token), read under the root, else CONSUL_HTTP_TOKEN.
func consulToken(nr *nodefs.Root, c config.ConsulConfig, credentialSource string) (token, source string) {
	if c.Token != "" {
		return c.Token, "consul.token"
	}
	file := c.TokenFile
	if file == "" {
		// As the watch does, through the API client's own fallback.
		if tok := os.Getenv(api.HTTPTokenEnvName); tok != "" {
			return tok, api.HTTPTokenEnvName
		}
		return "", ""
	}
	for _, v := range []string{"${CREDENTIALS_DIRECTORY}/", "$CREDENTIALS_DIRECTORY/"} {
		if id, ok := strings.CutPrefix(file, v); ok {
			// Inside towerd.service the variable names a copy that
			// systemd made of the LoadCredential= source: read that.
			switch {
			case id == systemd.ConsulTokenCredential && credentialSource != "":
				file = credentialSource
			case id == systemd.ConsulTokenCredential:
				file = systemd.ConsulTokenPath
			default:
				return "", file + " (a credential towerd.service's drop-ins do not load)"
			}
		}
	}
	data, err := nr.ReadFileMax(file, maxTokenFile)
	if err != nil {
		return "", file + " (unreadable: " + err.Error() + ")"
	}
	return strings.TrimSpace(string(data)), file
}
