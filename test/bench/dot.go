package main

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
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// Scenario 12, dot (issue 37): misses forwarded over DNS over TLS. One
// DNS over TLS server (in this process: a certificate of a CA made here,
// every A answered at once, handshakes and queries counted) stands for
// the site's resolver; towerd (tls://), unbound (forward-tls-upstream),
// CoreDNS (forward tls://, with cache; the binary make coredns builds)
// and, as the floor, towerd over UDP to the same answers are sent the
// same first-time names at the same rate. Per server: handshakes per
// 1,000 misses, CPU per answer, and p50/p99 of the misses as the client
// sees them.

const (
	dotAddr     = "127.0.0.18:8853" // TLS
	dotUDPAddr  = "127.0.0.18:5300" // the same answers over UDP, towerd's UDP floor
	dotName     = "dot.bench.example"
	dotMisses   = 3000
	dotRate     = 500 // q/s
	dotListenAt = "127.0.0.19:" + port
)

// dotServer is the bench's DNS over TLS server.
type dotServer struct {
	handshakes, queries atomic.Int64
	ln                  net.Listener
	udp                 *dns.Server
}

func answerA(q *dns.Msg) *dns.Msg {
	r := new(dns.Msg)
	r.SetReply(q)
	if len(q.Question) == 1 && q.Question[0].Qtype == dns.TypeA {
		r.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA,
			Class: dns.ClassINET, Ttl: 3600}, A: net.IPv4(192, 0, 2, 1)}}
	}
	return r
}

// startDoT makes a CA and a certificate for dotName, writes the CA to
// dir/dot-ca.pem and serves DNS over TLS on dotAddr, plain DNS on dotUDPAddr.
func startDoT(dir string) (*dotServer, string, error) {
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, "", err
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: dotName},
		DNSNames: []string{dotName}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, "", err
	}
	caFile := filepath.Join(dir, "dot-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		return nil, "", err
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	ln, err := tls.Listen("tcp", dotAddr, cfg)
	if err != nil {
		return nil, "", err
	}
	s := &dotServer{ln: ln}
	s.udp = &dns.Server{Addr: dotUDPAddr, Net: "udp", Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		_ = w.WriteMsg(answerA(q))
	})}
	ready := make(chan error, 1)
	s.udp.NotifyStartedFunc = func() { ready <- nil }
	go func() {
		if err := s.udp.ListenAndServe(); err != nil {
			ready <- err
		}
	}()
	if err := <-ready; err != nil {
		ln.Close()
		return nil, "", err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c.(*tls.Conn))
		}
	}()
	return s, caFile, nil
}

func (s *dotServer) close() {
	s.ln.Close()
	_ = s.udp.Shutdown()
}

// serve answers c's queries in order, pipelined.
func (s *dotServer) serve(c *tls.Conn) {
	defer c.Close()
	if c.Handshake() != nil {
		return
	}
	s.handshakes.Add(1)
	br := bufio.NewReader(c)
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
		if q.Unpack(msg) != nil {
			return
		}
		b, _ := answerA(q).Pack()
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(b))), b...)); err != nil {
			return
		}
	}
}

// dotPeers are the rows of scenario 12, in order; towerd-tls-cmp, the
// binary of -dot-compare over TLS, follows when it is given.
var dotPeers = []string{"towerd-udp", "towerd-tls", "unbound-tls", "coredns-tls"}

const dotCompare = "towerd-tls-cmp"

// peers are scenario 12's rows of this run.
func (b *bench) dotRows() []string {
	if b.dotCompare == "" {
		return dotPeers
	}
	return append(slices.Clone(dotPeers), dotCompare)
}

// dot runs scenario 12 for every peer once, each round starting one
// further along the rows: whatever else the machine does drifts over a
// round, and no peer always goes first.
func (b *bench) dot(round int) error {
	srv, caFile, err := startDoT(b.dir)
	if err != nil {
		return fmt.Errorf("dot server: %w", err)
	}
	defer srv.close()
	if _, err := os.Stat(b.coredns); b.coredns != "" && err != nil {
		fmt.Printf("  dot: no CoreDNS at %s (make coredns): its row is left out\n", b.coredns)
		b.coredns = ""
	}
	rows := b.dotRows()
	for i := range rows {
		peer := rows[(round-1+i)%len(rows)]
		if peer == "coredns-tls" && b.coredns == "" {
			continue
		}
		if err := b.dotPeer(round, peer, srv, caFile); err != nil {
			return fmt.Errorf("%s: %w", peer, err)
		}
	}
	return nil
}

