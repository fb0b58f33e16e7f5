package resolver

import (
	"cmp"
	"context"
	"errors"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/dnslisten"
)

// DefaultTCPIdleTimeout is how long a TCP connection may sit idle between
// queries before towerd closes it (RFC 7766 §6.2.3 suggests seconds, not
// minutes, for a busy server).
const DefaultTCPIdleTimeout = 10 * time.Second

// AcceptRequest is the first check on every packet, run on the header alone
// before the rest is parsed (dns.Server's MsgAcceptFunc): responses are
// dropped, opcodes other than QUERY get NOTIMP, and anything but exactly
// one question gets FORMERR. It is the header part of the one admission
// step (acceptHeader, admit).
func AcceptRequest(dh dns.Header) dns.MsgAcceptAction {
	return acceptHeader(dh.Bits, int(dh.Qdcount))
}

// Server runs the UDP and TCP listeners of towerd on sockets it binds itself
// (Listen) or is handed (AddPacketConn, AddListener: socket activation).
type Server struct {
	// Handler answers the queries.
	Handler dns.Handler
	// TCPIdleTimeout closes TCP connections idle this long; zero means
	// DefaultTCPIdleTimeout.
	TCPIdleTimeout time.Duration
	// TCPMaxConnections caps concurrent TCP connections over all TCP
	// listeners; to admit one more, the connection idle longest is closed
	// (issue 13). Zero means DefaultTCPMaxConnections. The daemon lowers it
	// so that file descriptors stay in reserve for upstream sockets and the
	// admin server.
	TCPMaxConnections int
	// TCPReadTimeout bounds how long a TCP query may take to arrive once its
	// first byte did; zero means DefaultTCPReadTimeout.
	TCPReadTimeout time.Duration
	// TCPWriteTimeout bounds writing one TCP reply: a client that does not
	// read loses its connection. Zero means DefaultTCPWriteTimeout.
	TCPWriteTimeout time.Duration
	// OnInvalid, if set, is called for every packet dropped or answered
	// FORMERR because it could not be parsed.
	OnInvalid func(err error)
	// OnPanic, if set, is told about a handler panic. The query gets
	// SERVFAIL and the daemon goes on: one bad packet must not take a node's
	// DNS down (miekg/dns does not recover handler panics).
	OnPanic func(v any, stack []byte)
	// UDPReceiveBuffer, if positive, is the receive buffer asked for on
	// every UDP socket, in bytes as setsockopt(SO_RCVBUF) takes them: what
	// holds the queries that arrive while the socket's reader is not
	// running (descheduled on a busy node, a GC pause): past it the kernel
	// drops them, and its default is small (docs/benchmarks.md). Zero
	// leaves the socket as it is. A buffer already larger is kept; past
	// net.core.rmem_max it takes CAP_NET_ADMIN (raiseReceiveBuffer).
	UDPReceiveBuffer int
	// OnReceiveBuffer, if set, is told for each UDP socket what
	// UDPReceiveBuffer gave: the buffer it has after (in the same unit)
	// or why it could not be set.
	OnReceiveBuffer func(addr string, got int, err error)

	mu        sync.Mutex
	servers   []listener
	addrs     []string
	tcpBudget *tcpBudget // made by the first AddListener
	dropped   atomic.Uint64
}

// listener is one served socket: a dns.Server, or a udpServer for UDP
// sockets bound to one address.
type listener interface {
	serve(started func()) error
	shutdown(ctx context.Context) error
}

// miekgServer adapts dns.Server to listener.
type miekgServer struct{ *dns.Server }

func (m miekgServer) serve(started func()) error {
	m.NotifyStartedFunc = started
	return m.ActivateAndServe()
}

func (m miekgServer) shutdown(ctx context.Context) error { return m.ShutdownContext(ctx) }

// Listen binds UDP and TCP on each address. On error nothing stays bound.
func (s *Server) Listen(addrs []string) error {
	var pcs []net.PacketConn
	var ls []net.Listener
	closeAll := func() {
		for _, pc := range pcs {
			pc.Close()
		}
		for _, l := range ls {
			l.Close()
		}
	}
	for _, addr := range addrs {
		pc, l, err := dnslisten.Pair(addr)
		if err != nil {
			closeAll()
			return err
		}
		pcs, ls = append(pcs, pc), append(ls, l)
	}
	for _, pc := range pcs {
		s.AddPacketConn(pc)
	}
	for _, l := range ls {
		s.AddListener(l)
	}
	return nil
}

// AddPacketConn serves UDP on an already bound socket.
func (s *Server) AddPacketConn(pc net.PacketConn) {
	addr := "udp/" + pc.LocalAddr().String()
	if sc, ok := pc.(syscall.Conn); ok && s.UDPReceiveBuffer > 0 {
		got, err := raiseReceiveBuffer(sc, s.UDPReceiveBuffer)
		if s.OnReceiveBuffer != nil {
			s.OnReceiveBuffer(addr, got, err)
		}
	}
	uc, ok := pc.(*net.UDPConn)
	if la, isUDP := pc.LocalAddr().(*net.UDPAddr); !ok || !isUDP || la.IP.IsUnspecified() {
		s.add(&dns.Server{PacketConn: pc, Net: "udp"}, addr)
		return
	}
	// The fast path needs the handler's packetAnswerer side; any other
	// handler is served on the general path alone.
	fast, _ := s.Handler.(packetAnswerer)
	u := newUDPServer(uc, recoverer{next: s.Handler, onPanic: s.OnPanic}, fast, s.OnPanic, s.invalid)
	s.mu.Lock()
	s.servers = append(s.servers, u)
	s.addrs = append(s.addrs, addr)
	s.mu.Unlock()
}

