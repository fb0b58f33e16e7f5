package test

import (
	"net"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// udpBurst is how many queries arrive while towerd's reader is stopped:
// several times what the kernel's default receive buffer holds
// (net.core.rmem_default, 208 KiB on Debian: a few hundred datagrams),
// well within what udp_receive_buffer's 4 MiB holds.
const udpBurst = 1500

var receiveBufferLine = regexp.MustCompile(`msg="udp receive buffer" addr=\S+ bytes=(\d+)`)

// TestUDPReceiveBufferHoldsABurst stops towerd (SIGSTOP, as a busy node's
// scheduler or a GC pause would keep its reader from running), sends a
// burst of queries for a cached name, and lets it run again: every query
// is answered from the socket's buffer (udp_receive_buffer), none dropped
// by the kernel. With the system's default buffer most of them are lost
// (issue 34: towerd lost queries at 20k q/s that unbound and dnsmasq did
// not).
func TestUDPReceiveBufferHoldsABurst(t *testing.T) {
	t.Parallel()
	def, consul := newTestUpstream(t), newTestUpstream(t)
	def.Add(t, "burst.example. 300 IN A 192.0.2.7")
	cfg := writeConfig(t, "udp_receive_buffer = \"4MiB\"\n")
	d := startTowerd(t, "-config", cfg, "-listen", "127.0.0.1:0", "-upstream", def.Addr, "-consul-dns", consul.Addr)
	m := receiveBufferLine.FindStringSubmatch(d.stderr.String())
	if m == nil {
		// Capped: towerd warned. Past net.core.rmem_max only CAP_NET_ADMIN
		// (root) gets the buffer.
		t.Skipf("towerd did not get its 4 MiB receive buffer (not root, small net.core.rmem_max):\n%s", lastLines(d.stderr.String(), 20))
	}
	if got, _ := strconv.Atoi(m[1]); got != 4<<20 {
		t.Fatalf("towerd logged a receive buffer of %s bytes, want %d", m[1], 4<<20)
	}
	if r := dig(t, d.UDP, "burst.example.", "A"); r.Status != "NOERROR" {
		t.Fatalf("warming: %s\n%s", r.Status, r.Output)
	}

	to, err := net.ResolveUDPAddr("udp", d.UDP)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The client must hold the answers towerd sends at full speed once it
	// runs again, whatever this test's reader is doing then.
	if rc, err := c.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20) })
	}
	answered := make(chan int, 1)
	go func() {
		seen := make(map[uint16]bool)
		buf := make([]byte, 512)
		c.SetReadDeadline(time.Now().Add(20 * time.Second)) // the longest the test waits, not a synchronisation
		for len(seen) < udpBurst {
			n, err := c.Read(buf)
			if err != nil {
				break
			}
			var r dns.Msg
			if r.Unpack(buf[:n]) != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
				continue
			}
			if a, ok := r.Answer[0].(*dns.A); ok && a.A.String() == "192.0.2.7" {
				seen[r.Id] = true
			}
		}
		answered <- len(seen)
	}()

	d.signal(t, syscall.SIGSTOP)
	waitStopped(t, d.cmd.Process.Pid)
	q := new(dns.Msg)
	q.SetQuestion("burst.example.", dns.TypeA)
	for i := range udpBurst {
		q.Id = uint16(i)
		pkt, err := q.Pack()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.WriteToUDP(pkt, to); err != nil {
			t.Fatal(err)
		}
	}
	d.signal(t, syscall.SIGCONT)
	if n := <-answered; n != udpBurst {
		t.Errorf("%d of %d queries sent while towerd was stopped were answered, want all", n, udpBurst)
	}
}

// waitStopped returns once every thread of pid is stopped (state T), so
// that the burst is sent while no reader runs.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		// The state follows the command's closing parenthesis.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && strings.HasPrefix(string(b[i+1:]), " T") {
			return
		}
		runtime.Gosched()
	}
	t.Fatalf("towerd (pid %d) did not stop", pid)
}
