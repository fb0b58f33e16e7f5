package test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// notifyMessage is one sd_notify datagram: its assignments and when it
// arrived.
type notifyMessage struct {
	Fields map[string]string
	Raw    string
	At     time.Time
}

func (m notifyMessage) has(assignment string) bool {
	k, v, _ := strings.Cut(assignment, "=")
	got, ok := m.Fields[k]
	return ok && got == v
}

// notifySocket plays systemd's side of sd_notify: a unixgram socket the
// test owns, whose datagrams are read in order by one goroutine.
type notifySocket struct {
	Path     string
	conn     *net.UnixConn
	messages chan notifyMessage
}

func newNotifySocket(t *testing.T) *notifySocket {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	s := &notifySocket{Path: path, conn: conn, messages: make(chan notifyMessage, 1024)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(s.messages)
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return // closed by the cleanup
			}
			raw := string(buf[:n])
			m := notifyMessage{Fields: map[string]string{}, Raw: raw, At: time.Now()}
			for _, line := range strings.Split(raw, "\n") {
				if k, v, ok := strings.Cut(line, "="); ok {
					m.Fields[k] = v
				}
			}
			s.messages <- m
		}
	}()
	t.Cleanup(func() {
		conn.Close()
		<-done
	})
	return s
}

// next returns the next message, or fails after timeout.
func (s *notifySocket) next(t *testing.T, timeout time.Duration) notifyMessage {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case m, ok := <-s.messages:
		if !ok {
			t.Fatal("notify socket closed")
		}
		return m
	case <-timer.C:
		t.Fatalf("no sd_notify message within %v", timeout)
	}
	return notifyMessage{}
}

// nextNot returns the next message that is not only a watchdog ping (with
// its status): those may come at any time and are checked on their own.
func (s *notifySocket) nextNot(t *testing.T, timeout time.Duration) notifyMessage {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		m := s.next(t, time.Until(deadline))
		if !m.has("WATCHDOG=1") {
			return m
		}
	}
}

// rest returns every message sent so far, without guessing how long to
// wait: the test sends a sentinel datagram of its own, and a unix socket
// keeps datagrams in order, so whatever came before it was sent before.
func (s *notifySocket) rest(t *testing.T) []notifyMessage {
	t.Helper()
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: s.Path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(sentinel)); err != nil {
		t.Fatal(err)
	}
	var out []notifyMessage
	for {
		m := s.next(t, 5*time.Second)
		if m.Raw == sentinel {
			return out
		}
		out = append(out, m)
	}
}

const sentinel = "X_TOWERD_TEST_SENTINEL=1"

// systemdEnv is this process's environment without the variables through
// which systemd talks to a service, plus extra: a test never hands towerd
// the runner's own NOTIFY_SOCKET or sockets.
func systemdEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES":
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}
