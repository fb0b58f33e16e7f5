//go:build !(linux && (amd64 || arm64))

package udpio

import (
	"net"
	"net/netip"
)

// PacketIO is net.UDPConn's own reads and writes, one datagram at a time,
// where the batched raw system calls of raw.go are not written.
type PacketIO struct {
	c    *net.UDPConn
	buf  []byte
	n    int
	from netip.AddrPort
}

// New reads and writes on c, which stays the caller's.
func New(c *net.UDPConn) (*PacketIO, error) {
	return &PacketIO{c: c, buf: make([]byte, ReadBuffer)}, nil
}

func (p *PacketIO) readBatch() (int, error) {
	var err error
	p.n, p.from, err = p.c.ReadFromUDPAddrPort(p.buf)
	if err != nil {
		return 0, err
	}
	return 1, nil
}

// ReadLoop reads datagrams and hands each to handle until handle says stop
// (nil) or a read fails (its error).
func (p *PacketIO) ReadLoop(handle func(n int) (stop bool)) error {
	for {
		n, err := p.readBatch()
		if err != nil {
			return err
		}
		if handle(n) {
			return nil
		}
	}
}

// Packet returns the datagram read last and its sender.
func (p *PacketIO) Packet(int) ([]byte, netip.AddrPort) { return p.buf[:p.n], p.from }

// Queue sends b to to at once; a reply that cannot be sent is dropped.
func (p *PacketIO) Queue(b []byte, to netip.AddrPort) { _, _ = p.c.WriteToUDPAddrPort(b, to) }

// Flush has nothing to send: Queue sent it.
func (p *PacketIO) Flush() error { return nil }

// RawSend: no raw calls here. The resolver's UDP sendMiss writes through the socket,
// which may wait: that is safe, as without the Linux attempt reader each
// attempt socket has a goroutine of its own, which ends its flights; a TCP
// connection's answers go through its flusher (tcppipe.go).
const RawSend = false

// SendNow is never called where RawSend is false.
func SendNow(int, []byte, netip.AddrPort) bool { return false }
