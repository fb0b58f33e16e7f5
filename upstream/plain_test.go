package upstream

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func newPlain(t *testing.T, addr string) *Plain {
	t.Helper()
	p, err := NewPlain(addr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPlainExchangeRcodes(t *testing.T) {
	tests := []struct {
		name      string
		rcode     int
		wantKind  string
		wantFirst string
	}{
		{"noerror", dns.RcodeSuccess, "", "192.0.2.1"},
		{"nxdomain is an answer", dns.RcodeNameError, "", ""},
		{"servfail", dns.RcodeServerFailure, KindServFail, ""},
		{"refused", dns.RcodeRefused, KindRefused, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := scripted(t, func(q *dns.Msg, _ string) *dns.Msg {
				if tt.rcode == dns.RcodeSuccess {
					return replyTo(q, tt.rcode, "192.0.2.1")
				}
				return replyTo(q, tt.rcode)
			})
			p := newPlain(t, addr)
			m := testQuery()
			before := m.String()

			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			reply, err := p.Exchange(ctx, m)

			if got := ErrorKind(err); got != tt.wantKind {
				t.Fatalf("ErrorKind(%v) = %q, want %q", err, got, tt.wantKind)
			}
			var rcodeErr *RcodeError
			if tt.wantKind != "" && (!errors.As(err, &rcodeErr) || rcodeErr.Server != addr || rcodeErr.Rcode != tt.rcode) {
				t.Errorf("error = %#v, want RcodeError{%s, %d}", err, addr, tt.rcode)
			}
			if reply == nil || reply.Rcode != tt.rcode || reply.Id != m.Id {
				t.Fatalf("reply = %v, want rcode %d with id %d", reply, tt.rcode, m.Id)
			}
			if got := firstA(reply); got != tt.wantFirst {
				t.Errorf("answer = %q, want %q", got, tt.wantFirst)
			}
			if m.String() != before {
				t.Errorf("Exchange modified the caller's message:\n%s\nbecame\n%s", before, m)
			}
			if p.Mismatches() != 0 {
				t.Errorf("Mismatches = %d, want 0", p.Mismatches())
			}
		})
	}
}

func TestPlainRejectsMismatchedReplies(t *testing.T) {
	mutate := func(t *testing.T, change func(r *dns.Msg)) func(q *dns.Msg) []byte {
		return func(q *dns.Msg) []byte {
			r := replyTo(q, dns.RcodeSuccess, "198.51.100.66")
			change(r)
			return mustPack(t, r)
		}
	}
	tests := []struct {
		name           string
		bad            []func(q *dns.Msg) []byte
		goodName       func(q string) string
		wantMismatches uint64
	}{
		{name: "wrong id then wrong question", wantMismatches: 2, bad: []func(*dns.Msg) []byte{
			mutate(t, func(r *dns.Msg) { r.Id++ }),
			mutate(t, func(r *dns.Msg) { r.Question[0].Name = "evil.example.org." }),
		}},
		{name: "not a response", wantMismatches: 1, bad: []func(*dns.Msg) []byte{
			mutate(t, func(r *dns.Msg) { r.Response = false }),
		}},
		{name: "wrong type and class", wantMismatches: 2, bad: []func(*dns.Msg) []byte{
			mutate(t, func(r *dns.Msg) { r.Question[0].Qtype = dns.TypeAAAA }),
			mutate(t, func(r *dns.Msg) { r.Question[0].Qclass = dns.ClassCHAOS }),
		}},
		{name: "no question", wantMismatches: 1, bad: []func(*dns.Msg) []byte{
			mutate(t, func(r *dns.Msg) { r.Question = nil }),
		}},
		{name: "garbage", wantMismatches: 1, bad: []func(*dns.Msg) []byte{
			func(*dns.Msg) []byte { return []byte{0xde, 0xad} },
		}},
		{name: "name case differs but matches", wantMismatches: 0, goodName: func(string) string { return "WWW.Example.ORG." }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startRaw(t, func(q *dns.Msg, _ net.Addr) [][]byte {
				var out [][]byte
				for _, bad := range tt.bad {
					out = append(out, bad(q))
				}
				good := replyTo(q, dns.RcodeSuccess, "192.0.2.1")
				if tt.goodName != nil {
					good.Question[0].Name = tt.goodName(good.Question[0].Name)
				}
				return append(out, mustPack(t, good))
			})
			p := newPlain(t, srv.addr)
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()

			reply, err := p.Exchange(ctx, testQuery())
			if err != nil {
				t.Fatal(err)
			}
			if got := firstA(reply); got != "192.0.2.1" {
				t.Errorf("accepted answer %q, want the genuine 192.0.2.1", got)
			}
			if got := p.Mismatches(); got != tt.wantMismatches {
				t.Errorf("Mismatches = %d, want %d", got, tt.wantMismatches)
			}
		})
	}
}

