package resolver

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/test/dnstest"
)

// fuzzHandler is the fuzzers' handler: a small cache, serve-stale, the
// in-memory upstream for "." and consul., all on a fake clock the fuzz
// function moves; more adds to its Config.
func fuzzHandler(f *testing.F, more func(*Config)) (*Handler, *fakeClock) {
	clock := newFakeClock()
	c, err := cache.New(cache.Config{Capacity: 64, MaxStaleAge: time.Hour, Now: clock.Now})
	if err != nil {
		f.Fatal(err)
	}
	cfg := Config{
		Zones:              []Zone{{Name: ".", Upstream: overLoopback(f, ".", memUpstream)}, {Name: "consul.", Upstream: overLoopback(f, "consul.", memUpstream)}},
		ServeStale:         true,
		StaleClientTimeout: time.Second,
		StaleAnswerTTL:     30 * time.Second,
		FailureRecheck:     30 * time.Second,
		Now:                clock.Now,
	}
	if more != nil {
		more(&cfg)
	}
	h, err := NewHandler(cfg, c, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(h.Close)
	return h, clock
}

// FuzzServeDNS sends raw packets down the request path: the header check
// (AcceptRequest), parsing, the panic guard and the real Handler with its
// cache, coalescing and serve-stale, as the daemon's listeners run them.
// Nothing may panic, and a reply, when there is one, must parse, be a
// response, carry the request's ID and fit the client's UDP size.
//
// It runs in memory, not over a socket: a packet towerd drops would cost a
// socket read timeout per input and the fuzzer would crawl. servePacket
// below mirrors what miekg/dns's Server does with a packet; the end-to-end
// test TestFuzzCorpusAgainstDaemon sends the same corpus to the real binary
// over UDP.
func FuzzServeDNS(f *testing.F) {
	for _, p := range seedPackets(f) {
		f.Add(p, false)
	}
	f.Add(seedPackets(f)[0], true)

	h, clock := fuzzHandler(f, func(c *Config) {
		// Local data and a pushed source, chained as the daemon does:
		// every name a client sends reaches their Lookup.
		c.Records = Chain{{RecordSource: diffLocal, Label: SourceLocal}, {RecordSource: diffRecords{}, Label: SourceRecords}}
		c.Prefetch = true
	})

	f.Fuzz(func(t *testing.T, packet []byte, tcp bool) {
		// Each input moves time on, so entries go stale, get prefetched and
		// fall out of the stale window across the run.
		clock.Advance(17 * time.Second)
		var panicked any
		guarded := recoverer{next: h, onPanic: func(v any, stack []byte) { panicked = fmt.Sprintf("%v\n%s", v, stack) }}
		w := &memWriter{tcp: tcp}
		// As the listeners run it: the fast path first (over UDP and TCP),
		// then the general path for what it declines.
		var q plainQuery
		if reply, ok := h.answerPacket(nil, packet, fuzzClientUDP.AddrPort(), tcp, &q); ok {
			w.Write(reply)
		} else {
			servePacket(guarded, packet, w, func(error) {})
		}
		if panicked != nil {
			t.Fatalf("handler panicked: %v", panicked)
		}
		if w.reply == nil {
			return // dropped: a response, or a header that cannot be read
		}
		if w.writes > 1 {
			t.Fatalf("%d replies to one packet", w.writes)
		}
		checkReply(t, packet, w.reply, tcp)
	})
}

// checkReply holds a reply to the rules every answer follows.
func checkReply(t *testing.T, packet, reply []byte, tcp bool) {
	t.Helper()
	m := new(dns.Msg)
	if err := m.Unpack(reply); err != nil {
		t.Fatalf("the reply does not parse: %v", err)
	}
	if !m.Response {
		t.Fatalf("the reply has QR clear")
	}
	if id := binary.BigEndian.Uint16(packet); m.Id != id {
		t.Fatalf("reply ID %d, request ID %d", m.Id, id)
	}
	if tcp {
		return
	}
	limit := dns.MinMsgSize
	req := new(dns.Msg)
	if req.Unpack(packet) == nil {
		if opt := req.IsEdns0(); opt != nil {
			limit = max(limit, int(opt.UDPSize()))
		}
	}
	if len(reply) > limit {
		t.Fatalf("UDP reply of %d bytes, the client takes %d", len(reply), limit)
	}
	if len(reply) > DefaultMaxUDPSize {
		t.Fatalf("UDP reply of %d bytes, over the %d-byte cap (issue 13)", len(reply), DefaultMaxUDPSize)
	}
}

// memWriter is a dns.ResponseWriter that keeps what is written.
type memWriter struct {
	tcp    bool
	remote net.Addr // the client; nil: fuzzClientUDP or fuzzClientTCP
	writes int
	reply  []byte
}

var (
	fuzzClientUDP = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53000}
	fuzzClientTCP = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53000}
	fuzzLocalUDP  = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}
	fuzzLocalTCP  = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}
)

