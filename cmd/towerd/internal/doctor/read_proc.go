package doctor

import (
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"path"
	"strconv"
	"strings"

	"github.com/towerd/towerd/cmd/towerd/internal/nodefs"
)

// Who listens on port 53: the kernel's socket tables in /proc/net, and
// which processes hold each socket, from the socket:[inode] links in
// /proc/PID/fd. Read only on the live node (--root /), as root to see
// other users' processes.

// socketTable is one /proc/net file, with the state that means "bound to
// accept": TCP_LISTEN for TCP; any UDP socket (07, unconnected) counts.
type socketTable struct {
	file, proto string
	state       string
}

var socketTables = []socketTable{
	{"/proc/net/udp", "udp", "07"}, {"/proc/net/udp6", "udp", "07"},
	{"/proc/net/tcp", "tcp", "0A"}, {"/proc/net/tcp6", "tcp", "0A"},
}

// boundSocket is a line of a socket table.
type boundSocket struct {
	listener
	inode string
}

// parseSocketTable returns the sockets of data (a /proc/net/{tcp,udp}[6]
// file) bound to port in state.
func parseSocketTable(data []byte, proto, state string, port uint16) []boundSocket {
	var out []boundSocket
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 10 || f[3] != state {
			continue
		}
		addr, ok := parseHexAddrPort(f[1])
		if !ok || addr.Port() != port {
			continue
		}
		out = append(out, boundSocket{listener: listener{Proto: proto, Addr: addr}, inode: f[9]})
	}
	return out
}

// parseHexAddrPort reads "0100007F:0035": the address as the kernel keeps
// it (32-bit words in host order, little-endian here), the port in hex.
func parseHexAddrPort(s string) (netip.AddrPort, bool) {
	a, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, false
	}
	raw, err := hex.DecodeString(a)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, false
	}
	for i := 0; i < len(raw); i += 4 {
		binary.BigEndian.PutUint32(raw[i:], binary.LittleEndian.Uint32(raw[i:]))
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, false
	}
	ip, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(ip.Unmap(), uint16(port)), true
}

// readListeners lists the sockets bound to port 53 and their processes.
func readListeners(nr *nodefs.Root) ([]listener, error) {
	var found []boundSocket
	var lastErr error
	read := 0
	for _, t := range socketTables {
		data, err := nr.ReadFile(t.file)
		if err != nil {
			lastErr = err // udp6/tcp6 are missing without IPv6
			continue
		}
		read++
		found = append(found, parseSocketTable(data, t.proto, t.state, 53)...)
	}
	if read == 0 {
		return nil, lastErr
	}
	owners := socketOwners(nr, found)
	out := make([]listener, 0, len(found))
	for _, s := range found {
		s.Owners = owners[s.inode]
		out = append(out, s.listener)
	}
	return out, nil
}

// socketOwners maps the inodes of sockets to the processes that hold them.
func socketOwners(nr *nodefs.Root, sockets []boundSocket) map[string][]process {
	want := map[string]bool{}
	for _, s := range sockets {
		want["socket:["+s.inode+"]"] = true
	}
	out := map[string][]process{}
	if len(want) == 0 {
		return out
	}
	for _, e := range readDir(nr, "/proc") {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := path.Join("/proc", e.Name())
		var comm string
		for _, fd := range readDir(nr, path.Join(dir, "fd")) {
			target, err := nr.Readlink(path.Join(dir, "fd", fd.Name()))
			if err != nil || !want[target] {
				continue
			}
			if comm == "" {
				data, _ := nr.ReadFileMax(path.Join(dir, "comm"), 64)
				comm = strings.TrimSpace(string(data))
			}
			inode := strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")
			if ps := out[inode]; len(ps) == 0 || ps[len(ps)-1].PID != pid {
				out[inode] = append(ps, process{PID: pid, Comm: comm})
			}
		}
	}
	return out
}
