package admin

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// The CLI's side of the control socket (issue 35): before it sends
// anything (a flush, a cache snapshot to load, a name to look up) it makes
// sure the other end is towerd's: the socket file belongs to root or
// towerd's user, and so does the process that listens on it, as the kernel
// recorded when it called listen(2) (SO_PEERCRED on the client's side). A
// user who could rename the real socket aside and serve the path with a
// program of their own is refused by name, whatever the directory's mode.

// ErrUntrustedServer is wrapped by Call's error when the control socket is
// not served by root or towerd's user: nothing was sent.
var ErrUntrustedServer = errors.New("not towerd's control socket")

// towerdUser is the user the packaged unit runs towerd as (DynamicUser=
// takes the unit's name).
const towerdUser = "towerd"

// trustedServer says whether a socket file or listener owned by uid may be
// towerd's: root (systemd's socket unit, or towerd as root), towerd's
// user, or the caller itself (towerd run by the same user).
func trustedServer(uid uint32) bool {
	if uid == 0 || uid == uint32(os.Geteuid()) {
		return true
	}
	u, err := user.Lookup(towerdUser)
	return err == nil && u.Uid == strconv.FormatUint(uint64(uid), 10)
}

// checkSocketFile refuses a control socket path whose file (not followed)
// is owned by anyone else; a missing file is left for the dial to report.
func checkSocketFile(path string) error {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return nil
	}
	if !trustedServer(st.Uid) {
		return untrusted("%s belongs to %s, not to root or towerd's user; refusing to send it anything "+
			"(someone who may write its directory may have put it there: check the directory and towerd's log)",
			path, userName(st.Uid))
	}
	return nil
}

// checkServerPeer refuses a connection whose listener is not root's,
// towerd's user's or the caller's own.
func checkServerPeer(c net.Conn, path string) error {
	p, err := peerOf(c)
	if err != nil {
		return untrusted("cannot tell who serves %s (%v); refusing to send it anything", path, err)
	}
	if !trustedServer(p.uid) {
		return untrusted("%s is served by %s (pid %d), not by root or towerd's user; refusing to send it anything "+
			"(someone who may write its directory may have put it there: check the directory and towerd's log)",
			path, userName(p.uid), p.pid)
	}
	return nil
}

// userName is "uid N (name)", or "uid N" when the name is unknown.
func userName(uid uint32) string {
	s := "uid " + strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		s += " (" + u.Username + ")"
	}
	return s
}

// untrustedError is a refusal of the control socket's server; it is
// ErrUntrustedServer, and its text is kept whole through the HTTP client's
// wrapping (dialError).
type untrustedError struct{ msg string }

func untrusted(format string, args ...any) error {
	return &untrustedError{msg: ErrUntrustedServer.Error() + ": " + fmt.Sprintf(format, args...)}
}

func (e *untrustedError) Error() string { return e.msg }
func (e *untrustedError) Unwrap() error { return ErrUntrustedServer }
