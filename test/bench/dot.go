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
// sees them. The rows run at once, each on an address and a port of the
// DoT server of its own, and the load asks each in turn, dotSlice
// queries at a time: one row's six seconds alone used to meet bursts of
// the machine's other load that the next row's did not, and a p99 (the
// 30th-slowest answer) was whichever burst fell in the window.

const (
	dotHost    = "127.0.0.18"      // the DoT server: a TLS port per row (dotTLSPort)
	dotUDPAddr = "127.0.0.18:5300" // the same answers over UDP, towerd's UDP floor
	dotName    = "dot.bench.example"
	dotMisses  = 3000
	dotRate    = 500 // q/s
	// dotSlice is how many queries in a row one row is asked in its turn:
	// 100 ms at dotRate.
	dotSlice = 50
)

// dotListen is each row's address; dotTLSPort its port of the DoT server,
// whose handshakes and queries are counted by port.
var (
	dotListen = map[string]string{"towerd-udp": "127.0.0.19:" + port, "towerd-tls": "127.0.0.26:" + port,
		"unbound-tls": "127.0.0.27:" + port, "coredns-tls": "127.0.0.28:" + port, dotCompare: "127.0.0.29:" + port}
	dotTLSPort = map[string]int{"towerd-tls": 8853, "unbound-tls": 8854, "coredns-tls": 8855, dotCompare: 8856}
)

func dotTLSAddr(peer string) string { return fmt.Sprintf("%s:%d", dotHost, dotTLSPort[peer]) }

// dotServer is the bench's DNS over TLS server.
type dotServer struct {
	counts map[string]*dotCounts // by row
	lns    []net.Listener
	udp    *dns.Server
}

// dotCounts are what one row's port of the server saw.
type dotCounts struct{ handshakes, queries atomic.Int64 }

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
// dir/dot-ca.pem and serves DNS over TLS on each of rows' TLS ports, plain
// DNS on dotUDPAddr.
func startDoT(dir string, rows []string) (*dotServer, string, error) {
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
	s := &dotServer{counts: map[string]*dotCounts{}}
	for _, peer := range rows {
		if _, ok := dotTLSPort[peer]; !ok {
			continue
		}
		ln, err := tls.Listen("tcp", dotTLSAddr(peer), cfg)
		if err != nil {
			s.close()
			return nil, "", err
		}
		s.lns = append(s.lns, ln)
		n := &dotCounts{}
		s.counts[peer] = n
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go n.serve(c.(*tls.Conn))
			}
		}()
	}
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
		s.udp = nil
		s.close()
		return nil, "", err
	}
	return s, caFile, nil
}

func (s *dotServer) close() {
	for _, ln := range s.lns {
		ln.Close()
	}
	if s.udp != nil {
		_ = s.udp.Shutdown()
	}
}

