package dnstest

import (
	"net"
	"testing"
)

// Responder answers on a loopback UDP socket until the test ends and returns
// its address. reply writes the answer to one query into out and returns
// its length (0: no answer). Both buffers are reused, so a benchmark against
// it counts only the allocations of the code under test; everything DNS
// about the answer is reply's. For answers built as messages, Upstream is
// the one to use.
func Responder(tb testing.TB, reply func(query, out []byte) int) string {
	tb.Helper()
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	tb.Cleanup(func() {
		pc.Close()
		<-done
	})
	go func() {
		defer close(done)
		in := make([]byte, 4096)
		out := make([]byte, 4096)
		for {
			n, from, err := pc.ReadFromUDPAddrPort(in)
			if err != nil {
				return
			}
			if m := reply(in[:n], out); m > 0 {
				_, _ = pc.WriteToUDPAddrPort(out[:m], from)
			}
		}
	}()
	return pc.LocalAddr().String()
}
