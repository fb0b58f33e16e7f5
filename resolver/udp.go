package resolver

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// udpServer serves one bound UDP socket itself rather than through
// dns.Server, so that a cache hit is answered by the goroutine that read it,
// from the packet's bytes into a reused buffer (Handler.answerPacket): no
// goroutine, no dns.Msg and no allocation per hit. Every other packet is
// copied and goes the general way on its own goroutine, as dns.Server would
// run it: header check (AcceptRequest), unpack, handler.
//
// It is used for sockets bound to one address. A socket bound to a wildcard
// address must answer from the address each query was sent to, which
// dns.Server does with control messages; such sockets stay with dns.Server.
type udpServer struct {
	conn     *net.UDPConn // the socket as handed over; closed at shutdown
	fast     *Handler     // nil: no fast path (a handler other than ours)
	handler  dns.Handler  // the general path, panics already recovered
	onPanic  func(v any, stack []byte)
	onBadPkt func(err error)

	closing atomic.Bool
	slow    sync.WaitGroup // general-path queries being answered

	mu      sync.Mutex // guards readers between serve and shutdown
	readers []*net.UDPConn
}

// maxUDPReaders bounds the goroutines reading one socket. Each has its own
// descriptor (a dup of the socket) so their reads do not queue on one file
// lock in the runtime; the kernel hands each datagram to one of them.
const maxUDPReaders = 4

// udpReadBuffer takes any datagram: a query larger than 512 bytes (EDNS
// lets clients send big ones) is read whole, not cut.
const udpReadBuffer = 65535

func newUDPServer(conn *net.UDPConn, handler dns.Handler, fast *Handler, onPanic func(any, []byte), onBadPkt func(error)) *udpServer {
	return &udpServer{conn: conn, fast: fast, handler: handler, onPanic: onPanic, onBadPkt: onBadPkt}
}

// serve reads until shutdown. started is called once the readers run.
func (u *udpServer) serve(started func()) error {
	readers := []*net.UDPConn{u.conn}
	for len(readers) < min(runtime.GOMAXPROCS(0), maxUDPReaders) {
		dup, err := dupUDP(u.conn)
		if err != nil {
			break // one reader still serves; more only add parallelism
		}
		readers = append(readers, dup)
	}
	u.mu.Lock()
	if u.closing.Load() {
		u.mu.Unlock()
		for _, c := range readers {
			c.Close()
		}
		return nil
	}
	u.readers = readers
	u.mu.Unlock()

	var wg sync.WaitGroup
	errc := make(chan error, len(readers))
	for _, c := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- u.read(c)
		}()
	}
	if started != nil {
		started()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			return err
		}
	}
	return nil
}

func dupUDP(c *net.UDPConn) (*net.UDPConn, error) {
	f, err := c.File()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	pc, err := net.FilePacketConn(f)
	if err != nil {
		return nil, err
	}
	uc, ok := pc.(*net.UDPConn)
	if !ok {
		pc.Close()
		return nil, errors.New("duplicate is not a UDP socket")
	}
	return uc, nil
}

// read is one reader's loop.
func (u *udpServer) read(c *net.UDPConn) error {
	buf := make([]byte, udpReadBuffer)
	out := make([]byte, 0, udpReadBuffer)
	var q plainQuery
	for {
		n, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			if u.closing.Load() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Errors such as ECONNREFUSED left behind by an ICMP message
			// concern one earlier peer, not the socket: go on reading.
			continue
		}
		pkt := buf[:n]
		if u.fast != nil {
			if reply, ok := u.answerFast(out[:0], pkt, from, &q); ok {
				_, _ = c.WriteToUDPAddrPort(reply, from) // a client gone is not our error
				continue
			}
		}
		if u.closing.Load() {
			continue // draining: no new general-path work
		}
		u.slow.Add(1)
		go u.serveGeneral(c, append([]byte(nil), pkt...), from)
	}
}

// answerFast runs the fast path; a panic in it is reported and the packet
// goes the general way, which answers SERVFAIL if it panics too.
func (u *udpServer) answerFast(out, pkt []byte, from netip.AddrPort, q *plainQuery) (reply []byte, ok bool) {
	defer func() {
		if v := recover(); v != nil {
			if u.onPanic != nil {
				u.onPanic(v, debug.Stack())
			}
			reply, ok = nil, false
		}
	}()
	return u.fast.answerPacket(out, pkt, from, q)
}

