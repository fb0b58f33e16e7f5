package config

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/towerd/towerd/cmd/towerd/internal/resolvconf"
)

// SystemResolvConfs are the files zone "." follows when resolv_conf is
// unset, under root, in order of preference: systemd-resolved's, then
// /etc/resolv.conf. When /etc/resolv.conf is towerd's own (towerd install
// rewrote it to name towerd), following it would leave "." only towerd,
// which is dropped as a loop, so the files install would have followed
// take its place, and note says so and names the fix (a node whose
// towerd.toml lost install's resolv_conf: the package's sample put back, a
// hand-written config without it).
func SystemResolvConfs(root string) (paths []string, note string) {
	paths = resolvconf.SystemPaths(root)
	data, err := resolvconf.ReadFile(paths[1])
	if err != nil || !bytes.HasPrefix(data, []byte(resolvconf.ManagedMarker)) {
		return paths, ""
	}
	paths = paths[:1]
	for _, p := range resolvconf.InstallFollowed {
		paths = append(paths, filepath.Join(root, p))
	}
	note = "resolv_conf is unset and /etc/resolv.conf is towerd's own (towerd install wrote it: it names only towerd); " +
		"zone \".\" follows the first of " + strings.Join(paths, ", ") + " that has servers instead; " +
		"set resolv_conf to the file the node's DHCP client or network manager keeps current (towerd install writes it into " +
		"/etc/towerd/towerd.d/00-install.toml), or servers for zone \".\""
	return paths, note
}

// readSystemResolvConf reads the first of SystemResolvConfs that exists;
// when /etc/resolv.conf is towerd's own, the first that exists and is not
// empty, and none is an error that names the fix rather than a zone "."
// left waiting for servers with no file that could bring them.
func readSystemResolvConf(root string) (resolvconf.Conf, string, error) {
	paths, note := SystemResolvConfs(root)
	if note == "" {
		return resolvconf.ReadSystem(root)
	}
	for _, p := range paths {
		data, err := resolvconf.ReadFile(p)
		if err != nil || len(bytes.TrimSpace(data)) == 0 {
			continue
		}
		rc, err := resolvconf.Parse(bytes.NewReader(data))
		if err != nil {
			return rc, p, fmt.Errorf("parsing %s: %w", p, err)
		}
		return rc, p, nil
	}
	return resolvconf.Conf{}, "", fmt.Errorf("%s; none of those files has servers", note)
}
