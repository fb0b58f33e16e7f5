package cache

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestOpenSnapshotRefusesUntrustedFiles: every kind of file issue 13 planted
// as cache.bin is refused without blocking, set aside as cache.bin.rejected,
// and the error says why.
func TestOpenSnapshotRefusesUntrustedFiles(t *testing.T) {
	src, _ := newTestCache(t, persistConfig)
	mustSet(t, src, keyA("x.example."), aReply(t, "x.example.", 300, "192.0.2.1"))
	good := dump(t, src)
	elsewhere := filepath.Join(t.TempDir(), "elsewhere.bin")
	if err := os.WriteFile(elsewhere, good, 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name  string
		plant func(t *testing.T, path string)
		why   string
		root  bool // needs root to plant
	}{
		{"FIFO", func(t *testing.T, path string) { mustOK(t, syscall.Mkfifo(path, 0o600)) }, "FIFO", false},
		{"directory", func(t *testing.T, path string) { mustOK(t, os.Mkdir(path, 0o700)) }, "directory", false},
		{"symlink", func(t *testing.T, path string) { mustOK(t, os.Symlink(elsewhere, path)) }, "symlink", false},
		{"world-writable", func(t *testing.T, path string) { plantFile(t, path, good, 0o666) }, "mode 0666", false},
		{"group-writable", func(t *testing.T, path string) { plantFile(t, path, good, 0o620) }, "mode 0620", false},
		{"other owner", func(t *testing.T, path string) {
			plantFile(t, path, good, 0o600)
			mustOK(t, os.Chown(path, 65534, 65534))
		}, "owned by uid 65534", true},
		{"device", func(t *testing.T, path string) {
			mustOK(t, syscall.Mknod(path, syscall.S_IFCHR|0o600, 1<<8|3)) // 1:3 is /dev/null
		}, "device", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root && os.Geteuid() != 0 {
				t.Skip("planting this needs root")
			}
			path := filepath.Join(t.TempDir(), "cache.bin")
			tt.plant(t, path)
			f, err := OpenSnapshot(path)
			if err == nil {
				f.Close()
				t.Fatal("OpenSnapshot accepted it")
			}
			if !errors.Is(err, ErrBadSnapshot) || !strings.Contains(err.Error(), tt.why) || !strings.Contains(err.Error(), "cache.bin.rejected") {
				t.Errorf("error %q; want ErrBadSnapshot saying %q and where the file went", err, tt.why)
			}
			if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("cache.bin is still there: %v", err)
			}
			if _, err := os.Lstat(path + RejectedSuffix); err != nil {
				t.Errorf("not set aside: %v", err)
			}
		})
	}
	if data, err := os.ReadFile(elsewhere); err != nil || !bytes.Equal(data, good) {
		t.Errorf("the symlink's target changed: %v", err)
	}
}

// TestOpenSnapshotThenLoad: a trusted file loads; a missing one is
// fs.ErrNotExist and nothing is set aside; a trusted file whose content
// Load refuses is set aside too.
func TestOpenSnapshotThenLoad(t *testing.T) {
	src, _ := newTestCache(t, persistConfig)
	mustSet(t, src, keyA("x.example."), aReply(t, "x.example.", 300, "192.0.2.1"))
	good := dump(t, src)
	dir := t.TempDir()
	path := filepath.Join(dir, "cache.bin")

	if _, err := OpenSnapshot(path); !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrBadSnapshot) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	plantFile(t, path, good, 0o600)
	f, err := OpenSnapshot(path)
	if err != nil {
		t.Fatal(err)
	}
	dst, _ := newTestCache(t, persistConfig)
	stats, err := dst.Load(f)
	f.Close()
	if err != nil || stats.Loaded != 1 {
		t.Fatalf("Load = %+v, %v; want 1 entry", stats, err)
	}

	plantFile(t, path, good[:len(good)-1], 0o600)
	f, err = OpenSnapshot(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := dst.Load(f); !errors.Is(err, ErrBadSnapshot) || !strings.Contains(err.Error(), "set aside as cache.bin.rejected") {
		t.Errorf("Load of a cut file = %v; want ErrBadSnapshot, set aside", err)
	}
	if _, err := os.Lstat(path + RejectedSuffix); err != nil {
		t.Errorf("not set aside: %v", err)
	}
}

// TestOpenSnapshotDoesNotBlockOnAFIFO: the open itself returns at once even
// with nobody at the FIFO's other end (a plain open would wait forever).
func TestOpenSnapshotDoesNotBlockOnAFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.bin")
	mustOK(t, syscall.Mkfifo(path, 0o600))
	done := make(chan error, 1)
	go func() {
		_, err := OpenSnapshot(path)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("OpenSnapshot(FIFO) = %v, want ErrBadSnapshot", err)
		}
	case <-time.After(10 * time.Second): // a bound on a hang, not a measurement
		t.Fatal("OpenSnapshot blocked on a FIFO")
	}
}

func plantFile(t *testing.T, path string, data []byte, perm fs.FileMode) {
	t.Helper()
	mustOK(t, os.WriteFile(path, data, perm))
	mustOK(t, os.Chmod(path, perm)) // whatever the umask
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
