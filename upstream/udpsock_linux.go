//go:build linux && (amd64 || arm64)

package upstream

import (
	"encoding/binary"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/towerd/towerd/resolver/clock"
)

// udpSock is one attempt's connected UDP socket, a raw file descriptor: no
// net.Conn, no os.File, nothing for the garbage collector to finalize.
type udpSock struct {
	mu sync.Mutex // held by the reader while it reads fd, by close to end it
	fd int        // -1 once closed

	token uint64 // the socket's key in the reader's table and its epoll data
	plain *Plain
	replyMatch
	owner sockOwner // given every datagram, by the reader (sockOwner)
}

// sysRaw runs a system call that cannot block (every socket here is
// non-blocking) without the runtime's bookkeeping around a blocking call
// (entersyscall, exitsyscall), as the resolver's listeners do.
func sysRaw(trap, a1, a2, a3 uintptr) (uintptr, unix.Errno) {
	r, _, e := unix.RawSyscall(trap, a1, a2, a3)
	return r, e
}

// udpReader is the process's one reader of attempt sockets.
type udpReader struct {
	epfd   int
	mu     sync.Mutex
	socks  map[uint64]*udpSock
	next   uint64
	buf    []byte
	events [64]unix.EpollEvent
	// timerfd wakes the reader for the calls' timers (calltimers.go),
	// timers: its epoll token is 0 (sockets' start at 1); nil when the
	// timerfd could not be made (the groups then use clock timers).
	timerfd int
	timers  *callTimers
}

// timerToken is the timerfd's token in the epoll set.
const timerToken = 0

var (
	readerOnce sync.Once
	reader     *udpReader
	readerErr  error
)

func theReader() (*udpReader, error) {
	readerOnce.Do(func() { reader, readerErr = startReader() })
	return reader, readerErr
}

// startReader creates the epoll set and the goroutine that waits on it. The
// set itself is a pollable descriptor, handed to the runtime's poller (an
// os.File of a non-blocking descriptor is registered there), so the reader
// parks like any network goroutine and holds no thread while idle.
func startReader() (*udpReader, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	f := os.NewFile(uintptr(epfd), "upstream-attempts")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	r := &udpReader{epfd: epfd, socks: make(map[uint64]*udpSock), buf: make([]byte, maxMessageSize)}
	r.startTimers()
	go r.run(f, rc)
	return r, nil
}

// run is the reader's goroutine; it lives as long as the process (f stays
// referenced here, so the set is never finalized), like the runtime's own
// poller.
func (r *udpReader) run(f *os.File, rc syscall.RawConn) {
	_ = rc.Read(r.drain)
	_ = f.Close()
}

// drain handles every ready socket until the set has none; the runtime's
// poller (edge-triggered) wakes the reader again when one becomes ready.
func (r *udpReader) drain(fd uintptr) bool {
	for {
		n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, fd, uintptr(unsafe.Pointer(&r.events[0])),
			uintptr(len(r.events)), 0, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 || n == 0 {
			return false
		}
		for i := range int(n) {
			ev := &r.events[i]
			token := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			if token == timerToken {
				r.timerExpired()
				continue
			}
			r.mu.Lock()
			s := r.socks[token]
			r.mu.Unlock()
			if s == nil {
				continue
			}
			if d, ok := s.readable(r); ok {
				// Outside s.mu: the owner may end the resolution, which
				// closes s.
				s.owner.datagram(d)
			}
		}
	}
}

// startTimers makes the timerfd of the calls' timers on the real clock and
// adds it to the epoll set; without one, r.timers stays nil.
func (r *udpReader) startTimers() {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: timerToken}
	if unix.EpollCtl(r.epfd, unix.EPOLL_CTL_ADD, fd, &ev) != nil {
		unix.Close(fd)
		return
	}
	r.timerfd = fd
	r.timers = &callTimers{clk: clock.Real{}, wake: timerfdWake{fd}, lazy: true}
}

// realCallTimers returns the process's calls' timers on the real clock
// (the attempt reader's timerfd), nil when there are none.
func realCallTimers() *callTimers {
	r, err := theReader()
	if err != nil {
		return nil
	}
	return r.timers
}

