package faultproxy

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"time"
)

// maxMessage is the largest DNS message; a smaller UDP buffer could cut one.
const maxMessage = 65535

// serveUDP reads clients' queries; each one that is not dropped at once is
// handled by its own goroutine, so a held query never delays the next.
func (p *Proxy) serveUDP() {
	defer p.wg.Done()
	buf := make([]byte, maxMessage)
	for {
		n, from, err := p.pc.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		query := append([]byte(nil), buf[:n]...)
		p.read(query)
		f := p.choose.draw()
		if p.dropped(f) {
			continue
		}
		p.wg.Add(1)
		go p.handleUDP(query, from, f)
	}
}

// dropped reports, and counts, a query that never reaches the server: the
// proxy is black-holing, or this query's fate is to be lost.
func (p *Proxy) dropped(f fate) bool {
	switch {
	case p.choose.blackholing():
		p.n.blackholed.Add(1)
		return true
	case f.loseQuery:
		p.n.lostQueries.Add(1)
		return true
	}
	return false
}

// handleUDP applies one query's fate: hold it, answer locally or ask the
// target, then relay the reply with whatever forgeries and copies were drawn.
func (p *Proxy) handleUDP(query []byte, from net.Addr, f fate) {
	defer p.wg.Done()
	if !p.hold(f.hold) {
		return
	}
	if f.servFail || f.truncate {
		if wire := localReply(query, f.servFail); wire != nil {
			if f.servFail {
				p.n.servFails.Add(1)
			} else {
				p.n.truncated.Add(1)
			}
			_, _ = p.pc.WriteTo(wire, from)
		}
		return
	}
	reply, err := p.ask("udp", query)
	if err != nil {
		p.n.targetErrors.Add(1)
		return
	}
	switch {
	case p.choose.blackholing():
		p.n.blackholed.Add(1)
		return
	case f.loseReply:
		p.n.lostReplies.Add(1)
		return
	}
	// Forgeries go first: a resolver that takes the first datagram to
	// arrive is fooled, one that checks ID, question and source is not.
	if f.wrongID {
		if wire := forge(reply, true, false); wire != nil {
			p.n.wrongID.Add(1)
			_, _ = p.pc.WriteTo(wire, from)
		}
	}
	if f.wrongQuestion {
		if wire := forge(reply, false, true); wire != nil {
			p.n.wrongQuestion.Add(1)
			_, _ = p.pc.WriteTo(wire, from)
		}
	}
	if f.wrongSource {
		if wire := forge(reply, false, false); wire != nil {
			p.n.wrongSource.Add(1)
			_, _ = p.other.WriteTo(wire, from)
		}
	}
	p.n.replies.Add(1) // before the write: Stats never lag behind a client
	_, _ = p.pc.WriteTo(reply, from)
	if f.duplicate {
		p.n.duplicated.Add(1)
		_, _ = p.pc.WriteTo(reply, from)
	}
}

// ask sends one query to the target over network from a fresh connection
// and returns the raw reply. Close interrupts it.
func (p *Proxy) ask(network string, query []byte) ([]byte, error) {
	p.n.forwarded.Add(1)
	conn, err := net.DialTimeout(network, p.target, p.targetTimeout)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stop := context.AfterFunc(p.ctx, func() { conn.Close() })
	defer stop()
	if err := conn.SetDeadline(time.Now().Add(p.targetTimeout)); err != nil {
		return nil, err
	}
	if network == "tcp" {
		return exchangeTCP(conn, query)
	}
	if _, err := conn.Write(query); err != nil {
		return nil, err
	}
	buf := make([]byte, maxMessage)
	n, err := conn.Read(buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// exchangeTCP writes one length-prefixed message and reads one back
// (RFC 1035 section 4.2.2).
func exchangeTCP(conn net.Conn, msg []byte) ([]byte, error) {
	if err := writeTCP(conn, msg); err != nil {
		return nil, err
	}
	return readTCP(conn)
}

func writeTCP(w io.Writer, msg []byte) error {
	_, err := w.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(msg))), msg...))
	return err
}

func readTCP(r io.Reader) ([]byte, error) {
	var prefix [2]byte
	if _, err := io.ReadFull(r, prefix[:]); err != nil {
		return nil, err
	}
	msg := make([]byte, binary.BigEndian.Uint16(prefix[:]))
	if _, err := io.ReadFull(r, msg); err != nil {
		return nil, err
	}
	return msg, nil
}

// serveTCP accepts clients' connections. Each carries any number of
// length-prefixed queries (RFC 7766 pipelining); each query gets its own
// fate and goroutine, and replies go back in the order they are ready.
func (p *Proxy) serveTCP() {
	defer p.wg.Done()
	for {
		conn, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		if p.ctx.Err() != nil {
			p.mu.Unlock()
			conn.Close()
			return
		}
		p.tcpConns[conn] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serveConn(conn)
	}
}

// serveConn reads one client connection's queries until it closes. Over
// TCP the proxy delays, loses (no reply; the connection stays open),
// answers SERVFAIL and black-holes; forgeries, duplicates and truncation
// are UDP faults only (a forged TCP segment needs a hijacked connection).
func (p *Proxy) serveConn(conn net.Conn) {
	defer p.wg.Done()
	var writeMu sync.Mutex // replies of pipelined queries must not interleave
	var queries sync.WaitGroup
	defer func() {
		queries.Wait()
		p.mu.Lock()
		delete(p.tcpConns, conn)
		p.mu.Unlock()
		conn.Close()
	}()
	for {
		query, err := readTCP(conn)
		if err != nil {
			return
		}
		p.read(query)
		p.n.tcpQueries.Add(1)
		f := p.choose.draw()
		if p.dropped(f) {
			continue
		}
		queries.Add(1)
		go func() {
			defer queries.Done()
			reply, genuine := p.handleTCP(query, f)
			if reply == nil {
				return
			}
			writeMu.Lock()
			defer writeMu.Unlock()
			if genuine {
				// Counted before the write, so a client that has its
				// reply never sees Stats lag behind it.
				p.n.replies.Add(1)
			}
			_ = writeTCP(conn, reply)
		}()
	}
}

// handleTCP applies a TCP query's fate and returns the reply to send (nil
// for none) and whether it is the target's own.
func (p *Proxy) handleTCP(query []byte, f fate) ([]byte, bool) {
	if !p.hold(f.hold) {
		return nil, false
	}
	if f.servFail {
		p.n.servFails.Add(1)
		return localReply(query, true), false
	}
	reply, err := p.ask("tcp", query)
	if err != nil {
		p.n.targetErrors.Add(1)
		return nil, false
	}
	switch {
	case p.choose.blackholing():
		p.n.blackholed.Add(1)
		return nil, false
	case f.loseReply:
		p.n.lostReplies.Add(1)
		return nil, false
	}
	return reply, true
}
