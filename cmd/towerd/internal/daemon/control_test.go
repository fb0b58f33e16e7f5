package daemon

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/towerd/towerd/cmd/towerd/internal/admin"
)

// bindControl makes the socket 0660 in the operators' group, replaces a
// stale socket of a crashed run, leaves a live one and any other file
// alone, and remove deletes only the file it made (issue 21).
func TestBindControl(t *testing.T) {
	dir, err := os.MkdirTemp("", "ctl")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "run", "control.sock") // run/ is made, as /run/towerd is
	policy := admin.AccessPolicy{UID: uint32(os.Geteuid()), Group: "g", GID: uint32(os.Getegid()), HaveGroup: true}

	l, cs, groupErr, err := bindControl(path, policy)
	if err != nil || groupErr != nil {
		t.Fatalf("bindControl: %v, %v", err, groupErr)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o7777 != controlSocketMode || st.Mode&syscall.S_IFMT != syscall.S_IFSOCK || st.Gid != policy.GID {
		t.Errorf("socket mode %o gid %d, want a socket 0660 of gid %d", st.Mode, st.Gid, policy.GID)
	}
	if l.Addr().String() != path {
		t.Errorf("listener address %s, want %s", l.Addr(), path)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("%d files beside the socket, want none (the temporary name is gone)", len(entries)-1)
	}
	// While it serves, a second towerd does not take it.
	if _, _, _, err := bindControl(path, policy); !errors.Is(err, errControlInUse) {
		t.Errorf("second bind: %v, want errControlInUse", err)
	}
	// A crash leaves the file: the next start replaces it.
	l.Close()
	l2, cs2, _, err := bindControl(path, policy)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	defer l2.Close()
	cs.remove() // the old one's record: another file is there now
	if _, err := os.Lstat(path); err != nil {
		t.Errorf("remove of a stale record deleted the new socket: %v", err)
	}
	cs2.remove()
	if _, err := os.Lstat(path); err == nil {
		t.Errorf("remove left the socket")
	}

	other := filepath.Join(dir, "not-a-socket")
	if err := os.WriteFile(other, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := bindControl(other, policy); err == nil {
		t.Errorf("bindControl over a regular file: no error")
	}
	if b, _ := os.ReadFile(other); string(b) != "keep" {
		t.Errorf("the regular file was replaced")
	}
	var _ net.Listener = l2
}
