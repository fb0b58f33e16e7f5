// Package dnslisten binds a DNS server's two sockets: UDP and TCP on one
// address and port. The resolver's listeners, the fault proxy, the drill's
// loopback zones and the test kit all listen so; this is the one place
// that knows how to get one port for both when any port will do. It sits
// beside the resolver's listeners, its first user, and imports only the
// standard library, so the fault proxy and the tests take nothing else
// with it.
package dnslisten

import (
	"errors"
	"fmt"
	"net"
	"syscall"
)

// portZeroTries bounds the search for a port free over both UDP and TCP
// when the address asks for any port (port 0).
const portZeroTries = 10

// Pair binds UDP on addr and TCP on the address UDP got, so port 0 gives
// the same port to both. The kernel picks the UDP port without looking at
// TCP, so with port 0 a TCP twin another process holds means another pick;
// with a fixed port it is an error.
func Pair(addr string) (net.PacketConn, net.Listener, error) {
	_, port, _ := net.SplitHostPort(addr)
	for try := 1; ; try++ {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("listening on %s over udp: %w", addr, err)
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
		if port != "0" || !errors.Is(err, syscall.EADDRINUSE) || try == portZeroTries {
			return nil, nil, fmt.Errorf("listening on %s over tcp: %w", addr, err)
		}
	}
}