// A reply from the right ID and question but the wrong source port must
// never be seen: the connected socket leaves it to the kernel to drop.
func TestPlainIgnoresRepliesFromOtherSources(t *testing.T) {
	spoofer, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { spoofer.Close() })
	srv := startRaw(t, func(q *dns.Msg, from net.Addr) [][]byte {
		if _, err := spoofer.WriteTo(mustPack(t, replyTo(q, dns.RcodeSuccess, "198.51.100.66")), from); err != nil {
			t.Errorf("spoofing: %v", err)
		}
		return [][]byte{mustPack(t, replyTo(q, dns.RcodeSuccess, "192.0.2.1"))}
	})
	p := newPlain(t, srv.addr)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	reply, err := p.Exchange(ctx, testQuery())
	if err != nil {
		t.Fatal(err)
	}
	if got := firstA(reply); got != "192.0.2.1" {
		t.Errorf("accepted answer %q, want 192.0.2.1 from the server itself", got)
	}
}

func TestPlainTruncatedRetriesOverTCP(t *testing.T) {
	var udpQueries, tcpQueries atomic.Int32
	p := newPlain(t, scripted(t, func(q *dns.Msg, network string) *dns.Msg {
		if network == "udp" {
			udpQueries.Add(1)
			r := replyTo(q, dns.RcodeSuccess)
			r.Truncated = true
			return r
		}
		tcpQueries.Add(1)
		ips := make([]string, 0, 100)
		for i := range 100 {
			ips = append(ips, net.IPv4(192, 0, 2, byte(i)).String())
		}
		return replyTo(q, dns.RcodeSuccess, ips...)
	}))
	m := testQuery()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	reply, err := p.Exchange(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if reply.Truncated || len(reply.Answer) != 100 || reply.Id != m.Id {
		t.Errorf("reply tc=%v answers=%d id=%d, want full 100-record answer with id %d",
			reply.Truncated, len(reply.Answer), reply.Id, m.Id)
	}
	if udpQueries.Load() != 1 || tcpQueries.Load() != 1 {
		t.Errorf("queries udp=%d tcp=%d, want 1 each", udpQueries.Load(), tcpQueries.Load())
	}
}

func TestPlainFailures(t *testing.T) {
	closedPort := func(t *testing.T) string {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := c.LocalAddr().String()
		c.Close()
		return addr
	}
	tests := []struct {
		name     string
		addr     func(t *testing.T) string
		timeout  time.Duration
		want     error
		wantKind string
	}{
		// A black hole costs exactly the caller's deadline.
		{"black hole", func(t *testing.T) string { return startRaw(t, blackHole).addr }, 50 * time.Millisecond, ErrTimeout, KindTimeout},
		// The kernel turns the ICMP port unreachable into ECONNREFUSED on
		// the connected socket, so a closed port fails at once, not at the
		// deadline.
		{"closed port", closedPort, waitTimeout, syscall.ECONNREFUSED, KindNetwork},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlain(t, tt.addr(t))
			ctx, cancel := context.WithTimeout(context.Background(), tt.timeout)
			defer cancel()
			// The error says which ended it, the deadline (ErrTimeout) or
			// the kernel before it (ECONNREFUSED): no wall-clock bound
			// (issue 33), the socket's deadline is the kernel's.
			reply, err := p.Exchange(ctx, testQuery())
			if !errors.Is(err, tt.want) || ErrorKind(err) != tt.wantKind || reply != nil {
				t.Fatalf("Exchange = %v, %v; want nil, %v of kind %s", reply, err, tt.want, tt.wantKind)
			}
		})
	}
}

// Cancellation is the caller leaving, not the server failing: it must come
// back as context.Canceled, promptly, and not look like a timeout.
func TestPlainCancel(t *testing.T) {
	arrived := make(chan struct{}, 1)
	srv := startRaw(t, func(*dns.Msg, net.Addr) [][]byte {
		arrived <- struct{}{}
		return nil
	})
	p := newPlain(t, srv.addr)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	go func() {
		<-arrived
		cancel()
	}()
	_, err := p.Exchange(ctx, testQuery())
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) || errors.Is(err, ErrNetwork) {
		t.Errorf("Exchange error = %v, want context.Canceled only", err)
	}
}
