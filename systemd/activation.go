// Package systemd connects towerd to systemd: the sockets systemd binds and
// hands over (socket activation, sd_listen_fds(3)), the state messages towerd
// sends back (sd_notify(3)), the names of the credential that carries the
// Consul token, and the unit files (Units). Installing towerd on a node is
// package cmd/towerd/internal/install.
//
// Nothing here needs systemd to be running: without LISTEN_FDS there are no
// inherited sockets, and without NOTIFY_SOCKET the Notifier is silent.
package systemd

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/coreos/go-systemd/v22/activation"
)

// DNSSocketName is the FileDescriptorName= of towerd.socket. Sockets with this
// name, or with no name of their own, carry DNS; sockets named otherwise are
// left in Sockets.Other for whoever wants them (an admin HTTP socket, say), so
// one socket unit can pass more than DNS.
const DNSSocketName = "dns"

// ControlSocketName is the FileDescriptorName= a separate socket unit may
// give towerd's control socket. towerd.socket itself cannot: the name is
// one per unit, and its DNS sockets have theirs; there the control socket
// is told by its family, the one Unix stream socket among them.
const ControlSocketName = "control"

// ErrNoDNSSocket is returned when systemd passed sockets but none for DNS.
var ErrNoDNSSocket = errors.New("systemd passed sockets, but none for DNS (FileDescriptorName=" + DNSSocketName + ")")

// Sockets are the sockets systemd passed to this process.
type Sockets struct {
	// Packet are the UDP sockets for DNS, in the order systemd passed them.
	Packet []net.PacketConn
	// Stream are the TCP listeners for DNS.
	Stream []net.Listener
	// Control are the Unix stream listeners: towerd's control socket
	// (towerd.socket's ListenStream=/run/towerd/control.sock, or a socket
	// named ControlSocketName).
	Control []net.Listener
	// Other are sockets with another FileDescriptorName, by name. Whoever
	// takes one closes it.
	Other map[string][]*os.File
}

// Addrs returns "ip:port" of every DNS socket, UDP first, without duplicates:
// what towerd listens on, for the loop check that keeps its own addresses out
// of its upstreams.
func (s *Sockets) Addrs() []string {
	var out []string
	seen := map[string]bool{}
	add := func(a string) {
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	for _, pc := range s.Packet {
		add(pc.LocalAddr().String())
	}
	for _, l := range s.Stream {
		add(l.Addr().String())
	}
	return out
}

// Close closes every socket; for a caller that gives up before serving.
func (s *Sockets) Close() {
	for _, pc := range s.Packet {
		pc.Close()
	}
	for _, l := range s.Stream {
		l.Close()
	}
	for _, l := range s.Control {
		l.Close()
	}
	for _, files := range s.Other {
		for _, f := range files {
			f.Close()
		}
	}
}

// InheritedSockets returns the sockets passed with LISTEN_FDS, or nil when
// this process was not socket-activated (no LISTEN_FDS, or LISTEN_PID names
// another process). It unsets the LISTEN_* variables, as sd_listen_fds(3)
// recommends, so nothing this process starts takes the sockets for its own.
func InheritedSockets() (*Sockets, error) {
	files := activation.Files(true)
	if len(files) == 0 {
		return nil, nil
	}
	return classify(files)
}

// classify sorts passed sockets into DNS over UDP, DNS over TCP, and others
// by name. It takes ownership of files: the ones turned into net sockets are
// closed (net dups them), the others end up in Other.
func classify(files []*os.File) (*Sockets, error) {
	s := &Sockets{Other: map[string][]*os.File{}}
	var errs []error
	for i, f := range files {
		if f.Name() == ControlSocketName {
			if err := s.addControl(f); err != nil {
				errs = append(errs, fmt.Errorf("socket %d (%s): %w", i+3, f.Name(), err))
			}
			f.Close()
			continue
		}
		if !isDNSName(f.Name()) {
			s.Other[f.Name()] = append(s.Other[f.Name()], f)
			continue
		}
		if err := s.addDNS(f); err != nil {
			errs = append(errs, fmt.Errorf("socket %d (%s): %w", i+3, f.Name(), err))
		}
		f.Close()
	}
	if len(errs) == 0 && len(s.Packet)+len(s.Stream) == 0 {
		errs = append(errs, ErrNoDNSSocket)
	}
	if len(errs) > 0 {
		s.Close()
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// isDNSName tells a DNS socket by its name: "dns", systemd's default name (the
// socket unit's, "towerd.socket"), or none at all (go-systemd calls an
// unnamed descriptor LISTEN_FD_<n>; systemd-socket-activate without --fdname
// passes no names).
func isDNSName(name string) bool {
	return name == DNSSocketName || name == "" || name == "unknown" || name == "towerd.socket" ||
		strings.HasPrefix(name, "LISTEN_FD_")
}

func (s *Sockets) addDNS(f *os.File) error {
	typ, err := socketType(f)
	if err != nil {
		return err
	}
	switch typ {
	case syscall.SOCK_DGRAM:
		pc, err := net.FilePacketConn(f)
		if err != nil {
			return err
		}
		if _, ok := pc.LocalAddr().(*net.UDPAddr); !ok {
			pc.Close()
			return fmt.Errorf("datagram socket on %s is not UDP", pc.LocalAddr())
		}
		s.Packet = append(s.Packet, pc)
	case syscall.SOCK_STREAM:
		l, err := net.FileListener(f)
		if err != nil {
			return fmt.Errorf("stream socket is not listening (ListenStream= without Accept=no?): %w", err)
		}
		switch l.Addr().(type) {
		case *net.TCPAddr:
			s.Stream = append(s.Stream, l)
		case *net.UnixAddr:
			s.Control = append(s.Control, l)
		default:
			l.Close()
			return fmt.Errorf("stream socket on %s is neither TCP nor Unix", l.Addr())
		}
	default:
		return fmt.Errorf("socket type %d is neither datagram nor stream", typ)
	}
	return nil
}

// addControl takes a socket named ControlSocketName: a listening Unix
// stream socket.
func (s *Sockets) addControl(f *os.File) error {
	l, err := net.FileListener(f)
	if err != nil {
		return fmt.Errorf("control socket is not a listening stream socket: %w", err)
	}
	if _, ok := l.Addr().(*net.UnixAddr); !ok {
		l.Close()
		return fmt.Errorf("control socket on %s is not a Unix socket", l.Addr())
	}
	s.Control = append(s.Control, l)
	return nil
}

// socketType reads SO_TYPE, so a datagram socket is never mistaken for a
// listener whatever order the unit lists them in.
func socketType(f *os.File) (int, error) {
	raw, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var typ int
	var sockErr error
	if err := raw.Control(func(fd uintptr) {
		typ, sockErr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TYPE)
	}); err != nil {
		return 0, err
	}
	if sockErr != nil {
		return 0, fmt.Errorf("not a socket: %w", sockErr)
	}
	return typ, nil
}