func (b *bench) dotPeer(round int, peer string, srv *dotServer, caFile string) error {
	logf := filepath.Join(b.dir, fmt.Sprintf("%s-dot-%d.log", peer, round))
	var name string
	var args []string
	tlsServer := "tls://" + dotAddr + "#" + dotName
	switch peer {
	case "towerd-udp", "towerd-tls", dotCompare:
		up := dotUDPAddr
		if peer != "towerd-udp" {
			up = tlsServer
		}
		conf := filepath.Join(b.dir, fmt.Sprintf("towerd-dot-%d.toml", round))
		body := fmt.Sprintf("[[zone]]\nname = \".\"\nservers = [%q]\ntls_ca_file = %q\n", up, caFile)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			return err
		}
		name = b.towerd
		if peer == dotCompare {
			name = b.dotCompare
		}
		args = []string{"-config", conf, "-listen", dotListenAt, "-consul-http", "off",
			"-admin", "", "-state-dir", "", "-control", "", "-log-level", "warn"} // no control socket: as serverCommand
	case "unbound-tls":
		conf := filepath.Join(b.dir, fmt.Sprintf("unbound-dot-%d.conf", round))
		var err error
		if name, args, err = dotUnboundConf(b.dir, caFile).write(conf); err != nil {
			return err
		}
	case "coredns-tls":
		// forward keeps idle connections for reuse (expire, 10 s), one
		// query at a time on each; tls CA verifies the server against
		// the bench's CA, tls_servername is the name checked.
		conf := filepath.Join(b.dir, fmt.Sprintf("Corefile-dot-%d", round))
		host, p, _ := net.SplitHostPort(dotListenAt)
		body := fmt.Sprintf(`.:%s {
	bind %s
	errors
	cache
	forward . tls://%s {
		tls %s
		tls_servername %s
	}
}
`, p, host, dotAddr, caFile, dotName)
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			return err
		}
		name, args = b.coredns, []string{"-conf", conf, "-quiet"}
	}
	if err := addrFree(dotListenAt); err != nil {
		return err
	}
	// From the start: the first connection's handshake is the peer's too.
	h0, q0 := srv.handshakes.Load(), srv.queries.Load()
	p, err := b.procs.start(peer, logf, name, args...)
	if err != nil {
		return err
	}
	defer b.procs.stop(p)
	if err := waitAnswer(dotListenAt, "ready.dot.bench.example.", 15*time.Second); err != nil {
		return fmt.Errorf("did not answer: %w (log: %s)", err, tail(logf))
	}
	cpu0, err := readCPU(p.cmd.Process.Pid)
	if err != nil {
		return err
	}
	lat, failed := dotLoad(round, peer)
	cpu1, err := readCPU(p.cmd.Process.Pid)
	if err != nil {
		return err
	}
	answered := len(lat)
	slices.Sort(lat)
	r := b.res[dotRowKey(peer)]
	if r == nil {
		r = newResults()
		b.res[dotRowKey(peer)] = r
	}
	// Per 1,000 misses, the readiness query's connection included.
	r.add("dot.handshakes", float64(srv.handshakes.Load()-h0)*1000/dotMisses)
	cpu := cpu1.since(cpu0) / float64(max(answered, 1))
	r.add("dot.cpu", cpu)
	r.add("dot.p50", pct(lat, 50))
	r.add("dot.p99", pct(lat, 99))
	r.add("dot.failed", float64(failed))
	fmt.Printf("  dot %-14s round %d, %d misses: %d answered, %d failed; %d handshakes, %d queries at the server; cpu %.1f µs/answer, p50 %.2f ms, p99 %.2f ms\n",
		peer, round, dotMisses, answered, failed, srv.handshakes.Load()-h0, srv.queries.Load()-q0, cpu, pct(lat, 50), pct(lat, 99))
	if b.dotLat == nil {
		b.dotLat = map[string][]time.Duration{}
	}
	for _, ms := range lat {
		b.dotLat[peer] = append(b.dotLat[peer], time.Duration(ms*float64(time.Millisecond)))
	}
	return nil
}

