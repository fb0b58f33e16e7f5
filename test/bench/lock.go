package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// benchLock is the file a bench run holds locked while it runs. Its
// servers listen on fixed loopback addresses (127.0.0.10 to .42), so a
// second run at the same time would fail to bind, or worse, ask the first
// run's servers and mix both runs' figures. A fixed path rather than
// $TMPDIR's, so that runs under any environment see each other.
const benchLock = "/tmp/towerd-bench.lock"

// lockBench takes an exclusive lock on path, or says which run holds it.
// The lock lasts as long as the returned file is open, and at most as
// long as this process: the kernel drops it at exit, a crash included.
// The bench's children do not hold it (Go opens files close-on-exec).
func lockBench(path string) (*os.File, error) {
	// No link followed: the path is in a directory anyone may write to.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o644)
	if errors.Is(err, os.ErrPermission) {
		// Another user's file (fs.protected_regular refuses even root an
		// O_CREAT open of it): a lock needs no more than reading.
		f, err = os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("bench lock: %w", err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("bench lock: %s is not a regular file", path)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("bench lock %s: %w", path, err)
		}
		holder := make([]byte, 16) // a PID and a newline
		n, _ := f.ReadAt(holder, 0)
		return nil, fmt.Errorf("another bench run (pid %s) holds %s: its servers are on the bench's fixed addresses "+
			"(127.0.0.10 to .42); run again when it has ended", strings.TrimSpace(string(holder[:n])), path)
	}
	// The PID is only for the message above, in the next run (not written
	// to a file opened read-only).
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
