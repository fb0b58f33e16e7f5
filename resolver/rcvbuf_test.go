//go:build linux

package resolver

import (
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// raiseReceiveBuffer raises a socket's buffer to what was asked (as
// root: SO_RCVBUFFORCE, past net.core.rmem_max) and reads back what the
// kernel gave; a buffer already larger is left alone.
func TestRaiseReceiveBuffer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs CAP_NET_ADMIN to pass net.core.rmem_max")
	}
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	kernel := func() int {
		rc, _ := pc.SyscallConn()
		var v int
		rc.Control(func(fd uintptr) { v, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF) })
		return v
	}
	const want = 3 << 20
	got, err := raiseReceiveBuffer(pc, want)
	if err != nil || got != want {
		t.Fatalf("raiseReceiveBuffer(%d) = %d, %v; want %d", want, got, err, want)
	}
	if k := kernel(); k != 2*want {
		t.Errorf("the kernel reports %d, want %d (twice the value set)", k, 2*want)
	}
	// Smaller than what the socket has: kept.
	if got, err := raiseReceiveBuffer(pc, 1<<20); err != nil || got != want {
		t.Errorf("raiseReceiveBuffer(1 MiB) on a 3 MiB buffer = %d, %v; want %d kept", got, err, want)
	}
	if k := kernel(); k != 2*want {
		t.Errorf("after asking less, the kernel reports %d, want %d", k, 2*want)
	}
}

// A Server told UDPReceiveBuffer sets it on each UDP socket it is given
// and says what it got.
func TestServerSetsUDPReceiveBuffer(t *testing.T) {
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	var told []int
	s := &Server{UDPReceiveBuffer: 1 << 20, OnReceiveBuffer: func(addr string, got int, err error) {
		if err != nil {
			t.Errorf("%s: %v", addr, err)
		}
		told = append(told, got)
	}}
	s.AddPacketConn(pc)
	if len(told) != 1 || told[0] <= 0 {
		t.Fatalf("OnReceiveBuffer told %v, want one positive size", told)
	}
	if os.Geteuid() == 0 && told[0] != 1<<20 {
		t.Errorf("as root the socket got %d, want %d", told[0], 1<<20)
	}
}
