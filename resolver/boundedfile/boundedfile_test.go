package boundedfile

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRefusesWhatIsNotARegularFile: every file issue 21 planted where towerd
// reads one is refused before a byte is read, without blocking, with an
// error that names the path and says why.
func TestRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	mustWrite(t, big, nil, 0o600)
	if err := os.Truncate(big, 100<<20); err != nil { // sparse: 100 MB that costs no disk
		t.Fatal(err)
	}
	linkToFIFO := filepath.Join(dir, "link-to-fifo")
	if err := os.Symlink(fifo, linkToFIFO); err != nil {
		t.Fatal(err)
	}
	linkToZero := filepath.Join(dir, "link-to-zero")
	if err := os.Symlink("/dev/zero", linkToZero); err != nil {
		t.Fatal(err)
	}
	rule := Rule{MaxSize: 64 << 10}
	for _, tt := range []struct {
		name, path string
		want       error
		why        string
	}{
		{"FIFO", fifo, ErrNotRegular, "FIFO"},
		{"/dev/zero", "/dev/zero", ErrNotRegular, "device"},
		{"/dev/urandom", "/dev/urandom", ErrNotRegular, "device"},
		{"directory", dir, ErrNotRegular, "directory"},
		{"100 MB", big, ErrTooLarge, "104857600 bytes, more than the 65536"},
		{"link to a FIFO", linkToFIFO, ErrNotRegular, "FIFO"},
		{"link to /dev/zero", linkToZero, ErrNotRegular, "device"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := within(t, func() error {
				data, err := ReadFile(tt.path, rule)
				if err == nil {
					t.Errorf("read %d bytes", len(data))
				}
				return err
			})
			var re *RefusedError
			if !errors.Is(err, tt.want) || !errors.As(err, &re) || re.Path != tt.path {
				t.Fatalf("err = %v, want a *RefusedError for %s wrapping %v", err, tt.path, tt.want)
			}
			if !strings.Contains(err.Error(), tt.why) || !strings.HasPrefix(err.Error(), tt.path+": ") {
				t.Errorf("err = %q, want the path and %q", err, tt.why)
			}
		})
	}
}

// TestReadsWithinTheRule: a regular file up to MaxSize reads whole; a
// missing one is fs.ErrNotExist; a symlink is followed unless NoFollow.
func TestReadsWithinTheRule(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "resolv.conf")
	want := bytes.Repeat([]byte("nameserver 192.0.2.1\n"), 100)
	mustWrite(t, path, want, 0o644)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	exact := Rule{MaxSize: int64(len(want))}
	for _, p := range []string{path, link} {
		got, err := ReadFile(p, exact)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("ReadFile(%s) = %d bytes, %v; want the %d bytes", p, len(got), err, len(want))
		}
	}
	if _, err := ReadFile(path, Rule{MaxSize: int64(len(want)) - 1}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("one byte over MaxSize: err = %v, want ErrTooLarge", err)
	}
	if _, err := ReadFile(link, Rule{MaxSize: 1 << 20, NoFollow: true}); !errors.Is(err, ErrSymlink) {
		t.Errorf("symlink with NoFollow: err = %v, want ErrSymlink", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing"), exact); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: err = %v, want fs.ErrNotExist", err)
	}
	empty := filepath.Join(dir, "empty")
	mustWrite(t, empty, nil, 0o644)
	if got, err := ReadFile(empty, exact); err != nil || len(got) != 0 {
		t.Errorf("empty file: %q, %v", got, err)
	}
}

// TestGrowingPastTheSize: a file that passed its check and grows while it
// is read stops at MaxSize with ErrTooLarge instead of being read on.
func TestGrowingPastTheSize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts")
	mustWrite(t, path, []byte("192.0.2.1 a\n"), 0o644)
	f, err := Open(path, Rule{MaxSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(bytes.Repeat([]byte("x"), 1000)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	got, err := io.ReadAll(f)
	if !errors.Is(err, ErrTooLarge) || len(got) != 100 {
		t.Errorf("read %d bytes, err %v; want 100 and ErrTooLarge", len(got), err)
	}
}

// TestOwned: a file towerd serves as its own must be its user's or root's
// and writable by nobody else.
func TestOwned(t *testing.T) {
	dir := t.TempDir()
	rule := Rule{MaxSize: 1 << 10, Owned: true, NoFollow: true}
	for _, tt := range []struct {
		mode fs.FileMode
		ok   bool
	}{{0o600, true}, {0o644, true}, {0o620, false}, {0o606, false}} {
		path := filepath.Join(dir, tt.mode.String())
		mustWrite(t, path, []byte("x"), tt.mode)
		_, err := ReadFile(path, rule)
		if tt.ok != (err == nil) || (!tt.ok && (!errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), "writable by group or others"))) {
			t.Errorf("mode %04o: err = %v, want ok=%v", tt.mode, err, tt.ok)
		}
	}
	if os.Geteuid() != 0 {
		return
	}
	path := filepath.Join(dir, "nobody")
	mustWrite(t, path, []byte("x"), 0o600)
	if err := os.Chown(path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(path, rule); !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("a file of uid 65534: err = %v, want ErrUntrusted", err)
	}
}

// within runs f and fails the test if it takes more than a few seconds: a
// read that blocks on a FIFO or reads /dev/zero would never return.
func within(t *testing.T, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("blocked")
		return nil
	}
}

func mustWrite(t *testing.T, path string, data []byte, mode fs.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}