// invalid counts a packet dropped or answered FORMERR as unparsable.
func (s *Server) invalid(err error) {
	s.dropped.Add(1)
	if s.OnInvalid != nil {
		s.OnInvalid(err)
	}
}

// AddListener serves TCP on an already bound listener (its own or one
// systemd passed) with towerd's TCP loop (tcp.go).
func (s *Server) AddListener(l net.Listener) {
	fast, _ := s.Handler.(packetAnswerer)
	limits := tcpLimits{
		idle:  cmp.Or(s.TCPIdleTimeout, DefaultTCPIdleTimeout),
		read:  cmp.Or(s.TCPReadTimeout, DefaultTCPReadTimeout),
		write: cmp.Or(s.TCPWriteTimeout, DefaultTCPWriteTimeout),
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tcpBudget == nil {
		s.tcpBudget = newTCPBudget(cmp.Or(s.TCPMaxConnections, DefaultTCPMaxConnections))
		if qt, ok := s.Handler.(queryTimeouter); ok {
			s.tcpBudget.usefulWindow = qt.QueryTimeout
		}
	}
	t := newTCPServer(l, s.tcpBudget, recoverer{next: s.Handler, onPanic: s.OnPanic}, fast, limits, s.OnPanic, s.invalid)
	s.servers = append(s.servers, t)
	s.addrs = append(s.addrs, "tcp/"+l.Addr().String())
}

// TCPStats are the TCP listeners' counts for metrics.
type TCPStats struct {
	// Connections counts open connections; Limit is the cap on them.
	Connections, Limit int
	// Closed counts closed connections by reason: idle, cap, oversize,
	// stalled, write_timeout, error, client, shutdown.
	Closed map[string]uint64
	// AcceptErrors counts failed accepts by kind: emfile, enfile, other.
	AcceptErrors map[string]uint64
}

// TCPStats returns the TCP counts; all zero before a TCP listener is added.
func (s *Server) TCPStats() TCPStats {
	st := TCPStats{Closed: map[string]uint64{}, AcceptErrors: map[string]uint64{}}
	s.mu.Lock()
	b := s.tcpBudget
	s.mu.Unlock()
	for i, l := range tcpClosedLabels {
		if b != nil {
			st.Closed[l] = b.closed[i].Load()
		} else {
			st.Closed[l] = 0
		}
	}
	for i, l := range acceptErrorLabels {
		if b != nil {
			st.AcceptErrors[l] = b.acceptErrs[i].Load()
		} else {
			st.AcceptErrors[l] = 0
		}
	}
	if b != nil {
		st.Connections, st.Limit = b.connections(), b.limit
	}
	return st
}

// add serves a wildcard-bound UDP socket with dns.Server.
func (s *Server) add(srv *dns.Server, addr string) {
	srv.Handler = recoverer{next: s.Handler, onPanic: s.OnPanic}
	srv.MsgAcceptFunc = AcceptRequest
	srv.MsgInvalidFunc = func(_ []byte, err error) { s.invalid(err) }
	s.mu.Lock()
	s.servers = append(s.servers, miekgServer{srv})
	s.addrs = append(s.addrs, addr)
	s.mu.Unlock()
}

// Addrs returns "udp/ip:port" and "tcp/ip:port" for every socket served.
func (s *Server) Addrs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.addrs...)
}

// Invalid returns how many packets could not be parsed.
func (s *Server) Invalid() uint64 { return s.dropped.Load() }

// Serve serves every socket until Shutdown. It calls ready once all of them
// accept queries, and returns the first error of any of them.
func (s *Server) Serve(ready func()) error {
	s.mu.Lock()
	servers := append([]listener(nil), s.servers...)
	s.mu.Unlock()
	if len(servers) == 0 {
		return errors.New("no sockets to serve")
	}
	var started sync.WaitGroup
	started.Add(len(servers))
	errc := make(chan error, len(servers))
	for _, srv := range servers {
		go func() { errc <- srv.serve(started.Done) }()
	}
	go func() {
		started.Wait()
		if ready != nil {
			ready()
		}
	}()
	var first error
	for range servers {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// recoverer turns a handler panic into SERVFAIL.
type recoverer struct {
	next    dns.Handler
	onPanic func(v any, stack []byte)
}

func (rh recoverer) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	defer func() {
		if v := recover(); v != nil {
			if rh.onPanic != nil {
				rh.onPanic(v, debug.Stack())
			}
			if out := panicReply(r, w); out != nil {
				_, _ = w.Write(out) // the client is gone; nothing to do about it
			}
		}
	}()
	rh.next.ServeDNS(w, r)
}

// Shutdown stops accepting queries and waits, up to ctx, for the ones being
// answered.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	servers := append([]listener(nil), s.servers...)
	s.mu.Unlock()
	var errs []error
	for _, srv := range servers {
		if err := srv.shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
