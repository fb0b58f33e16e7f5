package admin

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// hasPendingBytes says whether c has bytes the server has not read yet
// (SIOCINQ, the same number as FIONREAD): a client whose request is already
// in the socket, waiting for its goroutine to read it.
func hasPendingBytes(c net.Conn) bool {
	if w, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = w.NetConn() // the limiter's wrapper (limit.go)
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	_ = raw.Control(func(fd uintptr) {
		n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
	})
	return n > 0
}
