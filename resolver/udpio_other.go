//go:build !linux

package resolver

import (
	"net"
	"net/netip"
)

// packetIO is net.UDPConn's own reads and writes where the raw system calls
// of udpio_linux.go are not written.
type packetIO struct{ c *net.UDPConn }

func newPacketIO(c *net.UDPConn) (*packetIO, error) { return &packetIO{c: c}, nil }

func (p *packetIO) read(buf []byte) (int, netip.AddrPort, error) { return p.c.ReadFromUDPAddrPort(buf) }

func (p *packetIO) write(b []byte, to netip.AddrPort) error {
	_, err := p.c.WriteToUDPAddrPort(b, to)
	return err
}
