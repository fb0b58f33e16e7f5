package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/resolver"
	"github.com/towerd/towerd/test/dnstest"
	"github.com/towerd/towerd/upstream"
)

// newSDTestDaemon is a daemon with what the systemd side reads (a handler,
// a group, a cache) and no sockets, past the point where its sockets
// serve: the test plays the main loop by hand.
func newSDTestDaemon(t *testing.T, env map[string]string, checks ...readinessCheck) (*Daemon, *dnstest.SyncBuffer) {
	t.Helper()
	for _, k := range []string{"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID"} {
		t.Setenv(k, env[k])
	}
	// Port 9 (discard) on loopback: never asked, the test sends no query.
	g, err := upstream.NewGroup(".", []string{"127.0.0.1:9"}, upstream.GroupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	c, err := cache.New(cache.Config{Capacity: 10})
	if err != nil {
		t.Fatal(err)
	}
	h, err := resolver.NewHandler(resolver.Config{Zones: []resolver.Zone{{Name: ".", Upstream: g}}}, c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	logs := &dnstest.SyncBuffer{}
	d := &Daemon{log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		opts: Options{ConfigFile: "test.toml", Systemd: true}, handler: h, groups: []*upstream.Group{g}, cache: c,
		sd: &sdSession{events: make(chan sdEvent)}}
	for _, c := range checks {
		d.addReadiness(c.what, c.wait)
	}
	if _, _, err := d.adoptSockets(config.DefaultConfig(), nil); err != nil {
		t.Fatal(err)
	}
	d.sdServing([]string{"udp/127.0.0.1:53", "tcp/127.0.0.1:53"})
	t.Cleanup(d.sd.cancel)
	return d, logs
}

func listenUnixgram(t *testing.T, path string) *net.UnixConn {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func readDatagram(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

// nextEvent is one turn of the main loop, bounded.
func nextEvent(t *testing.T, d *Daemon) sdEvent {
	t.Helper()
	select {
	case ev := <-d.sd.events:
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event for the main loop")
		return 0
	}
}

func TestReadyWaitsForEveryReadinessCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	sock := listenUnixgram(t, path)
	release := make(chan struct{})
	var mu sync.Mutex
	var order []string
	record := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	d, logs := newSDTestDaemon(t, map[string]string{"NOTIFY_SOCKET": path},
		readinessCheck{"the first sync", func(ctx context.Context) error {
			<-release
			record("first")
			return nil
		}},
		readinessCheck{"a check that fails", func(ctx context.Context) error {
			record("second")
			return errors.New("agent unreachable")
		}})

	// Until the first check returns, nothing can tell the main loop that
	// towerd is ready.
	select {
	case ev := <-d.sd.events:
		t.Fatalf("event %v before the readiness checks returned", ev)
	default:
	}
	close(release)
	if ev := nextEvent(t, d); ev != sdAllReady {
		t.Fatalf("event %v, want sdAllReady", ev)
	}
	d.sdHandle(sdAllReady)
	msg := readDatagram(t, sock)
	if !strings.HasPrefix(msg, "READY=1\nSTATUS=serving udp/127.0.0.1:53 tcp/127.0.0.1:53; cache 0/10, 0 lookups") ||
		!strings.HasSuffix(msg, "; 0 in flight; upstreams 1/1 up") {
		t.Errorf("READY message %q", msg)
	}
	mu.Lock()
	if strings.Join(order, ",") != "first,second" {
		t.Errorf("checks ran as %v, want one after the other", order)
	}
	mu.Unlock()
	if !strings.Contains(logs.String(), "readiness check failed; reporting ready anyway") {
		t.Errorf("a failed check is not logged:\n%s", logs)
	}

	d.sdReloading()
	if msg := readDatagram(t, sock); !strings.HasPrefix(msg, "RELOADING=1\nMONOTONIC_USEC=") {
		t.Errorf("reloading sent %q", msg)
	}
	d.sdReloaded()
	if msg := readDatagram(t, sock); !strings.HasPrefix(msg, "READY=1\n") {
		t.Errorf("reloaded sent %q", msg)
	}
}

func TestStoppingBeforeReady(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	sock := listenUnixgram(t, path)
	returned := make(chan error, 1)
	d, _ := newSDTestDaemon(t, map[string]string{"NOTIFY_SOCKET": path},
		readinessCheck{"a sync that never comes", func(ctx context.Context) error {
			<-ctx.Done()
			returned <- ctx.Err()
			return ctx.Err()
		}})
	// A reload before READY=1 says nothing: the READY=1 still to come
	// covers it, and a READY=1 now would be a lie.
	d.sdReloading()
	d.sdReloaded()
	d.sdStopping()
	if msg := readDatagram(t, sock); !strings.HasPrefix(msg, "STOPPING=1\n") {
		t.Errorf("first message %q, want STOPPING=1", msg)
	}
	select {
	case err := <-returned:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("check ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stopping did not end the readiness check")
	}
}

func TestNotifyFailuresAreLoggedOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify") // nothing listens yet
	d, logs := newSDTestDaemon(t, map[string]string{"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "60000000"})
	for range 3 {
		d.sdHandle(sdTick)
	}
	if n := strings.Count(logs.String(), "cannot notify systemd"); n != 1 {
		t.Errorf("%d warnings for 3 failed pings, want 1:\n%s", n, logs)
	}
	sock := listenUnixgram(t, path)
	d.sdHandle(sdTick)
	if msg := readDatagram(t, sock); !strings.HasPrefix(msg, "WATCHDOG=1\nSTATUS=serving") {
		t.Errorf("ping %q", msg)
	}
	if !strings.Contains(logs.String(), "notifying systemd works again") {
		t.Errorf("recovery not logged:\n%s", logs)
	}
}
