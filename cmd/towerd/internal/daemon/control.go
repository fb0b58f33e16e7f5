package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
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
	// Said only of a socket that is served: with none, no group matters.
	if !policy.HaveGroup && d.cfg.Control.Group != "" {
		d.log.Info("control socket: no such group; only root and towerd's user may use it", "group", d.cfg.Control.Group)
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
// boot) if only root or towerd's user may write it (controldir.go),
// replacing a stale socket of an earlier run, never another file. The
// socket is bound at path itself with its final mode (the umask, below):
// nothing is changed on a path afterwards, so no link planted at a name
// can redirect a chmod to another file (issue 35: a root-owned 0600 file
// became 0660 that way), and bind(2) never follows a link at path (it
// fails with EADDRINUSE). A group that cannot be given (towerd is neither
// root nor a member) is groupErr: the socket stays 0660 in towerd's own
// group, which is stricter, not looser.
func bindControl(path string, policy admin.AccessPolicy) (l net.Listener, cs *controlSocket, groupErr, err error) {
	dir := filepath.Dir(path)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, nil, nil, fmt.Errorf("making %s: %w", dir, err)
	}
	if err := checkControlDir(dir, policy.UID); err != nil {
		return nil, nil, nil, err
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, nil, nil, err
	}
	ul, err := listenUnixMode(path, controlSocketMode)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("binding %s: %w", path, err)
	}
	ul.SetUnlinkOnClose(false) // stop removes it, only if it is still ours
	fail := func(err error) (net.Listener, *controlSocket, error, error) {
		ul.Close()
		return nil, nil, nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return fail(err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFSOCK || st.Mode&0o7777 != controlSocketMode {
		return fail(fmt.Errorf("%s is not the socket just bound (mode %o)", path, st.Mode))
	}
	if policy.HaveGroup && st.Gid != policy.GID {
		// A member of the group may hand a file to it; root may always.
		// Lchown never follows a link, and the directory is towerd's.
		if err := os.Lchown(path, -1, int(policy.GID)); err != nil {
			groupErr = fmt.Errorf("giving %s to group %s: %w", path, policy.Group, err)
		} else if err := syscall.Lstat(path, &st); err != nil {
			return fail(err)
		}
	}
	return ul, &controlSocket{path: path, ino: st.Ino, ctime: st.Ctim}, groupErr, nil
}

// umaskMu serializes listenUnixMode's umask changes with each other. The
// umask is the process's: a file another goroutine creates in the same
// microseconds gets the socket's mask. At start, when the control socket
// is bound, towerd creates no other file; the mask only takes bits away
// from others, and gives the group at most read and write.
var umaskMu sync.Mutex

// listenUnixMode binds a Unix stream socket at path whose file is created
// with mode: bind(2) makes the file with 0777 less the umask, so the umask
// is set to the mode's complement for the call (systemd does the same for
// SocketMode=). No chmod on the path afterwards, which could follow a link.
func listenUnixMode(path string, mode uint32) (*net.UnixListener, error) {
	umaskMu.Lock()
	defer umaskMu.Unlock()
	old := syscall.Umask(int(0o777 &^ mode))
	defer syscall.Umask(old)
	return net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
}

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
