package dnstest

import (
	"net"
	"testing"
)

// ListenPair binds UDP on a free port of 127.0.0.1 and TCP on the same
// port, as a DNS server listens, and closes both when the test ends (closing
// them again is harmless). The kernel picks the UDP port without looking at
// TCP, so a TCP twin another process holds means another pick.
func ListenPair(t testing.TB) (net.PacketConn, net.Listener) {
	t.Helper()
	var lastErr error
	for range 10 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			t.Cleanup(func() {
				pc.Close()
				ln.Close()
			})
			return pc, ln
		}
		pc.Close()
		lastErr = err
	}
	t.Fatalf("no UDP port on 127.0.0.1 whose TCP twin was free: %v", lastErr)
	return nil, nil
}
