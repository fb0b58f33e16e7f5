package dnstest

import (
	"net"
	"testing"

	"github.com/towerd/towerd/resolver/dnslisten"
)

// ListenPair binds UDP on a free port of 127.0.0.1 and TCP on the same
// port, as a DNS server listens (dnslisten.Pair), and closes both when the
// test ends (closing them again is harmless).
func ListenPair(t testing.TB) (net.PacketConn, net.Listener) {
	t.Helper()
	pc, ln, err := dnslisten.Pair("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pc.Close()
		ln.Close()
	})
	return pc, ln
}
