package test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// digTimeout bounds one dig run; dig itself gives up after +time=5.
const digTimeout = 20 * time.Second

// digResult is dig's printed reply, parsed.
type digResult struct {
	Status     string   // "NOERROR", "NXDOMAIN", ...
	Flags      []string // "qr", "rd", "ra", "tc", ...
	Question   []dns.Question
	Answer     []dns.RR
	Authority  []dns.RR
	Additional []dns.RR
	OPT        bool  // an OPT pseudosection was printed
	EDE        []int // extended error info codes (RFC 8914)
	MsgSize    int   // ";; MSG SIZE  rcvd: N"
	Output     string
}

func (r digResult) hasFlag(f string) bool {
	for _, g := range r.Flags {
		if g == f {
			return true
		}
	}
	return false
}

func (r digResult) hasEDE(code int) bool {
	for _, c := range r.EDE {
		if c == code {
			return true
		}
	}
	return false
}

// dig runs the real dig against server ("127.0.0.1:port") with one try and
// dig's 5 s timeout, so a retry by dig never hides a lost answer. It fails
// the test when dig gets no reply at all.
func dig(t *testing.T, server string, args ...string) digResult {
	t.Helper()
	r, err := digErr(server, args...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func digErr(server string, args ...string) (digResult, error) {
	host, port, err := net.SplitHostPort(server)
	if err != nil {
		return digResult{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), digTimeout)
	defer cancel()
	full := append([]string{"@" + host, "-p", port, "+tries=1", "+time=5"}, args...)
	out, err := exec.CommandContext(ctx, "dig", full...).CombinedOutput()
	if err != nil {
		return digResult{Output: string(out)}, &digError{args: full, err: err, out: string(out)}
	}
	return parseDig(string(out))
}

type digError struct {
	args []string
	err  error
	out  string
}

func (e *digError) Error() string {
	return "dig " + strings.Join(e.args, " ") + ": " + e.err.Error() + "\n" + e.out
}

var (
	digHeader  = regexp.MustCompile(`->>HEADER<<- opcode: \S+, status: (\S+), id: \d+`)
	digFlags   = regexp.MustCompile(`^;; flags:([^;]*);`)
	digEDE     = regexp.MustCompile(`^; EDE: (\d+)`)
	digMsgSize = regexp.MustCompile(`^;; MSG SIZE\s+rcvd: (\d+)`)
)

// parseDig reads dig's default output. Records are parsed with miekg/dns
// from their zone-file form, so TTLs and addresses compare as values.
func parseDig(out string) (digResult, error) {
	r := digResult{Output: out}
	var section *[]dns.RR
	inQuestion := false
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			section, inQuestion = nil, false
			continue
		}
		if m := digHeader.FindStringSubmatch(line); m != nil {
			r.Status = m[1]
			continue
		}
		if m := digFlags.FindStringSubmatch(line); m != nil {
			r.Flags = strings.Fields(m[1])
			continue
		}
		if m := digEDE.FindStringSubmatch(line); m != nil {
			code, _ := strconv.Atoi(m[1])
			r.EDE = append(r.EDE, code)
			continue
		}
		if m := digMsgSize.FindStringSubmatch(line); m != nil {
			r.MsgSize, _ = strconv.Atoi(m[1])
			continue
		}
		switch line {
		case ";; OPT PSEUDOSECTION:":
			r.OPT = true
			continue
		case ";; QUESTION SECTION:":
			inQuestion = true
			continue
		case ";; ANSWER SECTION:":
			section = &r.Answer
			continue
		case ";; AUTHORITY SECTION:":
			section = &r.Authority
			continue
		case ";; ADDITIONAL SECTION:":
			section = &r.Additional
			continue
		}
		switch {
		case inQuestion:
			f := strings.Fields(strings.TrimPrefix(line, ";"))
			if len(f) == 3 {
				r.Question = append(r.Question, dns.Question{Name: f[0],
					Qclass: dns.StringToClass[f[1]], Qtype: dns.StringToType[f[2]]})
			}
		case section != nil && !strings.HasPrefix(line, ";"):
			rr, err := dns.NewRR(line)
			if err != nil {
				return r, &digError{args: []string{"(parsing)"}, err: err, out: out}
			}
			*section = append(*section, rr)
		}
	}
	return r, nil
}

// query builds a question with RD set, and EDNS (1232 bytes, DO off) when
// edns is true.
func query(name string, qtype uint16, edns bool) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	if edns {
		m.SetEdns0(1232, false)
	}
	return m
}

// exchange sends m to addr over network ("udp" or "tcp") with a 5 s timeout.
func exchange(addr, network string, m *dns.Msg) (*dns.Msg, error) {
	c := &dns.Client{Net: network, Timeout: 5 * time.Second}
	reply, _, err := c.Exchange(m, addr)
	return reply, err
}

// mustExchange is exchange that fails the test on a lost or unreadable reply.
func mustExchange(t *testing.T, addr, network string, m *dns.Msg) *dns.Msg {
	t.Helper()
	reply, err := exchange(addr, network, m)
	if err != nil {
		t.Fatalf("%s query %s %s to %s: %v", network, m.Question[0].Name,
			dns.TypeToString[m.Question[0].Qtype], addr, err)
	}
	return reply
}

// rawUDP sends packet to addr from a fresh socket and returns the reply, or
// nil when none arrives within wait.
func rawUDP(t *testing.T, addr string, packet []byte, wait time.Duration) []byte {
	t.Helper()
	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(packet); err != nil {
		t.Fatal(err)
	}
	if err := conn.SetReadDeadline(time.Now().Add(wait)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65535)
	n, err := conn.Read(buf)
	if err != nil {
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			return nil
		}
		t.Fatalf("reading raw reply from %s: %v", addr, err)
	}
	return buf[:n]
}

// digAddrs digs name's A records at server and returns their addresses;
// an answer other than NOERROR fails the test.
func digAddrs(t *testing.T, server, name string) []string {
	t.Helper()
	r := dig(t, server, name, "A")
	if r.Status != "NOERROR" {
		t.Fatalf("%s: status %s\n%s", name, r.Status, r.Output)
	}
	return addresses(r.Answer)
}

// addresses returns the A and AAAA addresses of rrs as strings.
func addresses(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		switch v := rr.(type) {
		case *dns.A:
			out = append(out, v.A.String())
		case *dns.AAAA:
			out = append(out, v.AAAA.String())
		}
	}
	return out
}

// ede returns the extended error info codes in m's OPT record.
func ede(m *dns.Msg) []uint16 {
	opt := m.IsEdns0()
	if opt == nil {
		return nil
	}
	var codes []uint16
	for _, o := range opt.Option {
		if e, ok := o.(*dns.EDNS0_EDE); ok {
			codes = append(codes, e.InfoCode)
		}
	}
	return codes
}
