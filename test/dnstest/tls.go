package dnstest

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// CA is a certificate authority made for one test: a site's own CA, as
// a DNS over TLS server's certificate is signed by (issue 37).
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA certificate, PEM-encoded (what tls_ca_file holds).
	PEM []byte
}

// NewCA makes a CA.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "towerd test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Pool is a pool of the CA alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// WriteFile writes the CA's PEM into dir and returns the path.
func (ca *CA) WriteFile(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(path, ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Leaf issues a server certificate for name (and the loopback addresses),
// as a tls.Certificate and as PEM (certificate, key).
func (ca *CA) Leaf(t testing.TB, name string) (tls.Certificate, []byte, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return pair, certPEM, keyPEM
}

// DoTMode is how a DoTServer behaves.
type DoTMode int

const (
	// DoTAnswer answers every query, pipelined, in order of arrival.
	DoTAnswer DoTMode = iota
	// DoTCloseAfterAnswer closes the connection after each answer.
	DoTCloseAfterAnswer
	// DoTSilent completes the handshake and never answers.
	DoTSilent
	// DoTEndless answers nothing and writes replies to no query without end.
	DoTEndless
	// DoTNoHandshake accepts TCP and never completes the handshake.
	DoTNoHandshake
	// DoTResetFirst resets its first connection (TCP RST) once it has
	// read SetResetAfter's count of queries (1 by default), answering
	// none of them; later connections answer as DoTAnswer does.
	DoTResetFirst
	// DoTResetAll resets every connection as DoTResetFirst does its first.
	DoTResetAll
)

// DoTServer is a DNS over TLS server on loopback that a test scripts: it
// answers every A question with 192.0.2.1 (NXDOMAIN under "nx."), and
// counts connections, completed and resumed handshakes and queries, and
// keeps the sizes of queries and whether they carried padding.
type DoTServer struct {
	Addr string // 127.0.0.1:port
	Mode DoTMode

	ln          net.Listener
	conns       atomic.Int64
	handshakes  atomic.Int64
	resumptions atomic.Int64
	queries     atomic.Int64
	mu          sync.Mutex
	sizes       []int
	padded      int
	keepalive   int
	wg          sync.WaitGroup
	resetAfter  atomic.Int64
	resets      atomic.Int64
}

// SetResetAfter sets how many queries DoTResetFirst and DoTResetAll read
// on a connection before they reset it.
func (s *DoTServer) SetResetAfter(n int) { s.resetAfter.Store(int64(n)) }

// Resets counts connections reset.
func (s *DoTServer) Resets() int { return int(s.resets.Load()) }

// NewDoTServer starts a DoTServer with cert in mode; it stops with the test.
func NewDoTServer(t testing.TB, cert tls.Certificate, mode DoTMode) *DoTServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &DoTServer{Addr: ln.Addr().String(), Mode: mode, ln: ln}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.serve(c, cfg)
			}()
		}
	}()
	t.Cleanup(s.Close)
	return s
}

// Close stops the server and closes its connections' listener.
func (s *DoTServer) Close() { s.ln.Close() }

// Connections counts TCP connections accepted.
func (s *DoTServer) Connections() int { return int(s.conns.Load()) }

// Handshakes counts completed TLS handshakes, Resumptions those that
// resumed a session.
func (s *DoTServer) Handshakes() int  { return int(s.handshakes.Load()) }
func (s *DoTServer) Resumptions() int { return int(s.resumptions.Load()) }

// Queries counts queries read over TLS.
func (s *DoTServer) Queries() int { return int(s.queries.Load()) }

// QuerySizes are the sizes of the queries read, and how many carried the
// padding and the keepalive option.
func (s *DoTServer) QuerySizes() (sizes []int, padded, keepalive int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.sizes...), s.padded, s.keepalive
}

func (s *DoTServer) serve(raw net.Conn, cfg *tls.Config) {
	defer raw.Close()
	if s.Mode == DoTNoHandshake {
		_, _ = io.Copy(io.Discard, raw) // reads the ClientHello, says nothing
		return
	}
	c := tls.Server(raw, cfg)
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if err := c.Handshake(); err != nil {
		return
	}
	s.handshakes.Add(1)
	if c.ConnectionState().DidResume {
		s.resumptions.Add(1)
	}
	if s.Mode == DoTEndless {
		go func() { _, _ = io.Copy(io.Discard, c) }()
		m := new(dns.Msg)
		m.SetQuestion("endless.example.", dns.TypeA)
		m.Response = true
		b, _ := m.Pack()
		frame := binary.BigEndian.AppendUint16(nil, uint16(len(b)))
		frame = append(frame, b...)
		for i := 0; ; i++ {
			binary.BigEndian.PutUint16(frame[2:], uint16(i))
			if _, err := c.Write(frame); err != nil {
				return
			}
		}
	}
	reset := s.Mode == DoTResetAll || s.Mode == DoTResetFirst && s.resets.Load() == 0
	resetAfter := max(s.resetAfter.Load(), 1)
	read := int64(0)
	br := bufio.NewReader(c)
	var wmu sync.Mutex
	for {
		var prefix [2]byte
		if _, err := io.ReadFull(br, prefix[:]); err != nil {
			return
		}
		msg := make([]byte, binary.BigEndian.Uint16(prefix[:]))
		if _, err := io.ReadFull(br, msg); err != nil {
			return
		}
		s.queries.Add(1)
		q := new(dns.Msg)
		if q.Unpack(msg) != nil || len(q.Question) != 1 {
			return
		}
		s.note(len(msg), q)
		if read++; reset && read >= resetAfter {
			// Linger 0: the close sends a RST, not a FIN.
			if tcp, ok := raw.(*net.TCPConn); ok {
				_ = tcp.SetLinger(0)
			}
			s.resets.Add(1)
			return
		}
		if s.Mode == DoTSilent || reset {
			continue
		}
		reply := answer(q)
		b, _ := reply.Pack()
		wmu.Lock()
		_, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(b))), b...))
		wmu.Unlock()
		if err != nil || s.Mode == DoTCloseAfterAnswer {
			return
		}
	}
}

func (s *DoTServer) note(size int, q *dns.Msg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sizes = append(s.sizes, size)
	if opt := q.IsEdns0(); opt != nil {
		for _, o := range opt.Option {
			switch o.(type) {
			case *dns.EDNS0_PADDING:
				s.padded++
			case *dns.EDNS0_TCP_KEEPALIVE:
				s.keepalive++
			}
		}
	}
}

func answer(q *dns.Msg) *dns.Msg {
	reply := new(dns.Msg)
	reply.SetReply(q)
	name := q.Question[0].Name
	if dns.IsSubDomain("nx.", dns.CanonicalName(name)) {
		reply.Rcode = dns.RcodeNameError
		return reply
	}
	if q.Question[0].Qtype == dns.TypeA {
		reply.Answer = append(reply.Answer, &dns.A{
			Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
			A:   netip.MustParseAddr("192.0.2.1").AsSlice()})
	}
	return reply
}
