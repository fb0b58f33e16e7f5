package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/towerd/towerd/cmd/towerd/internal/admin"
	"github.com/towerd/towerd/cmd/towerd/internal/config"
)

// The control channel (issue 21, admin/control.go): a Unix socket that only
// root, towerd's own user and the operators' group may use. Under systemd,
// towerd.socket creates it (ListenStream=, SocketMode=0660,
// SocketGroup=towerd) and passes it with the DNS sockets; otherwise towerd
// binds control.socket itself, with the same mode and group.

// controlSocketMode is the socket file's mode: connecting needs write
// permission, so the owner and the group may, others may not.
const controlSocketMode = 0o660

// controlSocket is a socket towerd bound itself, removed again on stop.
type controlSocket struct {
	path string
	// ino and ctime tell the file towerd made from a later one at the same
	// path (an inode number is reused as soon as it is free), so stop
	// never removes another's.
	ino   uint64
	ctime syscall.Timespec
}

// startControl serves the control channel on the socket systemd passed or
// on one bound at control.socket. A socket that cannot be had is logged, not
// fatal: DNS must not go down over its control channel; SIGHUP still
// reloads.
func (d *Daemon) startControl(a *admin.Server) {
	policy := controlPolicy(d.cfg.Control)
	if !policy.HaveGroup && d.cfg.Control.Group != "" {
		d.log.Info("control socket: no such group; only root and towerd's user may use it", "group", d.cfg.Control.Group)
	}
	l, how, err := d.controlListener(policy)
	switch {
	case err != nil:
		d.log.Error("control socket unusable; reload, flush, cache and lookup commands will not reach this towerd (SIGHUP still reloads)",
			"socket", d.cfg.Control.Socket, "err", err, "hint", "set [control] socket, or -control, to a path in a directory towerd may write; \"\" turns it off")
		return
	case l == nil:
		d.log.Info("control socket off (control.socket is empty); SIGHUP reloads")
		return
	}
	a.StartControl(l, policy, d.cfg.Control.MaxConnections)
	d.log.Info("control socket listening", "socket", l.Addr().String(), "from", how, "group", d.cfg.Control.Group,
		"endpoints", "/reload /log-queries /cache /cache/flush /cache/list /cache/dump /cache/load /lookup /stats")
}

// controlPolicy is who may use the channel: root, this process's user, and
// the members of control.group when it exists.
func controlPolicy(c config.ControlConfig) admin.AccessPolicy {
	p := admin.AccessPolicy{UID: uint32(os.Geteuid()), Group: c.Group}
	if gid, ok := c.GroupID(); ok {
		if n, err := strconv.ParseUint(gid, 10, 32); err == nil {
			p.GID, p.HaveGroup = uint32(n), true
		}
	}
	return p
}

// controlListener is the socket systemd passed, else one bound at
// control.socket; nil when the channel is off. how says which.
func (d *Daemon) controlListener(policy admin.AccessPolicy) (l net.Listener, how string, err error) {
	if in := d.sd.inherited; in != nil && len(in.Control) > 0 {
		for _, extra := range in.Control[1:] {
			d.log.Warn("closing a second control socket systemd passed", "socket", extra.Addr().String())
			extra.Close()
		}
		l, in.Control = in.Control[0], nil
		if d.cfg.Control.Socket != "" && l.Addr().String() != d.cfg.Control.Socket {
			d.log.Info("using the control socket systemd passed instead of control.socket",
				"socket", l.Addr().String(), "control_socket", d.cfg.Control.Socket)
		}
		return l, "systemd", nil
	}
	if d.cfg.Control.Socket == "" {
		return nil, "", nil
	}
	l, cs, groupErr, err := bindControl(d.cfg.Control.Socket, policy)
	if err != nil {
		return nil, "", err
	}
	if groupErr != nil {
		d.log.Warn("control socket kept in towerd's own group; the operators' group cannot connect", "err", groupErr,
			"hint", "run towerd as root or as a member of the group, or set control.group")
	}
	d.ctlSocket = cs
	return l, "towerd", nil
}

// errControlInUse: another process answers on the control socket's path.
var errControlInUse = errors.New("another process serves this control socket (a second towerd?)")

// bindControl makes the control socket at path: in the directory (made
// 0755 when only its last component is missing, as /run/towerd is after a
// boot), replacing a stale socket of an earlier run, never another file.
// The socket is bound under a temporary name, given its mode and group,
// then renamed into place, so no one ever finds it at path with looser
// permissions. A group that cannot be given (towerd is neither root nor a
// member) is groupErr: the socket stays 0660 in towerd's own group, which
// is stricter, not looser.
func bindControl(path string, policy admin.AccessPolicy) (l net.Listener, cs *controlSocket, groupErr, err error) {
	dir := filepath.Dir(path)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, nil, nil, fmt.Errorf("making %s: %w", dir, err)
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, nil, nil, err
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".%s.%d.%d", filepath.Base(path), os.Getpid(), time.Now().UnixNano()%1e6))
	if len(tmp) > len(path)+24 || len(tmp) > 107 {
		tmp = path // too long for sun_path: bind in place (the peer check still refuses others)
	}
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("binding %s: %w", path, err)
	}
	ul.SetUnlinkOnClose(false) // stop removes it, only if it is still ours
	fail := func(err error) (net.Listener, *controlSocket, error, error) {
		ul.Close()
		os.Remove(tmp)
		return nil, nil, nil, err
	}
	if err := os.Chmod(tmp, controlSocketMode); err != nil {
		return fail(fmt.Errorf("chmod %s: %w", tmp, err))
	}
	if policy.HaveGroup {
		// A member of the group may hand a file to it; root may always.
		if err := os.Lchown(tmp, -1, int(policy.GID)); err != nil {
			groupErr = fmt.Errorf("giving %s to group %s: %w", path, policy.Group, err)
		}
	}
	if tmp != path {
		if err := os.Rename(tmp, path); err != nil {
			return fail(fmt.Errorf("renaming %s to %s: %w", tmp, path, err))
		}
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return fail(err)
	}
	// The listener's address is the path clients use (not the temp name).
	return &namedListener{UnixListener: ul, addr: &net.UnixAddr{Name: path, Net: "unix"}}, &controlSocket{path: path, ino: st.Ino, ctime: st.Ctim}, groupErr, nil
}

// namedListener is a Unix listener bound under a temporary name and
// renamed: Addr is where it is now.
type namedListener struct {
	*net.UnixListener
	addr net.Addr
}

func (l *namedListener) Addr() net.Addr { return l.addr }

// removeStaleSocket removes a socket left at path by an earlier towerd that
// did not stop cleanly (nothing answers on it); a live socket or any other
// file is an error and stays.
func removeStaleSocket(path string) error {
	info, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if info.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket (%s); not replacing it", path, info.Mode().Type())
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("%s: %w", path, errControlInUse)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.Remove(path)
}

// remove deletes the socket file on stop if it is still the one towerd
// made.
func (cs *controlSocket) remove() {
	if cs == nil {
		return
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(cs.path, &st); err == nil && st.Ino == cs.ino && st.Ctim == cs.ctime {
		os.Remove(cs.path)
	}
}
