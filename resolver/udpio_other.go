//go:build !(linux && (amd64 || arm64))

package resolver

import (
	"net"
	"net/netip"
)

// packetIO is net.UDPConn's own reads and writes, one datagram at a time,
// where the batched raw system calls of udpio_raw.go are not written.
type packetIO struct {
	c    *net.UDPConn
	buf  []byte
	n    int
	from netip.AddrPort
}

func newPacketIO(c *net.UDPConn) (*packetIO, error) {
	return &packetIO{c: c, buf: make([]byte, udpReadBuffer)}, nil
}

func (p *packetIO) readBatch() (int, error) {
	var err error
	p.n, p.from, err = p.c.ReadFromUDPAddrPort(p.buf)
	if err != nil {
		return 0, err
	}
	return 1, nil
}

// readLoop reads datagrams and hands each to handle until handle says stop
// (nil) or a read fails (its error).
func (p *packetIO) readLoop(handle func(n int) (stop bool)) error {
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

func (p *packetIO) packet(int) ([]byte, netip.AddrPort) { return p.buf[:p.n], p.from }

func (p *packetIO) queue(b []byte, to netip.AddrPort) { _, _ = p.c.WriteToUDPAddrPort(b, to) }

func (p *packetIO) flush() error { return nil }

// rawSend: no raw calls here. A UDP sendMiss writes through the socket,
// which may wait: that is safe, as without the Linux attempt reader each
// attempt socket has a goroutine of its own, which ends its flights; a TCP
// connection's answers go through its flusher (tcppipe.go).
const rawSend = false

func sendNow(int, []byte, netip.AddrPort) bool { return false }
