package systemd

import (
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// Notifier sends sd_notify(3) state messages to the service manager. Without
// NOTIFY_SOCKET (towerd run by hand, in a container, under another
// supervisor) it is disabled and every method does nothing, so callers need no
// "am I under systemd?" checks of their own. It is safe for concurrent use.
type Notifier struct {
	// socket is NOTIFY_SOCKET as read at start: a path, or "@name" for an
	// abstract socket (Go's net package maps "@" to the leading NUL).
	socket string
	// watchdog is WATCHDOG_USEC: systemd restarts the service when no
	// WATCHDOG=1 arrived for this long. Zero when the watchdog is off.
	watchdog time.Duration

	mu   sync.Mutex
	conn *net.UnixConn
}

// NewNotifier reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID. The
// watchdog is on only when WATCHDOG_USEC is set and WATCHDOG_PID, if set, is
// this process; a bad WATCHDOG_USEC is an error (and the watchdog stays off).
func NewNotifier() (*Notifier, error) {
	n := &Notifier{socket: os.Getenv("NOTIFY_SOCKET")}
	if n.socket == "" {
		return n, nil
	}
	wd, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		return n, fmt.Errorf("reading WATCHDOG_USEC: %w", err)
	}
	n.watchdog = wd
	return n, nil
}

// Enabled reports whether messages go anywhere.
func (n *Notifier) Enabled() bool { return n != nil && n.socket != "" }

// WatchdogInterval is how often to send WATCHDOG=1: half of WATCHDOG_USEC,
// as sd_watchdog_enabled(3) advises, so one late tick does not get the
// service killed. Zero when the watchdog is off.
func (n *Notifier) WatchdogInterval() time.Duration {
	if !n.Enabled() {
		return 0
	}
	return n.watchdog / 2
}

// Ready sends READY=1: start-up (or a reload) is complete.
func (n *Notifier) Ready(status string) error {
	return n.send(daemon.SdNotifyReady, status)
}

// Reloading sends RELOADING=1 with MONOTONIC_USEC, the clock reading that
// systemd (253 and later) uses to match this message with the READY=1 that
// must follow once the reload is done.
func (n *Notifier) Reloading(status string) error {
	mono := strings.TrimSpace(daemon.SdNotifyMonotonicUsec())
	if mono == "" {
		return n.send(daemon.SdNotifyReloading, status)
	}
	return n.send(daemon.SdNotifyReloading+"\n"+mono, status)
}

// Stopping sends STOPPING=1: shutdown has begun.
func (n *Notifier) Stopping(status string) error {
	return n.send(daemon.SdNotifyStopping, status)
}

// Status sends STATUS= alone: what `systemctl status` shows.
func (n *Notifier) Status(status string) error {
	return n.send("", status)
}

// Watchdog sends WATCHDOG=1, with STATUS= when status is not empty so one
// datagram carries both.
func (n *Notifier) Watchdog(status string) error {
	return n.send(daemon.SdNotifyWatchdog, status)
}

// send writes one datagram of newline-separated assignments. The socket is
// dialled once and kept; after an error the next message dials again,
// because systemd may have been re-executed (daemon-reexec) in between.
func (n *Notifier) send(state, status string) error {
	if !n.Enabled() {
		return nil
	}
	msg := state
	if status != "" {
		if msg != "" {
			msg += "\n"
		}
		msg += "STATUS=" + oneLine(status)
	}
	if msg == "" {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conn == nil {
		conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: n.socket, Net: "unixgram"})
		if err != nil {
			return fmt.Errorf("connecting to NOTIFY_SOCKET %s: %w", n.socket, err)
		}
		n.conn = conn
	}
	if _, err := n.conn.Write([]byte(msg)); err != nil {
		n.conn.Close()
		n.conn = nil
		return fmt.Errorf("sending %q to NOTIFY_SOCKET %s: %w", firstLine(msg), n.socket, err)
	}
	return nil
}

// Close releases the socket; later messages dial again.
func (n *Notifier) Close() error {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conn == nil {
		return nil
	}
	err := n.conn.Close()
	n.conn = nil
	return err
}

// oneLine keeps STATUS= a single assignment: a newline would start a new one
// (a status could otherwise smuggle in READY=1).
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
