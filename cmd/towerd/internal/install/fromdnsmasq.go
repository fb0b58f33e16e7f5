package install

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/towerd/towerd/cmd/towerd/internal/base"
	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/cmd/towerd/internal/dnsmasqimport"
	"github.com/towerd/towerd/cmd/towerd/internal/nodefs"
)

// importForInstall reads the node's dnsmasq configuration for install
// --from-dnsmasq: path (a file or a conf-dir, as the node sees it), else
// what dnsmasq reads there (dnsmasqimport.ReadNode), each file read named on
// stderr. The import must make a valid towerd.toml before install changes
// anything; what it does not carry over is listed on stderr, as
// import-dnsmasq does.
func importForInstall(root, path string, stderr io.Writer) (*Import, int) {
	n, err := nodefs.Open(root)
	if err != nil {
		fmt.Fprintf(stderr, "towerd install: --from-dnsmasq: %v\n", err)
		return nil, base.ExitFail
	}
	defer n.Close()
	var read dnsmasqimport.Reading
	if path == "" {
		read, err = dnsmasqimport.ReadNode(n)
	} else {
		read, err = dnsmasqimport.Read(n, []string{path})
	}
	for _, f := range read.Files {
		fmt.Fprintf(stderr, "towerd install: --from-dnsmasq: read %s: %s\n", f.Path, f.Why)
	}
	switch {
	case errors.Is(err, dnsmasqimport.ErrNoConfig):
		fmt.Fprintf(stderr, "towerd install: --from-dnsmasq: %v; name it: --from-dnsmasq FILE\n", err)
		return nil, base.ExitConfig
	case err != nil:
		fmt.Fprintf(stderr, "towerd install: --from-dnsmasq: %v\n", err)
		return nil, base.ExitFail
	}
	// The source is what was named, or every file dnsmasq reads.
	imp := &Import{Source: strings.Join(read.Paths(), ", "), Directives: read.Directives}
	if path != "" {
		imp.Source = path
	}
	// The import, completed the way install will, must be a config towerd
	// starts with.
	check := renderConfig(config.InstallSettings{Listen: []string{"127.0.0.1:53"}, ResolvConf: "/dev/null"}, imp)
	cfg := config.DefaultConfig()
	if err := config.Decode(check, "(imported)", &cfg); err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		fmt.Fprintf(stderr, "towerd install: --from-dnsmasq: the imported configuration is not valid: %v\n", err)
		return nil, base.ExitFail
	}
	for _, n := range dnsmasqimport.Import(imp.Source, imp.Directives).Notes {
		fmt.Fprintln(stderr, n)
	}
	return imp, base.ExitOK
}
