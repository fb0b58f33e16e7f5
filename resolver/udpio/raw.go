//go:build linux && (amd64 || arm64)

package udpio

import (
	"encoding/binary"
	"net"
	"net/netip"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// PacketIO reads and writes datagrams on one UDP socket for one goroutine,
// in batches: recvmmsg takes every datagram waiting (up to Batch) in one
// system call, and sendmmsg sends their replies in one. Under load that
// divides the per-call costs by the batch size; with one datagram waiting
// it costs what recvfrom/sendto cost.
//
// The calls are raw system calls issued from inside the runtime's poller
// (syscall.RawConn) instead of net.UDPConn's methods. The socket is
// non-blocking, so they cannot block; what the raw form saves is the
// runtime's bookkeeping around each call (entersyscall, exitsyscall, and the
// sysmon thread they keep awake), a large share of towerd's CPU on a busy
// node (perf, issue 6; docs/benchmarks.md). When nothing
// is waiting the poller parks the goroutine as usual.
type PacketIO struct {
	rc interface {
		Read(func(fd uintptr) bool) error
		Write(func(fd uintptr) bool) error
	}

	// Receiving: Batch slots, each a buffer, its iovec, the sender's
	// address and the mmsghdr tying them together; received is how many
	// slots the last recvmmsg filled.
	bufs     [Batch][]byte
	iovs     [Batch]unix.Iovec
	names    [Batch]unix.RawSockaddrAny
	msgs     [Batch]mmsghdr
	received int

	// Sending: the replies queued since the last Flush.
	siovs  [Batch]unix.Iovec
	snames [Batch]unix.RawSockaddrAny
	smsgs  [Batch]mmsghdr
	queued int
	sent   int

	errno  unix.Errno
	sendFn func(fd uintptr) bool

	// ReadLoop's: the batch handler and the loop run inside one
	// RawConn.Read.
	handle func(n int) (stop bool)
	loopFn func(fd uintptr) bool
}

// mmsghdr is struct mmsghdr of recvmmsg(2) on 64-bit Linux.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

// The kernel walks an array of these: the size must be C's, 64 bytes.
var _ [unsafe.Sizeof(mmsghdr{}) - 64]byte
var _ [64 - unsafe.Sizeof(mmsghdr{})]byte

// New reads and writes on c, which stays the caller's: closing it ends a
// ReadLoop with net.ErrClosed.
func New(c *net.UDPConn) (*PacketIO, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	p := &PacketIO{rc: rc}
	for i := range p.bufs {
		p.bufs[i] = make([]byte, ReadBuffer)
		p.iovs[i].Base = &p.bufs[i][0]
		p.iovs[i].SetLen(len(p.bufs[i]))
		p.msgs[i].hdr.Iov = &p.iovs[i]
		p.msgs[i].hdr.Iovlen = 1
		p.msgs[i].hdr.Name = (*byte)(unsafe.Pointer(&p.names[i]))
		p.smsgs[i].hdr.Iov = &p.siovs[i]
		p.smsgs[i].hdr.Iovlen = 1
		p.smsgs[i].hdr.Name = (*byte)(unsafe.Pointer(&p.snames[i]))
	}
	// Made once here: a closure handed to rc per call would be allocated
	// per call.
	p.sendFn = p.sendmmsg
	p.loopFn = p.loop
	return p, nil
}

func (p *PacketIO) recvmmsg(fd uintptr) bool {
	for i := range p.msgs {
		p.msgs[i].hdr.Namelen = uint32(unsafe.Sizeof(p.names[i]))
		p.msgs[i].hdr.Flags = 0
	}
	n, _, errno := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&p.msgs[0])), Batch, 0, 0, 0)
	if errno == unix.EAGAIN {
		return false // nothing yet: the poller waits for the socket
	}
	p.received, p.errno = int(n), errno
	if errno != 0 {
		p.received = 0
	}
	return true
}

// ReadLoop reads batches and hands each to handle until handle says stop
// (nil) or a read fails (its error).
//
// It runs in one RawConn.Read, which saves a system call per wake-up: a
// batch smaller than Batch means recvmmsg found the socket empty, and
// the loop then waits in the poller at once instead of reading again to be
// told EAGAIN (half of the reader's recvmmsg calls at 20k q/s, issue 34).
// recvmmsg stops early otherwise only on an error after the first datagram,
// which it keeps for the next call: for this socket (unconnected, no
// IP_RECVERR) the kernel keeps no ICMP errors and retries a datagram with a
// bad checksum itself, so none is left waiting. Waiting at once is safe
// only inside one RawConn.Read: a datagram that arrived since the last read
// has raised the poller's edge, which the runtime keeps until the next wait
// consumes it, and only RawConn.Read's entry clears it (pollReset), so a
// Read per batch would have to read first.
func (p *PacketIO) ReadLoop(handle func(n int) (stop bool)) error {
	p.handle = handle
	err := p.rc.Read(p.loopFn)
	p.handle = nil
	if err != nil {
		return err
	}
	if p.errno != 0 {
		return p.errno
	}
	return nil
}

