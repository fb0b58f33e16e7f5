package admin

import (
	"fmt"
	"net"
	"unsafe"

	"golang.org/x/sys/unix"
)

// peerOf reads the credentials the kernel recorded for the process at the
// other end of c when it called connect(2): SO_PEERCRED's uid, gid and pid,
// and SO_PEERGROUPS's supplementary groups (Linux 4.13). Both are the
// kernel's copy from connect time, so neither a later setuid, an exec nor a
// reused pid can change them, unlike reading /proc/PID/status, which races
// with all three.
func peerOf(c net.Conn) (peer, error) {
	if w, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = w.NetConn() // the limiter's wrapper (limit.go)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return peer{}, fmt.Errorf("not a Unix socket connection (%T)", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return peer{}, err
	}
	var p peer
	var credErr, groupsErr error
	if err := raw.Control(func(fd uintptr) {
		var cred *unix.Ucred
		if cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); credErr == nil {
			p.uid, p.gid, p.pid = cred.Uid, cred.Gid, cred.Pid
		}
		p.groups, groupsErr = peerGroups(int(fd))
	}); err != nil {
		return peer{}, err
	}
	if credErr != nil {
		return peer{}, fmt.Errorf("SO_PEERCRED: %w", credErr)
	}
	p.groupsKnown = groupsErr == nil
	return p, nil
}

// peerGroups is getsockopt(SO_PEERGROUPS): the peer's supplementary gids.
// x/sys has no typed wrapper (GetsockoptString would cut the array at the
// first zero byte), so the call is made here. A buffer too small gets
// ERANGE with the size needed.
func peerGroups(fd int) ([]uint32, error) {
	groups := make([]uint32, 64)
	for range 2 {
		size := uint32(len(groups) * 4)
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&groups[0])), uintptr(unsafe.Pointer(&size)), 0)
		switch errno {
		case 0:
			return groups[:size/4], nil
		case unix.ERANGE:
			groups = make([]uint32, size/4+1)
			continue
		}
		return nil, fmt.Errorf("SO_PEERGROUPS: %w", errno)
	}
	return nil, fmt.Errorf("SO_PEERGROUPS: %w", unix.ERANGE)
}
