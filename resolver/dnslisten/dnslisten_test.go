package dnslisten

import (
	"net"
	"testing"
)

func TestPairSharesThePort(t *testing.T) {
	pc, ln, err := Pair("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	defer ln.Close()
	if pc.LocalAddr().String() != ln.Addr().String() {
		t.Fatalf("udp %s and tcp %s differ", pc.LocalAddr(), ln.Addr())
	}
}

// A fixed port whose TCP twin is taken is an error, not another pick, and
// leaves the UDP port free again.
func TestPairFixedPortTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	if pc, ln, err := Pair(addr); err == nil {
		pc.Close()
		ln.Close()
		t.Fatalf("Pair(%s) with its TCP port taken succeeded", addr)
	}
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatalf("the UDP port was not let go: %v", err)
	}
	pc.Close()
}