// serveGeneral answers one packet that the fast path declined.
func (u *udpServer) serveGeneral(c *net.UDPConn, pkt []byte, from netip.AddrPort) {
	defer u.slow.Done()
	servePacket(u.handler, pkt, &udpWriter{conn: c, to: from}, u.badPacket)
}

// servePacket does with one packet what miekg/dns's Server.serveDNS
// (v1.1.73) does before the handler: a header that cannot be read is dropped
// (and counted); the header goes to AcceptRequest; a rejected request gets
// FORMERR (NOTIMP for other opcodes) built from its header alone; one that
// does not unpack is counted and gets FORMERR too; an accepted one goes to
// the handler. FuzzServeDNS runs it too.
func servePacket(h dns.Handler, pkt []byte, w dns.ResponseWriter, onBad func(error)) {
	if len(pkt) < 12 {
		onBad(dns.ErrShortRead)
		return
	}
	dh := dns.Header{
		Id:      binary.BigEndian.Uint16(pkt),
		Bits:    binary.BigEndian.Uint16(pkt[2:]),
		Qdcount: binary.BigEndian.Uint16(pkt[4:]),
		Ancount: binary.BigEndian.Uint16(pkt[6:]),
		Nscount: binary.BigEndian.Uint16(pkt[8:]),
		Arcount: binary.BigEndian.Uint16(pkt[10:]),
	}
	action := AcceptRequest(dh)
	switch action {
	case dns.MsgIgnore:
		return
	case dns.MsgAccept:
		req := new(dns.Msg)
		err := req.Unpack(pkt)
		if err == nil {
			h.ServeDNS(w, req)
			return
		}
		onBad(err)
		action = dns.MsgReject
	}
	req := new(dns.Msg)
	setHeader(req, dh)
	opcode := req.Opcode
	req.SetRcodeFormatError(req)
	req.Zero = false
	if action == dns.MsgRejectNotImplemented {
		req.Opcode = opcode
		req.Rcode = dns.RcodeNotImplemented
	}
	_ = w.WriteMsg(req)
}

func (u *udpServer) badPacket(err error) {
	if u.onBadPkt != nil {
		u.onBadPkt(err)
	}
}

// setHeader fills m's header from the raw one (dns.Msg.setHdr is not
// exported).
func setHeader(m *dns.Msg, dh dns.Header) {
	b := dh.Bits
	m.Id = dh.Id
	m.Response = b&flagQR != 0
	m.Opcode = int(b>>11) & 0xF
	m.Authoritative = b&(1<<10) != 0
	m.Truncated = b&(1<<9) != 0
	m.RecursionDesired = b&flagRD != 0
	m.RecursionAvailable = b&flagRA != 0
	m.Zero = b&(1<<6) != 0
	m.AuthenticatedData = b&flagAD != 0
	m.CheckingDisabled = b&flagCD != 0
	m.Rcode = int(b & 0xF)
}

// shutdown stops the readers and waits, up to ctx, for general-path queries
// being answered; then the socket is closed.
func (u *udpServer) shutdown(ctx context.Context) error {
	u.mu.Lock()
	u.closing.Store(true)
	readers := u.readers
	u.mu.Unlock()
	past := time.Unix(1, 0)
	for _, c := range readers {
		c.SetReadDeadline(past) // wakes every blocked read
	}
	done := make(chan struct{})
	go func() { u.slow.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	for _, c := range readers {
		c.Close()
	}
	if len(readers) == 0 {
		u.conn.Close()
	}
	return err
}

// udpWriter is the dns.ResponseWriter of a general-path UDP query.
type udpWriter struct {
	conn *net.UDPConn
	to   netip.AddrPort
}

var _ dns.ResponseWriter = (*udpWriter)(nil)

func (w *udpWriter) LocalAddr() net.Addr  { return w.conn.LocalAddr() }
func (w *udpWriter) RemoteAddr() net.Addr { return net.UDPAddrFromAddrPort(w.to) }

func (w *udpWriter) WriteMsg(m *dns.Msg) error {
	b, err := m.Pack()
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

func (w *udpWriter) Write(b []byte) (int, error) { return w.conn.WriteToUDPAddrPort(b, w.to) }

func (w *udpWriter) Close() error        { return nil }
func (w *udpWriter) TsigStatus() error   { return nil }
func (w *udpWriter) TsigTimersOnly(bool) {}
func (w *udpWriter) Hijack()             {}
