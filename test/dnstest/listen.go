package dnstest

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/towerd/towerd/resolver/dnslisten"
)

// ListenPair binds UDP on a free port of 127.0.0.1 and TCP on the same
// port, as a DNS server listens (dnslisten.Pair), and closes both when the
// test ends (closing them again is harmless).
//
// The port is below the kernel's range of ephemeral ports (issue 33),
// where only a bind that names it can take it. Tests stop an upstream and
// bind a black hole (or a new server) on its address; a port from the
// ephemeral range is, in between, the kernel's to hand out as any socket's
// source port, and towerd's upstream attempts open thousands of sockets a
// second in the flood tests beside: "bind: address already in use" was
// seen in TestServeStale/black_hole. The Consul agents' ports
// (test/consultest) are drawn from [20000, the ephemeral range), so these
// come from below that.
func ListenPair(t testing.TB) (net.PacketConn, net.Listener) {
	t.Helper()
	pc, ln, err := listenBelowEphemeral()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pc.Close()
		ln.Close()
	})
	return pc, ln
}

// fixedPorts is where listenBelowEphemeral draws from: [10000, 20000),
// cut at the first ephemeral port when the kernel's range starts lower.
const fixedPortsLo, fixedPortsHi = 10000, 20000

func listenBelowEphemeral() (net.PacketConn, net.Listener, error) {
	hi := min(fixedPortsHi, firstEphemeralPort())
	if hi-fixedPortsLo < 1000 {
		return dnslisten.Pair("127.0.0.1:0") // no room below: the kernel's choice
	}
	var err error
	for range 100 {
		port := fixedPortsLo + rand.IntN(hi-fixedPortsLo)
		var pc net.PacketConn
		var ln net.Listener
		pc, ln, err = dnslisten.Pair(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			return pc, ln, nil
		}
	}
	return nil, nil, err
}

// firstEphemeralPort is the start of the kernel's ephemeral range
// (32768 on Linux by default, and when it cannot be read).
func firstEphemeralPort() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	if f := strings.Fields(string(b)); len(f) == 2 {
		if n, err := strconv.Atoi(f[0]); err == nil {
			return n
		}
	}
	return 32768
}
