//go:build linux && (amd64 || arm64)

package upstream

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawStream is a TLS connection's TCP socket read and written with raw
// system calls (sysRaw), as the attempt sockets and the listeners are:
// the socket is non-blocking, so a call returns at once, and a read or
// write that would block waits in the runtime's poller (RawConn), with
// the connection's deadlines. net.TCPConn's own Read and Write go through
// the runtime's blocking-call bookkeeping, which wakes its monitor thread
// on each call: at a few hundred misses a second that thread, polling
// every 20 µs after each wake, cost more CPU than the TLS records did.
type rawStream struct {
	*net.TCPConn
	rc syscall.RawConn
	// The calls' state and functions, made once: a closure per call
	// would be an allocation per read and per write. tls.Conn reads from
	// one goroutine at a time and writes from one at a time.
	rb, wb          []byte
	rn, wn          int
	re, we          unix.Errno
	readFn, writeFn func(fd uintptr) bool
}

// streamOf is conn as a TLS connection's transport: a rawStream for a
// TCP connection, conn itself otherwise.
func streamOf(conn net.Conn) net.Conn {
	tcp, ok := conn.(*net.TCPConn)
	if !ok {
		return conn
	}
	rc, err := tcp.SyscallConn()
	if err != nil {
		return conn
	}
	s := &rawStream{TCPConn: tcp, rc: rc}
	s.readFn, s.writeFn = s.read, s.write
	return s
}

func (s *rawStream) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	s.rb, s.rn, s.re = b, 0, 0
	err := s.rc.Read(s.readFn)
	n, e := s.rn, s.re
	s.rb = nil
	switch {
	case err != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: s.LocalAddr(), Addr: s.RemoteAddr(), Err: err}
	case e != 0:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: s.LocalAddr(), Addr: s.RemoteAddr(), Err: os.NewSyscallError("read", e)}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (s *rawStream) read(fd uintptr) bool {
	for {
		n, e := sysRaw(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&s.rb[0])), uintptr(len(s.rb)))
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		s.rn, s.re = int(n), e
		return true
	}
}

// Write writes all of b (MSG_NOSIGNAL: a closed peer is EPIPE, never
// SIGPIPE).
func (s *rawStream) Write(b []byte) (int, error) {
	s.wb, s.wn, s.we = b, 0, 0
	err := s.rc.Write(s.writeFn)
	n, e := s.wn, s.we
	s.wb = nil
	switch {
	case err != nil:
		return n, &net.OpError{Op: "write", Net: "tcp", Source: s.LocalAddr(), Addr: s.RemoteAddr(), Err: err}
	case e != 0:
		return n, &net.OpError{Op: "write", Net: "tcp", Source: s.LocalAddr(), Addr: s.RemoteAddr(), Err: os.NewSyscallError("write", e)}
	}
	return n, nil
}

func (s *rawStream) write(fd uintptr) bool {
	for s.wn < len(s.wb) {
		n, _, e := unix.RawSyscall6(unix.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&s.wb[s.wn])), uintptr(len(s.wb)-s.wn),
			unix.MSG_NOSIGNAL, 0, 0)
		switch e {
		case 0:
			s.wn += int(n)
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		default:
			s.we = e
			return true
		}
	}
	return true
}