func (w *memWriter) LocalAddr() net.Addr {
	if w.tcp {
		return fuzzLocalTCP
	}
	return fuzzLocalUDP
}

func (w *memWriter) RemoteAddr() net.Addr {
	if w.remote != nil {
		return w.remote
	}
	if w.tcp {
		return fuzzClientTCP
	}
	return fuzzClientUDP
}

// WriteMsg packs m the way miekg/dns's response writer does.
func (w *memWriter) WriteMsg(m *dns.Msg) error {
	b, err := m.Pack()
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

func (w *memWriter) Write(b []byte) (int, error) {
	w.writes++
	w.reply = append([]byte(nil), b...)
	return len(b), nil
}

func (w *memWriter) Close() error        { return nil }
func (w *memWriter) TsigStatus() error   { return nil }
func (w *memWriter) TsigTimersOnly(bool) {}
func (w *memWriter) Hijack()             {}

// memUpstream answers from the question alone, so that every kind of reply
// reaches the cache and the answer path: names with "nx" get NXDOMAIN, with
// "fail" an error (serve-stale), with "big" more TXT records than 512 bytes
// hold (truncation); A questions get an address whose TTL depends on the
// name's length (0, 30 or 60 s); other types get NODATA with an SOA.
var memUpstream = dnstest.ExchangeFunc(func(_ context.Context, q *dns.Msg) (*dns.Msg, error) {
	name := strings.ToLower(q.Question[0].Name)
	if strings.Contains(name, "fail") {
		return nil, errors.New("memUpstream: failing on purpose")
	}
	m := new(dns.Msg)
	m.SetReply(q)
	ttl := uint32(len(name)%3) * 30
	hdr := func(t uint16) dns.RR_Header {
		return dns.RR_Header{Name: q.Question[0].Name, Rrtype: t, Class: dns.ClassINET, Ttl: ttl}
	}
	soa := &dns.SOA{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 60},
		Ns: "a.root.", Mbox: "h.root.", Serial: 1, Refresh: 1, Retry: 1, Expire: 1, Minttl: 60}
	switch {
	case strings.Contains(name, "nx"):
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{soa}
	case strings.Contains(name, "big"):
		for i := range 20 {
			m.Answer = append(m.Answer, &dns.TXT{Hdr: hdr(dns.TypeTXT), Txt: []string{strings.Repeat("x", 40+i)}})
		}
	case q.Question[0].Qtype == dns.TypeA:
		m.Answer = []dns.RR{&dns.A{Hdr: hdr(dns.TypeA), A: net.IPv4(192, 0, 2, byte(len(name)))}}
	default:
		m.Ns = []dns.RR{soa}
	}
	return m, nil
})

// corpusDir is FuzzServeDNS's committed seed corpus. The end-to-end test
// TestFuzzCorpusAgainstDaemon sends every packet in it to the real binary.
const corpusDir = "testdata/fuzz/FuzzServeDNS"

