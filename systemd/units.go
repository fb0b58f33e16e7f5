package systemd

// towerd's unit files, towerd.socket and towerd.service, and the
// sysusers.d file of its operators' group, kept beside this file and
// embedded in the binary, for `towerd install` to write and for the Debian
// package (cmd/towerd/dist) to ship.

import (
	_ "embed" // the unit files ship inside the binary, for `towerd install`
	"fmt"
	"strings"
)

// The unit files as kept in the repository; towerd install writes them.
var (
	//go:embed towerd.socket
	socketUnit string
	//go:embed towerd.service
	serviceUnit string
)

// Sysusers is the sysusers.d(5) file that creates towerd's operators'
// group, whose members may use the control socket (issue 21). The package
// ships it as /usr/lib/sysusers.d/towerd.conf, `towerd install` as
// /etc/sysusers.d/towerd.conf; systemd-sysusers reads it at every boot and
// when the package is configured.
//
//go:embed towerd.sysusers
var Sysusers string

// SysusersName is the sysusers.d file's name.
const SysusersName = "towerd.conf"

// Where install puts things, relative to the root. Units go to
// /etc/systemd/system, the directory for units the administrator (not a
// package) installs; the binary to /usr/local/bin for the same reason.
const (
	DefaultBinaryPath = "/usr/local/bin/towerd"
	UnitDir           = "/etc/systemd/system"
	SocketUnitName    = "towerd.socket"
	ServiceUnitName   = "towerd.service"
	// unitBinaryPath is the binary the units in the repository name.
	unitBinaryPath = DefaultBinaryPath
)

// Unit is one rendered unit file.
type Unit struct {
	Name    string // "towerd.socket", "towerd.service"
	Content string
}

// Units returns towerd.socket and towerd.service with ExecStart naming
// binary (an absolute path). Tests render them with the binary they built so
// that `systemd-analyze verify` finds the program the unit runs.
func Units(binary string) ([]Unit, error) {
	if !strings.HasPrefix(binary, "/") {
		return nil, fmt.Errorf("binary path %q is not absolute (systemd wants ExecStart= absolute)", binary)
	}
	if strings.ContainsAny(binary, " \t\n\"'\\%$") {
		// ExecStart= would split or expand such a path; quoting it is not
		// worth the risk for an install path.
		return nil, fmt.Errorf("binary path %q has characters systemd would interpret", binary)
	}
	service := strings.ReplaceAll(serviceUnit, "ExecStart="+unitBinaryPath+" ", "ExecStart="+binary+" ")
	if !strings.Contains(service, "ExecStart="+binary+" ") {
		return nil, fmt.Errorf("BUG: towerd.service has no ExecStart=%s line to rewrite", unitBinaryPath)
	}
	return []Unit{
		{Name: SocketUnitName, Content: socketUnit},
		{Name: ServiceUnitName, Content: service},
	}, nil
}