func (p *PacketIO) loop(fd uintptr) bool {
	for {
		if !p.recvmmsg(fd) {
			return false // nothing waiting: the poller wakes us
		}
		if p.errno != 0 {
			return true // ReadLoop returns it
		}
		if p.handle(p.received) {
			return true
		}
		if p.received < Batch {
			return false // the socket was empty: wait for its edge
		}
	}
}

// Packet returns datagram i of the last batch and its sender. A datagram
// larger than the buffer (flag MSG_TRUNC) comes back cut, and the general
// path then finds it malformed, as it would any cut packet.
func (p *PacketIO) Packet(i int) ([]byte, netip.AddrPort) {
	return p.bufs[i][:min(int(p.msgs[i].len), len(p.bufs[i]))], decodeSockaddr(&p.names[i])
}

// Queue adds b, for to, to the replies sent by the next Flush; b must stay
// untouched until then. A full batch is flushed first.
func (p *PacketIO) Queue(b []byte, to netip.AddrPort) {
	if len(b) == 0 {
		return
	}
	if p.queued == Batch {
		p.Flush()
	}
	i := p.queued
	p.siovs[i].Base = &b[0]
	p.siovs[i].SetLen(len(b))
	p.smsgs[i].hdr.Namelen = encodeSockaddr(&p.snames[i], to)
	p.queued++
}

func (p *PacketIO) sendmmsg(fd uintptr) bool {
	for p.sent < p.queued {
		n, _, errno := unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&p.smsgs[p.sent])),
			uintptr(p.queued-p.sent), 0, 0, 0)
		switch {
		case errno == unix.EAGAIN:
			return false // send buffer full: wait until it drains
		case errno != 0:
			p.sent++ // the first datagram failed (its client is gone): skip it
		default:
			p.sent += int(n)
		}
	}
	return true
}

// Flush sends the queued replies. A reply that cannot be sent is dropped:
// its client asks again, as it would after a lost datagram.
func (p *PacketIO) Flush() error {
	if p.queued == 0 {
		return nil
	}
	p.sent = 0
	err := p.rc.Write(p.sendFn)
	p.queued = 0
	return err
}

// decodeSockaddr reads an IPv4 or IPv6 address left by the kernel.
func decodeSockaddr(rsa *unix.RawSockaddrAny) netip.AddrPort {
	switch rsa.Addr.Family {
	case unix.AF_INET:
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(rsa))
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), port)
	case unix.AF_INET6:
		sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(rsa))
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
		addr := netip.AddrFrom16(sa.Addr)
		if sa.Scope_id != 0 {
			// A link-local client: rare, so the zone may cost a string.
			addr = addr.WithZone(strconv.FormatUint(uint64(sa.Scope_id), 10))
		}
		return netip.AddrPortFrom(addr, port)
	}
	return netip.AddrPort{}
}

// encodeSockaddr writes to into rsa and returns its length.
func encodeSockaddr(rsa *unix.RawSockaddrAny, to netip.AddrPort) uint32 {
	*rsa = unix.RawSockaddrAny{}
	var port [2]byte
	binary.BigEndian.PutUint16(port[:], to.Port())
	a := to.Addr()
	if a.Is4() {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(rsa))
		sa.Family = unix.AF_INET
		sa.Port = *(*uint16)(unsafe.Pointer(&port))
		sa.Addr = a.As4()
		return unix.SizeofSockaddrInet4
	}
	sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(rsa))
	sa.Family = unix.AF_INET6
	sa.Port = *(*uint16)(unsafe.Pointer(&port))
	sa.Addr = a.As16()
	if zone := a.Zone(); zone != "" {
		scope, _ := strconv.ParseUint(zone, 10, 32) // numeric, as decodeSockaddr made it
		sa.Scope_id = uint32(scope)
	}
	return unix.SizeofSockaddrInet6
}

// RawSend: SendNow sends.
const RawSend = true

// SendNow sends b to to on fd (a non-blocking UDP socket) with one raw
// sendto, and reports false only when the send buffer is full: the caller
// then waits somewhere else. A reply that fails otherwise (its client is
// gone) is dropped, as Flush drops it.
func SendNow(fd int, b []byte, to netip.AddrPort) bool {
	var rsa unix.RawSockaddrAny
	size := encodeSockaddr(&rsa, to)
	_, _, errno := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)),
		0, uintptr(unsafe.Pointer(&rsa)), uintptr(size))
	return errno != unix.EAGAIN
}
