package config

import (
	"os/user"
	"path/filepath"
	"strings"
)

// The control channel (issue 21): everything that changes what towerd
// answers or shows what it has cached goes through a Unix socket that only
// root, towerd's own user and the members of one group may use, in the way
// of unbound-control's control-interface. The loopback admin port keeps what
// any local user may read.

// DefaultControlSocket is where the control socket is: towerd.socket
// creates it there (mode 0660, group towerd), or towerd itself when it binds
// its own sockets. /run/towerd/ is towerd's; /run is a tmpfs, so a stale
// socket never outlives a boot.
const DefaultControlSocket = "/run/towerd/control.sock"

// DefaultControlGroup is the operators' group: its members may use the
// control socket without root. The Debian package and `towerd install`
// create it (sysusers.d); add an operator with `usermod -aG towerd NAME`.
const DefaultControlGroup = "towerd"

// maxSocketPath is the longest path a Unix socket address holds: sun_path
// is 108 bytes on Linux, the terminating NUL included.
const maxSocketPath = 107

// ControlConfig is the [control] table.
type ControlConfig struct {
	// Socket: path of the control socket; "" turns the control channel
	// off (reload then only by SIGHUP). Ignored when systemd passes the
	// socket (towerd.socket's ListenStream=), which then decides.
	Socket string `toml:"socket"`
	// Group: besides root and towerd's own user, the members of this group
	// may use the control socket (its file's group when towerd creates it,
	// and the peer check's). A group that does not exist leaves root and
	// towerd's user only.
	Group string `toml:"group"`
	// MaxConnections: control connections served at once; past it the one
	// idle longest is closed, or the new one refused when none is idle.
	MaxConnections int `toml:"max_connections"`
}

func defaultControlConfig() ControlConfig {
	return ControlConfig{Socket: DefaultControlSocket, Group: DefaultControlGroup, MaxConnections: 16}
}

func (c ControlConfig) validate() error {
	if c.Socket != "" {
		if len(c.Socket) > maxSocketPath {
			return keyErr("control.socket", "%d bytes is longer than a Unix socket path may be (%d)", len(c.Socket), maxSocketPath)
		}
		if strings.HasSuffix(c.Socket, "/") || filepath.Base(c.Socket) == "." {
			return keyErr("control.socket", "%q names a directory, not a socket file", c.Socket)
		}
	}
	if c.Group != "" && strings.ContainsAny(c.Group, ": \t\n") {
		return keyErr("control.group", "%q is not a group name", c.Group)
	}
	if c.MaxConnections < 1 {
		return keyErr("control.max_connections", "must be at least 1 (got %d)", c.MaxConnections)
	}
	return nil
}

// GroupID looks the group up: its gid, or ok false when it does not exist
// (or Group is ""). Only /etc/group is read (towerd is built without cgo, so
// groups that only NSS modules such as LDAP know are not found: give such
// operators a local group).
func (c ControlConfig) GroupID() (gid string, ok bool) {
	if c.Group == "" {
		return "", false
	}
	g, err := user.LookupGroup(c.Group)
	if err != nil {
		return "", false
	}
	return g.Gid, true
}
