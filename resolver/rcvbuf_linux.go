package resolver

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// raiseReceiveBuffer asks the kernel for a receive buffer of want bytes
// (the value setsockopt takes; the kernel doubles it for its bookkeeping,
// and `ss -m` shows the doubled figure as rb) on the socket under c, and
// reports what the socket has after. It never lowers a buffer that is
// already larger (systemd's ReceiveBuffer=, say).
//
// SO_RCVBUFFORCE goes past net.core.rmem_max but needs CAP_NET_ADMIN;
// without it SO_RCVBUF is capped at rmem_max, silently, so the figure
// reported is read back, not assumed (unbound does the same with its
// so-rcvbuf, util/netevent.c and services/listen_dnsport.c).
func raiseReceiveBuffer(c syscall.Conn, want int) (got int, err error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		s := int(fd)
		var cur int
		if cur, serr = unix.GetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RCVBUF); serr != nil {
			return
		}
		if cur/2 >= want {
			got = cur / 2
			return
		}
		if unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, want) != nil {
			if serr = unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RCVBUF, want); serr != nil {
				return
			}
		}
		cur, serr = unix.GetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RCVBUF)
		got = cur / 2
	})
	if err != nil {
		return 0, err
	}
	return got, serr
}
