package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/towerd/towerd/resolver/boundedfile"
	"github.com/towerd/towerd/test/dnstest"
)

// TestLoadRefusesWhatIsNotAConfigFile: a FIFO or a device as the config
// file or a drop-in, a huge drop-in, and a FIFO as the Consul token file
// fail Load at once with an error naming the file (issue 21: a FIFO kept
// towerd from starting and `towerd check` from returning). These files are
// required: towerd does not start without them.
func TestLoadRefusesWhatIsNotAConfigFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	withDropIn := func(name string, plant func(path string) error) string {
		d := t.TempDir()
		if err := os.Mkdir(filepath.Join(d, DropInDirName), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := plant(filepath.Join(d, DropInDirName, name)); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(d, "towerd.toml")
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	bigDropIn := withDropIn("10-big.toml", func(p string) error {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			return err
		}
		return os.Truncate(p, 100<<20)
	})
	fifoDropIn := withDropIn("20-fifo.toml", func(p string) error { return syscall.Mkfifo(p, 0o644) })
	tokenFIFO := dnstest.WriteFile(t, "towerd.toml", "[consul]\ntoken_file = \""+fifo+"\"\n")
	for _, tt := range []struct {
		name, path, names string
		want              error
	}{
		{"config file a FIFO", fifo, fifo, boundedfile.ErrNotRegular},
		{"config file /dev/zero", "/dev/zero", "/dev/zero", boundedfile.ErrNotRegular},
		{"drop-in of 100 MB", bigDropIn, filepath.Join(filepath.Dir(bigDropIn), DropInDirName, "10-big.toml"), boundedfile.ErrTooLarge},
		{"drop-in a FIFO", fifoDropIn, filepath.Join(filepath.Dir(fifoDropIn), DropInDirName, "20-fifo.toml"), boundedfile.ErrNotRegular},
		{"token file a FIFO", tokenFIFO, `key "consul.token_file": cannot be read: ` + fifo + ": it is a FIFO", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := Load(tt.path, false)
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second): // a bound on a hang
				t.Fatal("Load blocked")
			}
			if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) || !strings.Contains(err.Error(), tt.names) {
				t.Errorf("Load = %v; want %v naming %s", err, tt.want, tt.names)
			}
		})
	}
}