// serve answers c's queries in order, pipelined.
func (s *dotCounts) serve(c *tls.Conn) {
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

// dotRun is one row of a round, running.
type dotRun struct {
	peer   string
	p      *proc
	cpu0   cpuReading
	lat    []float64 // ms
	failed int
}

// dot runs scenario 12's round: every row started (each round starting
// one further along the rows), then asked in turn (dotLoad).
func (b *bench) dot(round int) error {
	if _, err := os.Stat(b.coredns); b.coredns != "" && err != nil {
		fmt.Printf("  dot: no CoreDNS at %s (make coredns): its row is left out\n", b.coredns)
		b.coredns = ""
	}
	var rows []string
	for _, peer := range rotated(b.dotRows(), round-1) {
		if peer != "coredns-tls" || b.coredns != "" {
			rows = append(rows, peer)
		}
	}
	srv, caFile, err := startDoT(b.dir, rows)
	if err != nil {
		return fmt.Errorf("dot server: %w", err)
	}
	defer srv.close()
	var runs []*dotRun
	defer func() {
		for _, r := range runs {
			b.procs.stop(r.p)
		}
	}()
	for _, peer := range rows {
		p, err := b.dotStart(round, peer, caFile)
		if err != nil {
			return fmt.Errorf("%s: %w", peer, err)
		}
		runs = append(runs, &dotRun{peer: peer, p: p})
	}
	for _, r := range runs {
		if r.cpu0, err = readCPU(r.p.cmd.Process.Pid); err != nil {
			return err
		}
	}
	dotLoad(round, runs)
	for _, run := range runs {
		cpu1, err := readCPU(run.p.cmd.Process.Pid)
		if err != nil {
			return err
		}
		peer, lat := run.peer, run.lat
		answered := len(lat)
		slices.Sort(lat)
		r := b.res[dotRowKey(peer)]
		if r == nil {
			r = newResults()
			b.res[dotRowKey(peer)] = r
		}
		// Per 1,000 misses, the readiness query's connection included.
		var hs, qs int64
		if n := srv.counts[peer]; n != nil {
			hs, qs = n.handshakes.Load(), n.queries.Load()
		}
		r.add("dot.handshakes", float64(hs)*1000/dotMisses)
		cpu := cpu1.since(run.cpu0) / float64(max(answered, 1))
		r.add("dot.cpu", cpu)
		r.add("dot.p50", pct(lat, 50))
		r.add("dot.p99", pct(lat, 99))
		r.add("dot.failed", float64(run.failed))
		fmt.Printf("  dot %-14s round %d, %d misses: %d answered, %d failed; %d handshakes, %d queries at the server; cpu %.1f µs/answer, p50 %.2f ms, p99 %.2f ms\n",
			peer, round, dotMisses, answered, run.failed, hs, qs, cpu, pct(lat, 50), pct(lat, 99))
		if b.dotLat == nil {
			b.dotLat = map[string][]time.Duration{}
		}
		for _, ms := range lat {
			b.dotLat[peer] = append(b.dotLat[peer], time.Duration(ms*float64(time.Millisecond)))
		}
	}
	return nil
}

// dotStart starts peer on its address and waits until it answers.
func (b *bench) dotStart(round int, peer, caFile string) (*proc, error) {
	logf := filepath.Join(b.dir, fmt.Sprintf("%s-dot-%d.log", peer, round))
	listen := dotListen[peer]
	var name string
	var args []string
	tlsServer := "tls://" + dotTLSAddr(peer) + "#" + dotName
	switch peer {
	case "towerd-udp", "towerd-tls", dotCompare:
		up := dotUDPAddr
		if peer != "towerd-udp" {
			up = tlsServer
		}
		conf := filepath.Join(b.dir, fmt.Sprintf("%s-dot-%d.toml", peer, round))
		body := fmt.Sprintf("[[zone]]\nname = \".\"\nservers = [%q]\ntls_ca_file = %q\n", up, caFile)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			return nil, err
		}
		name = b.towerd
		if peer == dotCompare {
			name = b.dotCompare
		}
		args = []string{"-config", conf, "-listen", listen, "-consul-http", "off",
			"-admin", "", "-state-dir", "", "-control", "", "-log-level", "warn"} // no control socket: as serverCommand
	case "unbound-tls":
		conf := filepath.Join(b.dir, fmt.Sprintf("unbound-dot-%d.conf", round))
		var err error
		if name, args, err = dotUnboundConf(b.dir, caFile).write(conf); err != nil {
			return nil, err
		}
	case "coredns-tls":
		// forward keeps idle connections for reuse (expire, 10 s), one
		// query at a time on each; tls CA verifies the server against
		// the bench's CA, tls_servername is the name checked.
		conf := filepath.Join(b.dir, fmt.Sprintf("Corefile-dot-%d", round))
		host, p, _ := net.SplitHostPort(listen)
		body := fmt.Sprintf(`.:%s {
	bind %s
	errors
	cache
	forward . %s {
		tls %s
		tls_servername %s
	}
}
`, p, host, "tls://"+dotTLSAddr(peer), caFile, dotName)
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			return nil, err
		}
		name, args = b.coredns, []string{"-conf", conf, "-quiet"}
	}
	if err := addrFree(listen); err != nil {
		return nil, err
	}
	p, err := b.procs.start(peer, logf, name, args...)
	if err != nil {
		return nil, err
	}
	if err := waitAnswer(listen, "ready.dot.bench.example.", 15*time.Second); err != nil {
		b.procs.stop(p)
		return nil, fmt.Errorf("did not answer: %w (log: %s)", err, tail(logf))
	}
	return p, nil
}

// dotUnboundConf is the unbound of scenario 12: one thread, forwarding
// everything to the DoT server, which it verifies against caFile.
func dotUnboundConf(dir, caFile string) unboundConf {
	return unboundConf{
		addr:    dotListen["unbound-tls"],
		dir:     dir,
		threads: "\tnum-threads: 1\n",
		server:  fmt.Sprintf("\ttls-cert-bundle: %q\n", caFile),
		zones:   unboundForwardZone(".", dotTLSAddr("unbound-tls")+"#"+dotName) + "\tforward-tls-upstream: yes\n",
	}
}

func dotRowKey(peer string) string { return "dot:" + peer }

// dotLoad sends each of runs dotMisses first-time names, dotRate a second
// in all, dotSlice to one row then dotSlice to the next, each waited for
// (3 s), and keeps the answered ones' latencies in milliseconds.
func dotLoad(round int, runs []*dotRun) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / dotRate)
	defer tick.Stop()
	c := &dns.Client{Timeout: 3 * time.Second}
	for i := range len(runs) * dotMisses {
		<-tick.C
		r := runs[(i/dotSlice)%len(runs)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := new(dns.Msg)
			m.SetQuestion(fmt.Sprintf("m%d-%d.%s.bench.example.", i, round, r.peer), dns.TypeA)
			start := time.Now()
			resp, _, err := c.Exchange(m, dotListen[r.peer])
			d := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			if err != nil || resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 {
				r.failed++
				return
			}
			r.lat = append(r.lat, float64(d.Microseconds())/1000)
		}()
	}
	wg.Wait()
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
	// A ratio within a round (its rows asked in turn, dotLoad) is less
	// moved by the machine's drift than the medians' ratio.
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
