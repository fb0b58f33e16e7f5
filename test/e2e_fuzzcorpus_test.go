package test

import (
	"bufio"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// fuzzCorpusDirs hold the committed seed corpora of the request-path fuzz
// target; every input in them is a packet a client could send.
var fuzzCorpusDirs = []string{"../resolver/testdata/fuzz/FuzzServeDNS"}

// rawReplyWait is how long the test waits for a reply to a corpus packet.
// Many get none by design (dropped), so this is the one wait per packet a
// test pays; a reply on loopback arrives in microseconds, and one that comes
// later still cannot confuse the next check, which uses its own socket.
const rawReplyWait = 200 * time.Millisecond

// TestFuzzCorpusAgainstDaemon is the second half of issue 7's test 6: every
// input in the fuzz corpus, sent to the real binary over UDP, leaves it
// answering. After each packet a normal query must get its normal answer,
// and a reply to the packet itself, if any, must be a response with the
// packet's ID.
func TestFuzzCorpusAgainstDaemon(t *testing.T) {
	t.Parallel()
	packets := readFuzzCorpus(t)
	if len(packets) < 10 {
		t.Fatalf("only %d packets in the corpus %v; want the committed seeds", len(packets), fuzzCorpusDirs)
	}
	up := newTestUpstream(t)
	up.Add(t, "alive.example. 300 IN A 192.0.2.70", "big.example. 300 IN A 192.0.2.71",
		"www.example.com. 300 IN A 192.0.2.72")
	d := startTowerd(t, "-config", "", "-listen", "127.0.0.1:0", "-upstream", up.Addr, "-consul-dns", up.Addr)

	replies := 0
	for name, p := range packets {
		if reply := rawUDP(t, d.UDP, p, rawReplyWait); reply != nil {
			replies++
			m := new(dns.Msg)
			if err := m.Unpack(reply); err != nil {
				t.Errorf("%s: reply does not parse: %v", name, err)
			} else if !m.Response || (len(p) >= 2 && m.Id != uint16(p[0])<<8|uint16(p[1])) {
				t.Errorf("%s: reply QR %v, ID %d; want a response with the request's ID", name, m.Response, m.Id)
			}
		}
		r := mustExchange(t, d.UDP, "udp", query("alive.example.", dns.TypeA, true))
		if r.Rcode != dns.RcodeSuccess || !slices.Equal(addresses(r.Answer), []string{"192.0.2.70"}) {
			t.Fatalf("after %s: rcode %s, answer %v; want 192.0.2.70", name, dns.RcodeToString[r.Rcode], r.Answer)
		}
	}
	t.Logf("%d corpus packets sent, %d answered, daemon answering after each", len(packets), replies)
	if strings.Contains(d.stderr.String(), "BUG: panic") {
		t.Errorf("a corpus packet made the handler panic:\n%s", d.stderr)
	}
}

// readFuzzCorpus returns the []byte argument of every corpus file, by file
// name. The files are in Go's fuzz corpus format: a version line, then one
// Go literal per argument.
func readFuzzCorpus(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, dir := range fuzzCorpusDirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatalf("reading the fuzz corpus: %v", err)
		}
		for _, e := range entries {
			path := filepath.Join(dir, e.Name())
			p, ok := corpusPacket(t, path)
			if ok {
				out[path] = p
			}
		}
	}
	return out
}

func corpusPacket(t *testing.T, path string) ([]byte, bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	for sc.Scan() {
		lit, ok := strings.CutPrefix(sc.Text(), "[]byte(")
		if !ok {
			continue
		}
		s, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return []byte(s), true
	}
	return nil, false
}

// maxTCPQuery is towerd's limit on a TCP query (resolver.MaxTCPQuerySize):
// a longer length prefix closes the connection.
const maxTCPQuery = 4096

// TestFuzzCorpusOverTCP sends the same corpus over TCP (issue 13: TCP has
// towerd's own loop): every packet up to 4 KiB pipelined on one connection,
// then a normal query, whose answer must come last and right; every reply
// before it is a response to one of the packets. A longer packet gets a
// connection of its own, which towerd must close unanswered.
func TestFuzzCorpusOverTCP(t *testing.T) {
	t.Parallel()
	packets := readFuzzCorpus(t)
	up := newTestUpstream(t)
	up.Add(t, "alive.example. 300 IN A 192.0.2.70", "big.example. 300 IN A 192.0.2.71",
		"www.example.com. 300 IN A 192.0.2.72")
	d := startTowerd(t, "-config", "", "-listen", "127.0.0.1:0", "-upstream", up.Addr, "-consul-dns", up.Addr)

	c, err := dns.Dial("tcp", d.TCP)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ids := map[uint16]bool{}
	var stream []byte
	for name, p := range packets {
		if len(p) > maxTCPQuery {
			oversize, err := net.Dial("tcp", d.TCP)
			if err != nil {
				t.Fatal(err)
			}
			oversize.Write(append([]byte{byte(len(p) >> 8), byte(len(p))}, p...))
			oversize.SetReadDeadline(time.Now().Add(10 * time.Second))
			if n, err := oversize.Read(make([]byte, 2)); n != 0 || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("%s (%d bytes): read %d bytes, %v; want towerd to close the connection", name, len(p), n, err)
			}
			oversize.Close()
			continue
		}
		if len(p) >= 2 {
			ids[uint16(p[0])<<8|uint16(p[1])] = true
		}
		stream = append(stream, byte(len(p)>>8), byte(len(p)))
		stream = append(stream, p...)
	}
	alive := query("alive.example.", dns.TypeA, true)
	alive.Id = 0xA11E
	for ids[alive.Id] {
		alive.Id++
	}
	wire, _ := alive.Pack()
	stream = append(append(stream, byte(len(wire)>>8), byte(len(wire))), wire...)
	if _, err := c.Conn.Write(stream); err != nil { // raw: dns.Conn.Write would frame it again
		t.Fatal(err)
	}
	replies := 0
	for {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		r, err := c.ReadMsg()
		if err != nil {
			t.Fatalf("after %d replies: %v", replies, err)
		}
		if r.Id == alive.Id {
			if r.Rcode != dns.RcodeSuccess || !slices.Equal(addresses(r.Answer), []string{"192.0.2.70"}) {
				t.Fatalf("the query after the corpus: rcode %s, answer %v; want 192.0.2.70", dns.RcodeToString[r.Rcode], r.Answer)
			}
			break
		}
		replies++
		if !r.Response || !ids[r.Id] {
			t.Errorf("reply QR %v, ID %d: not a response to a packet sent", r.Response, r.Id)
		}
	}
	t.Logf("%d corpus packets pipelined on one TCP connection, %d answered before the last query", len(packets), replies)
	if strings.Contains(d.stderr.String(), "BUG: panic") {
		t.Errorf("a corpus packet made the handler panic:\n%s", d.stderr)
	}
}
