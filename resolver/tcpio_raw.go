//go:build linux && (amd64 || arm64)

package resolver

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sendArgs is one raw sendmsg of a TCP connection's writer (tcppipe.go):
// its iovecs and result, kept with the connection so the function handed
// to syscall.RawConn.Write (fn, made once) allocates nothing per write.
type sendArgs struct {
	fn    func(fd uintptr) bool
	iov   [2]unix.Iovec
	msg   unix.Msghdr
	n     int
	errno unix.Errno
}

// now writes head and body to the connection's socket with one raw,
// non-blocking sendmsg (the runtime's bookkeeping around a blocking call
// is not needed, as for the UDP listeners' calls: resolver/udpio/raw.go), and
// returns how many bytes the socket took: fewer than given, even none,
// when its send buffer is full. MSG_NOSIGNAL: a client gone is an error,
// not a SIGPIPE.
func (a *sendArgs) now(rc syscall.RawConn, head, body []byte) (int, error) {
	a.msg = unix.Msghdr{Iov: &a.iov[0]}
	for _, b := range [2][]byte{head, body} {
		if len(b) > 0 {
			a.iov[a.msg.Iovlen] = unix.Iovec{Base: &b[0], Len: uint64(len(b))}
			a.msg.Iovlen++
		}
	}
	a.n, a.errno = 0, 0
	if err := rc.Write(a.fn); err != nil {
		return 0, err // closed
	}
	a.iov = [2]unix.Iovec{} // no pointer into the caller's buffers is kept
	switch a.errno {
	case 0:
		return a.n, nil
	case unix.EAGAIN, unix.EINTR:
		return 0, nil
	}
	return 0, a.errno
}

// call is fn: the sendmsg itself, inside rc.Write, which it never asks to
// wait (true: done).
func (a *sendArgs) call(fd uintptr) bool {
	n, _, errno := unix.RawSyscall(unix.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(&a.msg)), unix.MSG_NOSIGNAL|unix.MSG_DONTWAIT)
	a.n, a.errno = int(n), errno
	return true
}
