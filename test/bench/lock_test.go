package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A second run is refused while the first holds the lock, with the first
// one's PID, and may start once the first has let go of it.
func TestLockBenchRefusesASecondRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "towerd-bench.lock")
	first, err := lockBench(path)
	if err != nil {
		t.Fatal(err)
	}
	// flock(2) locks belong to open files, so a second open in this
	// process conflicts as another process's would.
	if second, err := lockBench(path); err == nil {
		second.Close()
		t.Fatal("a second run took the lock the first holds")
	} else if want := "another bench run (pid " + strconv.Itoa(os.Getpid()) + ") holds " + path; !strings.Contains(err.Error(), want) {
		t.Fatalf("refusal %q does not say %q", err, want)
	}
	first.Close()
	second, err := lockBench(path)
	if err != nil {
		t.Fatalf("after the first run ended: %v", err)
	}
	second.Close()
}

// The lock is never taken through a link planted at its path.
func TestLockBenchFollowsNoLink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "towerd-bench.lock")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if f, err := lockBench(path); err == nil {
		f.Close()
		t.Fatal("the lock was taken through a link")
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Fatalf("the link's target was written: %q", b)
	}
}
