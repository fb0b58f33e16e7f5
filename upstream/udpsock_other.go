//go:build !(linux && (amd64 || arm64))

package upstream

import (
	"net"
	"sync"
)

// udpSock is one attempt's connected UDP socket. Without the Linux reader,
// each socket has a goroutine of its own that reads it.
type udpSock struct {
	conn  net.Conn
	plain *Plain
	replyMatch
	owner sockOwner
	again chan struct{}
	done  chan struct{}
	once  sync.Once
}

// sockServer is unused here.
type sockServer struct{}

func newSockServer(string) (*sockServer, error) { return &sockServer{}, nil }

// openUDP is the Linux one's; into is not used here.
func (p *Plain) openUDP(packed []byte, qend int, owner sockOwner, _ *udpSock) (*udpSock, error) {
	if p.raw == nil {
		return nil, errNoPlaintext
	}
	var conn net.Conn
	for range maxSelfConnects {
		c, err := net.Dial("udp", p.addr)
		if err != nil {
			return nil, err
		}
		if c.LocalAddr().String() != c.RemoteAddr().String() {
			conn = c
			break
		}
		c.Close()
	}
	if conn == nil {
		return nil, errSelfConnect
	}
	s := &udpSock{conn: conn, plain: p, replyMatch: matchOf(packed, qend), owner: owner,
		again: make(chan struct{}, 1), done: make(chan struct{})}
	if _, err := conn.Write(packed); err != nil {
		conn.Close()
		return nil, err
	}
	go s.read()
	return s, nil
}

// read is the socket's goroutine: it gives its owner each datagram
// (which may close the socket; close does not wait for it), then waits to
// be rearmed.
func (s *udpSock) read() {
	buf := make([]byte, maxMessageSize)
	for {
		n, err := s.conn.Read(buf)
		if err != nil {
			select {
			case <-s.done:
			default:
				s.owner.datagram(datagram{sock: s, err: err})
			}
			return
		}
		if !s.accepts(buf[:n]) {
			s.plain.mismatches.Add(1)
			continue
		}
		s.owner.datagram(datagram{sock: s, raw: buf[:n]})
		select {
		case <-s.again:
		case <-s.done:
			return
		}
	}
}

func (s *udpSock) rearm() {
	select {
	case s.again <- struct{}{}:
	default:
	}
}

func (s *udpSock) close() {
	s.once.Do(func() {
		close(s.done)
		s.conn.Close()
	})
}

// realCallTimers: without the Linux reader, every group's calls' timers
// are timers of its clock (calltimers.go).
func realCallTimers() *callTimers { return nil }
