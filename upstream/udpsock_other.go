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
	out    chan<- datagram
	again  chan struct{}
	done   chan struct{}
	exited chan struct{} // closed when read returns: nothing more is sent on out
	once   sync.Once
}

// sockServer is unused here.
type sockServer struct{}

func newSockServer(string) (*sockServer, error) { return &sockServer{}, nil }

// inlineReplies: without the Linux reader there is no goroutine to give a
// WireCall its reply, so StartWire runs every resolution on a goroutine.
const inlineReplies = false

// openUDP is the Linux one's; call is never set here (inlineReplies).
func (p *Plain) openUDP(packed []byte, qend int, out chan<- datagram, _ *WireCall) (*udpSock, error) {
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
	s := &udpSock{conn: conn, plain: p, replyMatch: matchOf(packed, qend), out: out,
		again: make(chan struct{}, 1), done: make(chan struct{}), exited: make(chan struct{})}
	if _, err := conn.Write(packed); err != nil {
		conn.Close()
		return nil, err
	}
	go s.read()
	return s, nil
}

func (s *udpSock) read() {
	defer close(s.exited)
	buf := make([]byte, maxMessageSize)
	for {
		n, err := s.conn.Read(buf)
		if err != nil {
			select {
			case <-s.done:
			default:
				s.out <- datagram{sock: s, err: err}
			}
			return
		}
		if !s.accepts(buf[:n]) {
			s.plain.mismatches.Add(1)
			continue
		}
		s.out <- datagram{sock: s, raw: append([]byte(nil), buf[:n]...)}
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
		<-s.exited
	})
}
