package admin

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Root, towerd's user and the group's members (primary or supplementary)
// may use the control socket; nobody else (issue 21).
func TestAccessPolicy(t *testing.T) {
	withGroup := AccessPolicy{UID: 998, Group: "towerd", GID: 997, HaveGroup: true}
	noGroup := AccessPolicy{UID: 998}
	for _, tc := range []struct {
		name   string
		policy AccessPolicy
		peer   peer
		want   bool
	}{
		{"root", withGroup, peer{uid: 0, gid: 0, groupsKnown: true}, true},
		{"towerd's user", withGroup, peer{uid: 998, gid: 65534, groupsKnown: true}, true},
		{"primary group", withGroup, peer{uid: 1000, gid: 997, groupsKnown: true}, true},
		{"supplementary group", withGroup, peer{uid: 1000, gid: 1000, groups: []uint32{24, 997}, groupsKnown: true}, true},
		{"nobody", withGroup, peer{uid: 65534, gid: 65534, groupsKnown: true}, false},
		{"another user", withGroup, peer{uid: 1000, gid: 1000, groups: []uint32{24, 27}, groupsKnown: true}, false},
		{"member, but no such group here", noGroup, peer{uid: 1000, gid: 997, groups: []uint32{997}, groupsKnown: true}, false},
		{"root without a group", noGroup, peer{uid: 0}, true},
	} {
		got, why := tc.policy.allows(tc.peer)
		if got != tc.want || (!got && !strings.Contains(why, "may not use towerd's control socket")) {
			t.Errorf("%s: allowed %v (%s), want %v", tc.name, got, why, tc.want)
		}
	}
}

// peerOf reads what the kernel recorded for the connecting process: this
// test's own uid, gid, pid and supplementary groups.
func TestPeerOfReadsKernelCredentials(t *testing.T) {
	dir, err := os.MkdirTemp("", "peer")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	l, err := net.Listen("unix", filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	p, err := peerOf(server)
	if err != nil {
		t.Fatal(err)
	}
	groups, _ := os.Getgroups()
	var want []uint32
	for _, g := range groups {
		want = append(want, uint32(g))
	}
	slices.Sort(want)
	got := slices.Clone(p.groups)
	slices.Sort(got)
	if int(p.uid) != os.Geteuid() || int(p.gid) != os.Getegid() || int(p.pid) != os.Getpid() || !p.groupsKnown ||
		!slices.Equal(got, want) {
		t.Errorf("peer %+v, want uid %d gid %d pid %d groups %v", p, os.Geteuid(), os.Getegid(), os.Getpid(), want)
	}
	if _, err := peerOf(&net.TCPConn{}); err == nil {
		t.Errorf("peerOf of a TCP connection: no error")
	}
}
