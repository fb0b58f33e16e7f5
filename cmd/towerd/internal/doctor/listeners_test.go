package doctor

import (
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const procNetUDP = `   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  101: 0100007F:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000   999        0 1111 2 0000000000000000 0
  102: 3500007F:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000   101        0 2222 2 0000000000000000 0
  103: 0100007F:0036 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 3333 2 0000000000000000 0
`

const procNetTCP6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:0035 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4444 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000001000000:0035 00000000000000000000000001000000:9C40 01 00000000:00000000 00:00000000 00000000     0        0 5555 1 0000000000000000 20 4 30 10 -1
`

func TestParseSocketTable(t *testing.T) {
	t.Parallel()
	got := parseSocketTable([]byte(procNetUDP), "udp", "07", 53)
	if len(got) != 2 || got[0].Addr != netip.MustParseAddrPort("127.0.0.1:53") || got[0].inode != "1111" ||
		got[1].Addr != netip.MustParseAddrPort("127.0.0.53:53") {
		t.Errorf("udp: %+v", got)
	}
	// Only the listening socket, not the connection from port 40000.
	got = parseSocketTable([]byte(procNetTCP6), "tcp", "0A", 53)
	if len(got) != 1 || got[0].Addr != netip.MustParseAddrPort("[::1]:53") || got[0].inode != "4444" {
		t.Errorf("tcp6: %+v", got)
	}
}

// A /proc tree under the root: dnsmasq holds 127.0.0.1:53, towerd's
// address; systemd-resolved holds its stub; towerd.socket's sockets are
// PID 1's.
func TestListenersFromProc(t *testing.T) {
	t.Parallel()
	f := cleanNode(t)
	f.files["/proc/net/udp"] = procNetUDP
	f.files["/proc/net/tcp6"] = procNetTCP6
	f.files["/proc/812/comm"] = "dnsmasq\n"
	f.links["/proc/812/fd/5"] = "socket:[1111]"
	f.links["/proc/812/fd/0"] = "/dev/null"
	f.files["/proc/640/comm"] = "systemd-resolve\n"
	f.links["/proc/640/fd/12"] = "socket:[2222]"
	f.files["/proc/1/comm"] = "systemd\n"
	f.links["/proc/1/fd/40"] = "socket:[4444]"
	n := &Node{Listeners: listenersUnder(t, f.write(t))}
	n.Towerd.Installed = true
	n.Towerd.Config.Listen = []string{"127.0.0.1:53", "[::1]:53"}
	var ids []string
	for _, f := range checkListeners(n) {
		ids = append(ids, f.ID+":"+f.Severity.String()+" "+strings.Join(items(f), ","))
	}
	want := []string{"port53-conflict:problem udp 127.0.0.1:53", "port53-other-resolver:warning udp 127.0.0.53:53"}
	if !slices.Equal(ids, want) {
		t.Errorf("findings %q, want %q", ids, want)
	}
	if got := checkListeners(n)[0].Items[0].Detail; got != "dnsmasq (pid 812)" {
		t.Errorf("owner %q", got)
	}
}

// The live /proc: a socket this test binds on 127.x.y.z:53 is found, with
// this process as its owner.
func TestListenersLive(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("binding port 53 needs root")
	}
	var pc net.PacketConn
	var err error
	for i := 2; i < 50 && pc == nil; i++ {
		pc, err = net.ListenPacket("udp", "127.0.53."+strconv.Itoa(i)+":53")
	}
	if pc == nil {
		t.Skipf("no free 127.0.53.x:53: %v", err)
	}
	defer pc.Close()
	comm, _ := os.ReadFile("/proc/self/comm")
	for _, l := range listenersUnder(t, "/") {
		if l.Proto == "udp" && l.Addr.String() == pc.LocalAddr().String() {
			if len(l.Owners) != 1 || l.Owners[0].PID != os.Getpid() || l.Owners[0].Comm != strings.TrimSpace(string(comm)) {
				t.Errorf("owners of %s: %+v, want this process (%d)", l.Addr, l.Owners, os.Getpid())
			}
			return
		}
	}
	t.Errorf("%s not among the sockets on port 53", pc.LocalAddr())
}

// listenersUnder reads the sockets on port 53 of the /proc under root.
func listenersUnder(t *testing.T, root string) []listener {
	t.Helper()
	nr, err := openRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer nr.Close()
	ls, err := readListeners(nr)
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

func TestOverlapsListen(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		addr   string
		listen []string
		want   bool
	}{
		{"127.0.0.1:53", []string{"127.0.0.1:53"}, true},
		{"0.0.0.0:53", []string{"127.0.0.1:53"}, true},
		{"127.0.0.1:53", []string{"0.0.0.0:53"}, true},
		{"[::]:53", []string{"127.0.0.1:53"}, false},
		{"127.0.0.53:53", []string{"127.0.0.1:53"}, false},
		{"127.0.0.1:5353", []string{"127.0.0.1:53"}, false},
	} {
		if got := overlapsListen(netip.MustParseAddrPort(c.addr), c.listen); got != c.want {
			t.Errorf("overlapsListen(%s, %v) = %v", c.addr, c.listen, got)
		}
	}
}
