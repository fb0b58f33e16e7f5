package systemd

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// socketFile returns a dup of a real socket's descriptor named name, as
// activation.Files would hand it over, and closes the original.
func socketFile(t *testing.T, name string, open func() (interface{ File() (*os.File, error) }, func(), error)) *os.File {
	t.Helper()
	conn, closeConn, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer closeConn()
	f, err := conn.File()
	if err != nil {
		t.Fatal(err)
	}
	return renamed(t, f, name)
}

// renamed returns f's descriptor under another name. It dups rather than
// wrapping f.Fd(), or f's finalizer would close the descriptor under us.
func renamed(t *testing.T, f *os.File, name string) *os.File {
	t.Helper()
	defer f.Close()
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	return os.NewFile(uintptr(fd), name)
}

func udpFile(t *testing.T, name string) *os.File {
	return socketFile(t, name, func() (interface{ File() (*os.File, error) }, func(), error) {
		pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return nil, nil, err
		}
		return pc, func() { pc.Close() }, nil
	})
}

func tcpFile(t *testing.T, name string) *os.File {
	return socketFile(t, name, func() (interface{ File() (*os.File, error) }, func(), error) {
		l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return nil, nil, err
		}
		return l, func() { l.Close() }, nil
	})
}

func unixgramFile(t *testing.T, name string) *os.File {
	return socketFile(t, name, func() (interface{ File() (*os.File, error) }, func(), error) {
		c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(t.TempDir(), "s"), Net: "unixgram"})
		if err != nil {
			return nil, nil, err
		}
		return c, func() { c.Close() }, nil
	})
}

func unixFile(t *testing.T, name string) *os.File {
	return socketFile(t, name, func() (interface{ File() (*os.File, error) }, func(), error) {
		dir, err := os.MkdirTemp("", "act")
		if err != nil {
			return nil, nil, err
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "control.sock"), Net: "unix"})
		if err != nil {
			return nil, nil, err
		}
		l.SetUnlinkOnClose(false) // the dup keeps serving the path
		return l, func() { l.Close() }, nil
	})
}

// The control socket comes in towerd.socket under the DNS sockets' name (a
// unit names all its sockets alike) and is told by its family; a socket
// unit of its own names it "control" (issue 21).
func TestClassifyFindsTheControlSocket(t *testing.T) {
	s, err := classify([]*os.File{udpFile(t, "dns"), unixFile(t, "dns"), tcpFile(t, "dns"), unixFile(t, ControlSocketName)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(s.Packet) != 1 || len(s.Stream) != 1 || len(s.Control) != 2 {
		t.Fatalf("got %d UDP, %d TCP, %d control sockets; want 1, 1, 2", len(s.Packet), len(s.Stream), len(s.Control))
	}
	for _, a := range s.Addrs() {
		if strings.Contains(a, "control.sock") {
			t.Errorf("Addrs() lists the control socket: %v", s.Addrs())
		}
	}
	if _, err := classify([]*os.File{udpFile(t, "dns"), tcpFile(t, ControlSocketName)}); err == nil || !strings.Contains(err.Error(), "not a Unix socket") {
		t.Errorf("a TCP socket named control: %v, want refused", err)
	}
}

func TestClassifySortsSocketsByTypeAndName(t *testing.T) {
	// systemd passes sockets in unit order, which need not be UDP first;
	// the type comes from SO_TYPE, not from the position.
	files := []*os.File{tcpFile(t, "dns"), udpFile(t, "dns"), tcpFile(t, "admin"), udpFile(t, "LISTEN_FD_6")}
	s, err := classify(files)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(s.Packet) != 2 || len(s.Stream) != 1 {
		t.Fatalf("got %d UDP and %d TCP DNS sockets, want 2 and 1", len(s.Packet), len(s.Stream))
	}
	if len(s.Other["admin"]) != 1 {
		t.Fatalf("the socket named admin should be left for others, got %v", s.Other)
	}
	addrs := s.Addrs()
	if len(addrs) != 3 || !strings.HasPrefix(addrs[0], "127.0.0.1:") {
		t.Errorf("Addrs() = %v, want three loopback addresses, UDP first", addrs)
	}
	// The sockets still work after the hand-over: a datagram reaches the
	// adopted UDP socket.
	c, err := net.Dial("udp", s.Packet[0].LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, _, err := s.Packet[0].ReadFrom(buf)
	if err != nil || string(buf[:n]) != "ping" {
		t.Fatalf("reading the adopted socket: %q, %v", buf[:n], err)
	}
}

func TestClassifyErrors(t *testing.T) {
	tests := []struct {
		name  string
		files func(t *testing.T) []*os.File
		want  string
	}{
		{"only other names", func(t *testing.T) []*os.File { return []*os.File{tcpFile(t, "admin")} }, ErrNoDNSSocket.Error()},
		{"unix datagram named dns", func(t *testing.T) []*os.File {
			return []*os.File{udpFile(t, "dns"), unixgramFile(t, "dns")}
		}, "is not UDP"},
		{"not a socket", func(t *testing.T) []*os.File {
			f, err := os.Open(os.DevNull)
			if err != nil {
				t.Fatal(err)
			}
			return []*os.File{renamed(t, f, "dns")}
		}, "not a socket"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := classify(tt.files(t))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("classify = %v, %v; want an error containing %q", s, err, tt.want)
			}
		})
	}
}

func TestDNSSocketNames(t *testing.T) {
	for name, want := range map[string]bool{
		"dns": true, "towerd.socket": true, "LISTEN_FD_3": true, "unknown": true, "": true,
		"admin": false, "metrics": false, "dns-admin": false,
	} {
		if got := isDNSName(name); got != want {
			t.Errorf("isDNSName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestInheritedSocketsWithoutActivation(t *testing.T) {
	t.Setenv("LISTEN_FDS", "2")
	t.Setenv("LISTEN_PID", "1") // another process's sockets: not ours to take
	s, err := InheritedSockets()
	if s != nil || err != nil {
		t.Fatalf("InheritedSockets() = %v, %v; want nil, nil when LISTEN_PID is not this process", s, err)
	}
	if v, ok := os.LookupEnv("LISTEN_FDS"); ok {
		t.Errorf("LISTEN_FDS=%q still set; children must not see it", v)
	}
}