// timerExpired reads the timerfd's expiry (level-triggered: it stays
// readable until read) and fires the calls' timers.
func (r *udpReader) timerExpired() {
	var n [8]byte
	sysRaw(unix.SYS_READ, uintptr(r.timerfd), uintptr(unsafe.Pointer(&n[0])), uintptr(len(n)))
	r.timers.fire()
}

// timerfdWake sets a timerfd, relative to now, by a raw system call: no
// runtime timer, so no thread is woken to watch it.
type timerfdWake struct{ fd int }

func (w timerfdWake) set(d time.Duration) {
	// A zero value would disarm it: what is due now fires at once.
	w.settime(unix.NsecToTimespec(int64(max(d, 1))))
}

func (w timerfdWake) stop() { w.settime(unix.Timespec{}) }

func (w timerfdWake) settime(v unix.Timespec) {
	its := unix.ItimerSpec{Value: v}
	unix.RawSyscall6(unix.SYS_TIMERFD_SETTIME, uintptr(w.fd), 0, uintptr(unsafe.Pointer(&its)), 0, 0, 0)
}

// readable reads s until a datagram passes accepts or an error comes
// (returned, ok, its bytes in the reader's buffer, for the caller to give
// the owner once s.mu is released; the socket is left unarmed), or nothing
// is left (the socket rearmed).
func (s *udpSock) readable(r *udpReader) (d datagram, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd < 0 {
		return d, false
	}
	for {
		n, e := sysRaw(unix.SYS_READ, uintptr(s.fd), uintptr(unsafe.Pointer(&r.buf[0])), uintptr(len(r.buf)))
		switch {
		case e == unix.EINTR:
			continue
		case e == unix.EAGAIN:
			s.armLocked(unix.EPOLL_CTL_MOD)
			return d, false
		case e != 0:
			return datagram{sock: s, err: e}, true
		}
		if !s.accepts(r.buf[:n]) {
			// Keep reading: the genuine reply may still be on its way,
			// and giving up on the first forgery would let anyone who can
			// send us a datagram deny service.
			s.plain.mismatches.Add(1)
			continue
		}
		return datagram{sock: s, raw: r.buf[:n]}, true
	}
}

// armLocked (re)enables s in the epoll set for one readiness event.
func (s *udpSock) armLocked(op int) {
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLONESHOT,
		Fd: int32(uint32(s.token)), Pad: int32(uint32(s.token >> 32))}
	unix.RawSyscall6(unix.SYS_EPOLL_CTL, uintptr(reader.epfd), uintptr(op), uintptr(s.fd),
		uintptr(unsafe.Pointer(&ev)), 0, 0)
}

// rearm lets the reader hand over the next datagram.
func (s *udpSock) rearm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd >= 0 {
		s.armLocked(unix.EPOLL_CTL_MOD)
	}
}

// close ends the socket. Once fd is -1 under s.mu the reader never touches
// the descriptor again, so its number may be reused at once; closing it
// also takes it out of the epoll set.
func (s *udpSock) close() {
	s.mu.Lock()
	fd := s.fd
	s.fd = -1
	s.mu.Unlock()
	if fd < 0 {
		return
	}
	reader.mu.Lock()
	delete(reader.socks, s.token)
	reader.mu.Unlock()
	sysRaw(unix.SYS_CLOSE, uintptr(fd), 0, 0)
}

// sockServer is a Plain's server as a socket address.
type sockServer struct {
	family int
	sa4    unix.RawSockaddrInet4
	sa6    unix.RawSockaddrInet6
	// selfRisk: the server's port lies in the kernel's ephemeral range, so
	// a socket on this host could be handed that very port (see dial).
	selfRisk bool
}

func newSockServer(addr string) (*sockServer, error) {
	ap, err := parseServer(addr)
	if err != nil {
		return nil, err
	}
	rs := &sockServer{selfRisk: inEphemeralRange(ap.Port())}
	port := ap.Port()
	if ap.Addr().Is4() {
		rs.family = unix.AF_INET
		rs.sa4.Family = unix.AF_INET
		rs.sa4.Addr = ap.Addr().As4()
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&rs.sa4.Port))[:], port)
		return rs, nil
	}
	rs.family = unix.AF_INET6
	rs.sa6.Family = unix.AF_INET6
	rs.sa6.Addr = ap.Addr().As16()
	binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&rs.sa6.Port))[:], port)
	if zone := ap.Addr().Zone(); zone != "" {
		if ifi, err := net.InterfaceByName(zone); err == nil {
			rs.sa6.Scope_id = uint32(ifi.Index)
		} else if n, err := strconv.ParseUint(zone, 10, 32); err == nil {
			rs.sa6.Scope_id = uint32(n)
		} else {
			return nil, err
		}
	}
	return rs, nil
}

