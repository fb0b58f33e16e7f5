package drill

import (
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// upstream is the loopback authoritative server of the generated zone.
type upstream struct {
	addr    string
	servers []*dns.Server
}

func startUpstream(want map[string]string, ttl time.Duration) (*upstream, error) {
	pc, ln, err := listenLoopbackPair()
	if err != nil {
		return nil, err
	}
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if len(r.Question) != 1 {
			m.Rcode = dns.RcodeFormatError
		} else if addr, ok := want[dns.CanonicalName(r.Question[0].Name)]; !ok {
			m.Rcode = dns.RcodeNameError
		} else if r.Question[0].Qtype == dns.TypeA {
			m.Answer = []dns.RR{&dns.A{
				Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: uint32(ttl / time.Second)},
				A:   net.ParseIP(addr),
			}}
		}
		_ = w.WriteMsg(m)
	})
	u := &upstream{addr: pc.LocalAddr().String()}
	u.servers = []*dns.Server{
		{PacketConn: pc, Handler: handler},
		{Listener: ln, Handler: handler},
	}
	var started sync.WaitGroup
	for _, s := range u.servers {
		started.Add(1)
		s.NotifyStartedFunc = started.Done
		go func() { _ = s.ActivateAndServe() }()
	}
	started.Wait()
	return u, nil
}

func (u *upstream) close() {
	for _, s := range u.servers {
		_ = s.Shutdown()
	}
}

// listenLoopbackPair binds UDP on a free loopback port and TCP on the same
// port, trying again when another process holds the TCP twin.
func listenLoopbackPair() (net.PacketConn, net.Listener, error) {
	var lastErr error
	for range 10 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
		lastErr = err
	}
	return nil, nil, lastErr
}

// warm asks every name through towerd until it answers, so the measured run
// shows what a node's clients see once their names are cached.
func (t *towerd) warm(l load) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(l.names))
	limit := make(chan struct{}, 64)
	for _, name := range l.names {
		wg.Add(1)
		limit <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-limit }()
			for range warmupTries {
				if l.ask(t.addr, name).ok {
					return
				}
			}
			errs <- fmt.Errorf("%s unanswered after %d tries", name, warmupTries)
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}