// dotUnboundConf is the unbound of scenario 12: one thread, forwarding
// everything to the DoT server, which it verifies against caFile.
func dotUnboundConf(dir, caFile string) unboundConf {
	return unboundConf{
		addr:    dotListenAt,
		dir:     dir,
		threads: "\tnum-threads: 1\n",
		server:  fmt.Sprintf("\ttls-cert-bundle: %q\n", caFile),
		zones:   unboundForwardZone(".", dotAddr+"#"+dotName) + "\tforward-tls-upstream: yes\n",
	}
}

func dotRowKey(peer string) string { return "dot:" + peer }

// dotLoad sends dotMisses first-time names at dotRate, each waited for
// (3 s), and returns the answered ones' latencies in milliseconds.
func dotLoad(round int, peer string) ([]float64, int) {
	var mu sync.Mutex
	var lat []float64
	failed := 0
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / dotRate)
	defer tick.Stop()
	c := &dns.Client{Timeout: 3 * time.Second}
	for i := range dotMisses {
		<-tick.C
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := new(dns.Msg)
			m.SetQuestion(fmt.Sprintf("m%d-%d.%s.bench.example.", i, round, peer), dns.TypeA)
			start := time.Now()
			r, _, err := c.Exchange(m, dotListenAt)
			d := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
				failed++
				return
			}
			lat = append(lat, float64(d.Microseconds())/1000)
		}()
	}
	wg.Wait()
	return lat, failed
}

// pct is the p-th percentile of sorted.
func pct(sorted []float64, p int) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}

// dotTable prints scenario 12's rows: medians over the rounds; then each
// round's CPU per answer, so that their spread shows, and the p50 and p99
// of every round's answers pooled, each with the 95 % interval of its rank
// (quantileInterval): one round's p99 is its 30th-slowest answer, and a
// few more or fewer slow ones move it.
func (b *bench) dotTable(w io.Writer) {
	fmt.Fprintf(w, "\n12. misses over DNS over TLS (%d first-time names at %d q/s, one DoT server)\n", dotMisses, dotRate)
	fmt.Fprintf(w, "%-14s %18s %14s %10s %10s %8s\n", "", "handshakes/1000", "cpu µs/answer", "p50 ms", "p99 ms", "failed")
	rows := b.dotRows()
	for _, peer := range rows {
		r := b.res[dotRowKey(peer)]
		if r == nil {
			continue
		}
		v := func(k string) float64 { f, _ := r.median(k); return f }
		fmt.Fprintf(w, "%-14s %18.1f %14.1f %10.2f %10.2f %8.0f\n", peer,
			v("dot.handshakes"), v("dot.cpu"), v("dot.p50"), v("dot.p99"), v("dot.failed"))
	}
	fmt.Fprintf(w, "%-14s %-30s %-26s %s\n", "", "cpu µs/answer, each round", "p50 ms pooled [95 %]", "p99 ms pooled [95 %]")
	for _, peer := range rows {
		r := b.res[dotRowKey(peer)]
		if r == nil {
			continue
		}
		var cpus string
		for _, c := range r.v["dot.cpu"] {
			cpus += fmt.Sprintf(" %.1f", c)
		}
		all := slices.Clone(b.dotLat[peer])
		slices.Sort(all)
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		p50, lo50, hi50 := quantileInterval(all, 0.50)
		p99, lo99, hi99 := quantileInterval(all, 0.99)
		fmt.Fprintf(w, "%-14s %-30s %.3f [%.3f, %.3f]%5s %.2f [%.2f, %.2f] of %d\n", peer, cpus,
			ms(p50), ms(lo50), ms(hi50), "", ms(p99), ms(lo99), ms(hi99), len(all))
	}
	// Each round's rows run one after the other: a ratio within a round
	// is less moved by the machine's drift than the medians' ratio.
	base := b.res[dotRowKey("unbound-tls")]
	for _, peer := range rows {
		r := b.res[dotRowKey(peer)]
		if r == nil || base == nil || peer == "unbound-tls" || len(r.v["dot.cpu"]) != len(base.v["dot.cpu"]) {
			continue
		}
		ratios := newResults()
		var each string
		for i, c := range r.v["dot.cpu"] {
			ratios.add("x", c/base.v["dot.cpu"][i])
			each += fmt.Sprintf(" %.2f", c/base.v["dot.cpu"][i])
		}
		m, _ := ratios.median("x")
		fmt.Fprintf(w, "%-14s cpu / unbound-tls's in the same round:%s (median %.2f)\n", peer, each, m)
	}
}