// inEphemeralRange reports whether port lies in the kernel's range of
// source ports (the same for IPv6); unknown means yes, so the check runs.
func inEphemeralRange(port uint16) bool {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return true
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return true
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	return err1 != nil || err2 != nil || (int(port) >= lo && int(port) <= hi)
}

func (rs *sockServer) sockaddr() (unsafe.Pointer, uintptr) {
	if rs.family == unix.AF_INET {
		return unsafe.Pointer(&rs.sa4), unsafe.Sizeof(rs.sa4)
	}
	return unsafe.Pointer(&rs.sa6), unsafe.Sizeof(rs.sa6)
}

// connectedToSelf reports whether fd's local address is the server's own.
func (rs *sockServer) connectedToSelf(fd int) bool {
	var local unix.RawSockaddrAny
	size := uint32(unsafe.Sizeof(local))
	if _, e := sysRaw(unix.SYS_GETSOCKNAME, uintptr(fd), uintptr(unsafe.Pointer(&local)), uintptr(unsafe.Pointer(&size))); e != 0 {
		return false
	}
	if rs.family == unix.AF_INET {
		l := (*unix.RawSockaddrInet4)(unsafe.Pointer(&local))
		return l.Port == rs.sa4.Port && l.Addr == rs.sa4.Addr
	}
	l := (*unix.RawSockaddrInet6)(unsafe.Pointer(&local))
	return l.Port == rs.sa6.Port && l.Addr == rs.sa6.Addr
}

// openUDP sends packed (a query whose ID the caller has just made random,
// and whose question section ends at qend) from a new socket connected to
// p's server, in into when set (a call's first attempt: one allocation
// less), else a new one; replies are given to owner. The caller closes the
// socket.
func (p *Plain) openUDP(packed []byte, qend int, owner sockOwner, into *udpSock) (*udpSock, error) {
	if p.raw == nil {
		return nil, errNoPlaintext
	}
	r, err := theReader()
	if err != nil {
		return nil, err
	}
	rs := p.raw
	fd := -1
	for range maxSelfConnects {
		nfd, e := sysRaw(unix.SYS_SOCKET, uintptr(rs.family), unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if e != 0 {
			return nil, os.NewSyscallError("socket", e)
		}
		sa, size := rs.sockaddr()
		if _, e := sysRaw(unix.SYS_CONNECT, nfd, uintptr(sa), size); e != 0 {
			sysRaw(unix.SYS_CLOSE, nfd, 0, 0)
			return nil, os.NewSyscallError("connect", e)
		}
		// When the server is on this host and its port lies in the
		// ephemeral range, the kernel can pick that very port as our
		// source: the socket would read its own query back and wait out
		// the deadline instead of seeing "connection refused". Such a
		// socket is discarded and the dial repeated.
		if rs.selfRisk && rs.connectedToSelf(int(nfd)) {
			sysRaw(unix.SYS_CLOSE, nfd, 0, 0)
			continue
		}
		fd = int(nfd)
		break
	}
	if fd < 0 {
		return nil, errSelfConnect
	}
	s := into
	if s == nil {
		s = new(udpSock)
	}
	s.fd, s.plain, s.replyMatch, s.owner = fd, p, matchOf(packed, qend), owner
	r.mu.Lock()
	r.next++
	s.token = r.next
	r.socks[s.token] = s
	r.mu.Unlock()
	s.mu.Lock()
	s.armLocked(unix.EPOLL_CTL_ADD)
	s.mu.Unlock()
	if _, e := sysRaw(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&packed[0])), uintptr(len(packed))); e != 0 {
		s.close()
		return nil, os.NewSyscallError("write", e)
	}
	return s, nil
}