// seedPackets are requests that reach each branch of the request path: good
// queries of several kinds, and the malformed, hostile and odd ones a
// resolver on a shared node meets sooner or later.
func seedPackets(tb testing.TB) [][]byte {
	tb.Helper()
	var out [][]byte
	pack := func(m *dns.Msg) {
		b, err := m.Pack()
		if err != nil {
			tb.Fatalf("packing seed %v: %v", m.Question, err)
		}
		out = append(out, b)
	}
	q := func(name string, qtype uint16, edns bool, tweak func(*dns.Msg)) {
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		m.Id = 0x1234
		if edns {
			m.SetEdns0(1232, false)
		}
		if tweak != nil {
			tweak(m)
		}
		pack(m)
	}
	q("www.example.com.", dns.TypeA, false, nil)
	q("WwW.ExAmPlE.CoM.", dns.TypeAAAA, true, nil)           // 0x20 letter case
	q("svc.service.consul.", dns.TypeSRV, true, nil)         // the consul. zone
	q("nx.example.", dns.TypeA, true, nil)                   // NXDOMAIN
	q("fail.example.", dns.TypeA, true, nil)                 // upstream failure, SERVFAIL
	q("big.example.", dns.TypeTXT, false, nil)               // truncated to 512 bytes
	q("big.example.", dns.TypeTXT, true, nil)                // fits in 1232
	q("signed.example.", dns.TypeA, true, func(m *dns.Msg) { // DO and CD: other cache keys
		m.IsEdns0().SetDo()
		m.CheckingDisabled = true
	})
	q("example.", dns.TypeAXFR, false, nil)                   // REFUSED
	q("version.bind.", dns.TypeTXT, false, func(m *dns.Msg) { // class CH: REFUSED
		m.Question[0].Qclass = dns.ClassCHAOS
	})
	q("example.", dns.TypeANY, false, nil)
	q("edns1.example.", dns.TypeA, true, func(m *dns.Msg) { // BADVERS
		m.IsEdns0().SetVersion(1)
	})
	q("tiny.example.", dns.TypeA, true, func(m *dns.Msg) { // a buffer below 512
		m.IsEdns0().SetUDPSize(100)
	})
	q("notify.example.", dns.TypeSOA, false, func(m *dns.Msg) { m.Opcode = dns.OpcodeNotify })
	q("update.example.", dns.TypeSOA, false, func(m *dns.Msg) { m.Opcode = dns.OpcodeUpdate })
	q("response.example.", dns.TypeA, false, func(m *dns.Msg) { m.Response = true }) // dropped
	q("two.example.", dns.TypeA, false, func(m *dns.Msg) {                           // QDCOUNT 2: FORMERR
		m.Question = append(m.Question, m.Question[0])
	})
	q("answers.example.", dns.TypeA, false, func(m *dns.Msg) { // records where none belong
		rr, _ := dns.NewRR("answers.example. 300 IN A 192.0.2.1")
		m.Answer = []dns.RR{rr}
	})
	q("ede.example.", dns.TypeA, true, func(m *dns.Msg) {
		opt := m.IsEdns0()
		opt.Option = append(opt.Option, &dns.EDNS0_EDE{InfoCode: 3, ExtraText: "client"},
			&dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0123456789abcdef"})
	})
	q(`weird\.label\000.example.`, dns.TypeA, false, nil)   // escapes in a label
	q("big.example.", dns.TypeTXT, true, func(m *dns.Msg) { // 65,535 advertised: cut at 1232 (issue 13)
		m.IsEdns0().SetUDPSize(dns.MaxMsgSize)
	})
	q("twoopt.example.", dns.TypeA, true, func(m *dns.Msg) { // two OPT records: FORMERR (RFC 6891 §6.1.1)
		m.Extra = append(m.Extra, &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT, Class: 1232}})
	})

	raw := [][]byte{
		{},                                   // empty
		{0x12, 0x34, 0x01, 0x00, 0x00, 0x01}, // header cut short: dropped
		{0x12, 0x34, 0x01, 0x00, 0, 0, 0, 0, 0, 0, 0, 0}, // header only, QDCOUNT 0: FORMERR
		{0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0}, // promises a question it lacks
		// A compression pointer pointing at itself.
		{0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1},
		// A label longer than 63 bytes.
		append(append([]byte{0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 64}, make([]byte, 64)...), 0, 0, 1, 0, 1),
		// A question with its type and class cut off.
		{0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 1, 'a', 0, 0},
		// ARCOUNT 1 with an OPT record cut in the middle.
		{0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1, 1, 'a', 0, 0, 1, 0, 1, 0, 0, 41, 0x04},
	}
	return append(out, raw...)
}

// TestFuzzCorpusHasSeeds checks that every seed packet is in the committed
// corpus, so the end-to-end test sends them all to the daemon. Run it with
// TOWERD_WRITE_FUZZ_CORPUS=1 to write the missing files.
func TestFuzzCorpusHasSeeds(t *testing.T) {
	write := os.Getenv("TOWERD_WRITE_FUZZ_CORPUS") == "1"
	for _, p := range seedPackets(t) {
		sum := sha256.Sum256(p)
		path := filepath.Join(corpusDir, "seed-"+hex.EncodeToString(sum[:8]))
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nbool(false)\n", p)
		got, err := os.ReadFile(path)
		switch {
		case err == nil && string(got) == body:
		case write:
			if err := os.MkdirAll(corpusDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		default:
			t.Errorf("seed %x is not in %s: run TOWERD_WRITE_FUZZ_CORPUS=1 go test -run TestFuzzCorpusHasSeeds ./resolver", p, corpusDir)
		}
	}
}
