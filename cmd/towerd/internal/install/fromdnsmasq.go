package install

import (
	"fmt"
	"io"
	"strings"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/cmd/towerd/internal/dnsmasqimport"
	"github.com/towerd/towerd/cmd/towerd/internal/nodefs"
)

// importForInstall reads the node's dnsmasq configuration for install
// --from-dnsmasq: path (a file or a conf-dir, as the node sees it), else
// the files dnsmasq reads there (DetectDnsmasq). The import must make a
// valid towerd.toml before install changes anything; what it does not
// carry over is listed on stderr, as import-dnsmasq does.
func importForInstall(root, path string, stderr io.Writer) (config.File, *ImportedConfig, int) {
	paths := []string{path}
	if path == "" {
		n, err := nodefs.Open(root)
		if err != nil {
			fmt.Fprintf(stderr, "towerd install: --from-dnsmasq: %v\n", err)
			return config.File{}, nil, exitFail
		}
		paths = DetectDnsmasq(n).ConfigFiles
		n.Close()
		if len(paths) == 0 {
			fmt.Fprintln(stderr, "towerd install: --from-dnsmasq: no dnsmasq configuration found (/etc/dnsmasq.conf, /etc/dnsmasq.d); name it: --from-dnsmasq FILE")
			return config.File{}, nil, exitConfig
		}
	}
	dirs, err := dnsmasqimport.ReadUnder(root, paths)
	if err != nil {
		fmt.Fprintf(stderr, "towerd install: --from-dnsmasq: %v\n", err)
		return config.File{}, nil, exitFail
	}
	source := "dnsmasq's " + strings.Join(paths, ", ")
	im := dnsmasqimport.Import(strings.Join(paths, ", "), dirs)
	im.File.Header[0] = "towerd configuration imported from " + strings.Join(paths, ", ") + " by `towerd install --from-dnsmasq`."
	info := &ImportedConfig{Source: source}
	for _, z := range im.File.Zones {
		if z.Name == "." && len(z.Servers) > 0 {
			info.RootServers = true
		}
	}
	// The import, completed the way install will, must be a config towerd
	// starts with.
	check := config.InstallSettings{Listen: []string{"127.0.0.1:53"}, ResolvConf: "/dev/null"}.Complete(im.File).Render()
	cfg := config.DefaultConfig()
	if err := config.Decode(check, "(imported)", &cfg); err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		fmt.Fprintf(stderr, "towerd install: --from-dnsmasq: the imported configuration is not valid: %v\n", err)
		return config.File{}, nil, exitFail
	}
	for _, n := range im.Notes {
		fmt.Fprintln(stderr, n)
	}
	return im.File, info, exitOK
}
