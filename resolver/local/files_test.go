package local

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestHostsFileRefusedKeepsLastGood: a hosts file swapped for a FIFO,
// /dev/urandom or a file over MaxHostsFileSize is refused without blocking,
// logged with the reason, and the names it gave last stay (issue 21: a FIFO
// kept towerd from serving, /dev/urandom grew it ~23 MB/s). A FIFO from the
// start gives no names and does not block New. A file that goes away takes
// its names with it.
func TestHostsFileRefusedKeepsLastGood(t *testing.T) {
	dir := t.TempDir()
	hosts := filepath.Join(dir, "hosts")
	startFIFO := filepath.Join(dir, "fifo-from-the-start")
	if err := syscall.Mkfifo(startFIFO, 0o644); err != nil {
		t.Fatal(err)
	}
	writeHosts(t, hosts, "192.0.2.10 one.lan\n", time.Unix(1e9, 0))
	var logs bytes.Buffer
	var s *Source
	within(t, func() {
		var err error
		s, err = New(Options{HostsFiles: []string{hosts, startFIFO}, Log: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Error(err)
		}
	})
	if s == nil {
		t.FailNow()
	}
	if got := answerOf(s, "one.lan.", dns.TypeA); got != "NOERROR one.lan. 0 IN A 192.0.2.10" {
		t.Fatalf("one.lan.: %s", got)
	}
	if !strings.Contains(logs.String(), startFIFO+": it is a FIFO") {
		t.Errorf("the FIFO at start is not logged:\n%s", logs.String())
	}

	big := filepath.Join(dir, "big")
	writeHosts(t, big, "", time.Unix(1e9, 0))
	if err := os.Truncate(big, MaxHostsFileSize+1); err != nil {
		t.Fatal(err)
	}
	for _, swap := range []struct {
		why   string
		plant func(tmp string) error
	}{
		{"it is a FIFO", func(tmp string) error { return syscall.Mkfifo(tmp, 0o644) }},
		{"it is a device", func(tmp string) error { return os.Symlink("/dev/urandom", tmp) }},
		{fmt.Sprintf("more than the %d", MaxHostsFileSize), func(tmp string) error { return os.Symlink(big, tmp) }},
	} {
		logs.Reset()
		tmp := hosts + ".new"
		if err := swap.plant(tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, hosts); err != nil {
			t.Fatal(err)
		}
		within(t, s.Reload)
		if got := answerOf(s, "one.lan.", dns.TypeA); got != "NOERROR one.lan. 0 IN A 192.0.2.10" {
			t.Errorf("%s: one.lan. %s; want its last good address", swap.why, got)
		}
		if !strings.Contains(logs.String(), "last good entries stay") || !strings.Contains(logs.String(), swap.why) {
			t.Errorf("%s: not logged:\n%s", swap.why, logs.String())
		}
	}

	// A reload's new source (the daemon makes one per reload) keeps what
	// the one it replaces read last.
	var next *Source
	within(t, func() {
		next, _ = New(Options{HostsFiles: []string{hosts}, Replaces: s})
	})
	if got := answerOf(next, "one.lan.", dns.TypeA); got != "NOERROR one.lan. 0 IN A 192.0.2.10" {
		t.Errorf("a new source replacing the old: one.lan. %s; want its last good address", got)
	}

	if err := os.Remove(hosts); err != nil {
		t.Fatal(err)
	}
	within(t, s.Reload)
	if got := answerOf(s, "one.lan.", dns.TypeA); got != "forward" {
		t.Errorf("removed file: one.lan. %s; want its names gone", got)
	}
}

// TestHostsFileOfGarbage: a file of bad lines logs a few of them and a
// count, not a line per line.
func TestHostsFileOfGarbage(t *testing.T) {
	hosts := filepath.Join(t.TempDir(), "hosts")
	writeHosts(t, hosts, strings.Repeat("not-an-address name\n", 10000)+"192.0.2.1 ok.lan\n", time.Unix(1e9, 0))
	var logs bytes.Buffer
	s, err := New(Options{HostsFiles: []string{hosts}, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if got := answerOf(s, "ok.lan.", dns.TypeA); got != "NOERROR ok.lan. 0 IN A 192.0.2.1" {
		t.Errorf("ok.lan.: %s", got)
	}
	if n := strings.Count(logs.String(), "\n"); n > maxBadLinesLogged+3 || !strings.Contains(logs.String(), "more=9990") {
		t.Errorf("%d log lines for 10,000 bad lines:\n%s", n, logs.String())
	}
}

// within fails the test if f blocks: a read of a FIFO or /dev/urandom would.
func within(t *testing.T, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second): // a bound on a hang
		t.Fatal("blocked")
	}
}
