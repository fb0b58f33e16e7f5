package systemd

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// notifySocket is a NOTIFY_SOCKET the test owns.
type notifySocket struct {
	conn *net.UnixConn
	addr string
}

func listenNotify(t *testing.T, addr string) *notifySocket {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &notifySocket{conn: conn, addr: addr}
}

// next returns the next datagram, failing after a bound instead of hanging.
func (s *notifySocket) next(t *testing.T) string {
	t.Helper()
	if err := s.conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := s.conn.Read(buf)
	if err != nil {
		t.Fatalf("reading the notify socket: %v", err)
	}
	return string(buf[:n])
}

func TestNotifierSilentWithoutNotifySocket(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	t.Setenv("WATCHDOG_USEC", "1000000")
	n, err := NewNotifier()
	if err != nil {
		t.Fatal(err)
	}
	if n.Enabled() || n.WatchdogInterval() != 0 {
		t.Fatalf("Enabled=%v WatchdogInterval=%v without NOTIFY_SOCKET; want off", n.Enabled(), n.WatchdogInterval())
	}
	for _, send := range []func() error{
		func() error { return n.Ready("x") }, func() error { return n.Reloading("x") },
		func() error { return n.Stopping("x") }, func() error { return n.Status("x") },
		func() error { return n.Watchdog("x") },
	} {
		if err := send(); err != nil {
			t.Errorf("a disabled notifier returned %v", err)
		}
	}
	var nilNotifier *Notifier
	if nilNotifier.Enabled() || nilNotifier.Ready("x") != nil || nilNotifier.Close() != nil {
		t.Error("a nil Notifier must be a silent one")
	}
}

func TestNotifierMessages(t *testing.T) {
	for _, kind := range []string{"path", "abstract"} {
		t.Run(kind, func(t *testing.T) {
			addr := filepath.Join(t.TempDir(), "notify")
			if kind == "abstract" {
				addr = fmt.Sprintf("@towerd-test-%d-%d", os.Getpid(), time.Now().UnixNano())
			}
			sock := listenNotify(t, addr)
			t.Setenv("NOTIFY_SOCKET", addr)
			t.Setenv("WATCHDOG_USEC", "")
			n, err := NewNotifier()
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()

			if err := n.Ready("serving\nREADY=1 smuggled"); err != nil {
				t.Fatal(err)
			}
			if got, want := sock.next(t), "READY=1\nSTATUS=serving READY=1 smuggled"; got != want {
				t.Errorf("Ready sent %q, want %q (a status must stay one line)", got, want)
			}

			var before unix.Timespec
			if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &before); err != nil {
				t.Fatal(err)
			}
			if err := n.Reloading("reloading"); err != nil {
				t.Fatal(err)
			}
			msg := sock.next(t)
			lines := strings.Split(msg, "\n")
			if len(lines) != 3 || lines[0] != "RELOADING=1" || !strings.HasPrefix(lines[1], "MONOTONIC_USEC=") || lines[2] != "STATUS=reloading" {
				t.Fatalf("Reloading sent %q", msg)
			}
			usec, err := strconv.ParseInt(strings.TrimPrefix(lines[1], "MONOTONIC_USEC="), 10, 64)
			if err != nil || usec < before.Nano()/1000 || usec > before.Nano()/1000+int64(5*time.Second/time.Microsecond) {
				t.Errorf("MONOTONIC_USEC=%d, want CLOCK_MONOTONIC in µs (about %d)", usec, before.Nano()/1000)
			}

			for _, c := range []struct {
				send func() error
				want string
			}{
				{func() error { return n.Watchdog("") }, "WATCHDOG=1"},
				{func() error { return n.Watchdog("ok") }, "WATCHDOG=1\nSTATUS=ok"},
				{func() error { return n.Status("3 in flight") }, "STATUS=3 in flight"},
				{func() error { return n.Stopping("stopping") }, "STOPPING=1\nSTATUS=stopping"},
			} {
				if err := c.send(); err != nil {
					t.Fatal(err)
				}
				if got := sock.next(t); got != c.want {
					t.Errorf("sent %q, want %q", got, c.want)
				}
			}
		})
	}
}

func TestNotifierRedialsAfterTheSocketComesBack(t *testing.T) {
	// systemd re-executing itself (daemon-reexec) replaces its socket; the
	// next message after a failed one must reach the new socket.
	addr := filepath.Join(t.TempDir(), "notify")
	first := listenNotify(t, addr)
	t.Setenv("NOTIFY_SOCKET", addr)
	n, err := NewNotifier()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if err := n.Status("one"); err != nil {
		t.Fatal(err)
	}
	first.next(t)
	first.conn.Close()
	os.Remove(addr)
	if err := n.Status("lost"); err == nil {
		t.Fatal("sending to a closed socket should fail")
	}
	second := listenNotify(t, addr)
	if err := n.Status("two"); err != nil {
		t.Fatalf("after the socket came back: %v", err)
	}
	if got := second.next(t); got != "STATUS=two" {
		t.Errorf("got %q", got)
	}
}

func TestWatchdogInterval(t *testing.T) {
	sockPath := filepath.Join(t.TempDir(), "notify")
	listenNotify(t, sockPath)
	tests := []struct {
		usec, pid string
		want      time.Duration
		wantErr   bool
	}{
		{"", "", 0, false},
		{"2000000", "", time.Second, false},
		{"300000", strconv.Itoa(os.Getpid()), 150 * time.Millisecond, false},
		{"2000000", "1", 0, false}, // meant for another process
		{"soon", "", 0, true},
		{"-5", "", 0, true},
	}
	for _, tt := range tests {
		t.Setenv("NOTIFY_SOCKET", sockPath)
		t.Setenv("WATCHDOG_USEC", tt.usec)
		t.Setenv("WATCHDOG_PID", tt.pid)
		n, err := NewNotifier()
		if (err != nil) != tt.wantErr {
			t.Errorf("WATCHDOG_USEC=%q: err %v, want error %v", tt.usec, err, tt.wantErr)
		}
		if got := n.WatchdogInterval(); got != tt.want {
			t.Errorf("WATCHDOG_USEC=%q WATCHDOG_PID=%q: interval %v, want %v", tt.usec, tt.pid, got, tt.want)
		}
	}
}
