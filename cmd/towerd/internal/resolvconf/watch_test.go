package resolvconf

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/towerd/towerd/resolver/boundedfile"
	"github.com/towerd/towerd/test/dnstest"
)

// watchNever is a poll interval no test lives to see: with it, only inotify can
// deliver a change.
const watchNever = time.Hour

// watchBound bounds every wait for a change; reaching it fails the test.
// It is a bound against hanging, not issue 14's 2 s (issue 33: no unit
// test asserts a wall-clock bound): inotify reports at once, and that the
// poll reads the file at each of its ticks is shown on the fake clock
// (TestWatchPollFallback).
const watchBound = 10 * time.Second

// startTestWatch starts a watch whose changes arrive on a channel, stopped at
// the end of the test.
func startTestWatch(t *testing.T, path string, opts WatchOptions) (*Watcher, <-chan string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	changes := make(chan string, 16)
	w := StartWatch(ctx, path, opts, func(data []byte) { changes <- string(data) })
	t.Cleanup(func() {
		cancel()
		select {
		case <-w.Done():
		case <-time.After(watchBound):
			t.Error("watch did not stop after its context ended")
		}
	})
	return w, changes
}

func watchExpect(t *testing.T, changes <-chan string, want string) {
	t.Helper()
	select {
	case got := <-changes:
		if got != want {
			t.Fatalf("change delivered %q, want %q", got, want)
		}
	case <-time.After(watchBound):
		t.Fatalf("no change within %v (want %q)", watchBound, want)
	}
}

func watchWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// watchRenameOver replaces path the way resolved and dhclient-script do.
func watchRenameOver(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".new"
	watchWrite(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestWatchSeesRenameOverAndInPlaceWritesThroughInotify(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "resolv.conf")
	watchWrite(t, path, "nameserver 10.0.0.1\n")
	w, changes := startTestWatch(t, path, WatchOptions{PollInterval: watchNever})
	if string(w.Initial()) != "nameserver 10.0.0.1\n" {
		t.Fatalf("Initial = %q", w.Initial())
	}
	watchRenameOver(t, path, "nameserver 10.0.0.2\n")
	watchExpect(t, changes, "nameserver 10.0.0.2\n")
	watchWrite(t, path, "nameserver 10.0.0.3\n")
	watchExpect(t, changes, "nameserver 10.0.0.3\n")

	// The same bytes written again are not a change: the next change
	// delivered is the one after them.
	watchRenameOver(t, path, "nameserver 10.0.0.3\n")
	watchRenameOver(t, path, "nameserver 10.0.0.4\n")
	watchExpect(t, changes, "nameserver 10.0.0.4\n")

	// A file that goes away is not a change; the one that comes back is.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	watchWrite(t, path, "nameserver 10.0.0.5\n")
	watchExpect(t, changes, "nameserver 10.0.0.5\n")

	// Nor is an empty file (one caught between truncate and write).
	watchWrite(t, path, "")
	watchWrite(t, path, "nameserver 10.0.0.6\n")
	watchExpect(t, changes, "nameserver 10.0.0.6\n")
}

func TestWatchFollowsASymlinkThatIsRepointed(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for _, d := range []string{"etc", "run/a", "run/b"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	a, b := filepath.Join(root, "run/a/resolv.conf"), filepath.Join(root, "run/b/resolv.conf")
	watchWrite(t, a, "nameserver 10.1.0.1\n")
	watchWrite(t, b, "nameserver 10.2.0.1\n")
	link := filepath.Join(root, "etc/resolv.conf")
	if err := os.Symlink("../run/a/resolv.conf", link); err != nil {
		t.Fatal(err)
	}
	_, changes := startTestWatch(t, link, WatchOptions{PollInterval: watchNever})

	// The target changes where it lives, not where the link is.
	watchRenameOver(t, a, "nameserver 10.1.0.2\n")
	watchExpect(t, changes, "nameserver 10.1.0.2\n")

	// The link is re-pointed atomically, as resolvconf and NetworkManager do.
	tmp := link + ".tmp"
	if err := os.Symlink("../run/b/resolv.conf", tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, link); err != nil {
		t.Fatal(err)
	}
	watchExpect(t, changes, "nameserver 10.2.0.1\n")
	// And the new target's directory is watched from then on.
	watchRenameOver(t, b, "nameserver 10.2.0.2\n")
	watchExpect(t, changes, "nameserver 10.2.0.2\n")
}

// TestWatchRearmsAReplacedDirectory swaps the file's directory for a new
// one under the same name; with no poll, only re-arming inotify on the new
// directory can see the change made in it afterwards.
func TestWatchRearmsAReplacedDirectory(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "resolve")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "resolv.conf")
	watchWrite(t, path, "nameserver 10.6.0.1\n")
	_, changes := startTestWatch(t, path, WatchOptions{PollInterval: watchNever})

	next := filepath.Join(root, "resolve.new")
	if err := os.Mkdir(next, 0o755); err != nil {
		t.Fatal(err)
	}
	watchWrite(t, filepath.Join(next, "resolv.conf"), "nameserver 10.6.0.2\n")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	// rename(2) itself: os.Rename refuses an existing directory as target.
	if err := unix.Rename(next, dir); err != nil { // over the now empty directory
		t.Fatal(err)
	}
	watchExpect(t, changes, "nameserver 10.6.0.2\n")
	watchRenameOver(t, path, "nameserver 10.6.0.3\n")
	watchExpect(t, changes, "nameserver 10.6.0.3\n")
}

func TestWatchPollFallback(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// The file and even its directory appear only later, as
	// /run/towerd-dhclient does at the first lease after install.
	path := filepath.Join(dir, "later", "resolv.conf")
	// The poll on the fake clock (issue 33): a file is read at each tick,
	// and only then.
	clk := dnstest.NewClock(time.Unix(1700000000, 0))
	w, changes := startTestWatch(t, path, WatchOptions{PollInterval: time.Second, NoInotify: true, Clock: clk})
	if w.Initial() != nil {
		t.Fatalf("Initial of a missing file = %q", w.Initial())
	}
	ctx, cancel := context.WithTimeout(context.Background(), watchBound)
	defer cancel()
	if err := clk.WaitTimers(ctx, 1); err != nil {
		t.Fatalf("the poll's ticker not armed: %v", err)
	}
	if err := os.Mkdir(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, content := range []string{"nameserver 10.3.0.1\n", "nameserver 10.3.0.2\n"} {
		watchWrite(t, path, content)
		clk.Advance(time.Second - 1)
		select {
		case got := <-changes:
			t.Fatalf("%q delivered before the poll's tick", got)
		default:
		}
		clk.Advance(1)
		watchExpect(t, changes, content)
	}
}

func TestWatchArmsADirectoryCreatedLater(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "later", "resolv.conf")
	// The poll arms inotify on the directory once it exists.
	_, changes := startTestWatch(t, path, WatchOptions{PollInterval: 5 * time.Millisecond})
	if err := os.Mkdir(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	watchRenameOver(t, path, "nameserver 10.4.0.1\n")
	watchExpect(t, changes, "nameserver 10.4.0.1\n")
}

// TestWatchStopsWithItsContext is not parallel: the parallel tests wait
// until it is done, so goleak sees only this watch's goroutines.
func TestWatchStopsWithItsContext(t *testing.T) {
	defer goleak.VerifyNone(t)
	path := filepath.Join(t.TempDir(), "resolv.conf")
	watchWrite(t, path, "nameserver 10.5.0.1\n")
	ctx, cancel := context.WithCancel(context.Background())
	w := StartWatch(ctx, path, WatchOptions{PollInterval: watchNever}, func([]byte) { t.Error("change after stop") })
	cancel()
	select {
	case <-w.Done():
	case <-time.After(watchBound):
		t.Fatal("watch did not stop")
	}
	watchRenameOver(t, path, "nameserver 10.5.0.2\n")
}

// TestWatchRefusesWhatIsNotAResolvConf: a FIFO, /dev/zero behind a link
// and a 100 MB file swapped in for the followed file are each reported
// once to Refused, never delivered as a change, and never block the watch
// (issue 21: a FIFO swapped in wedged the daemon's main loop, /dev/zero
// took 1.63 GB). A good file afterwards is a change again.
func TestWatchRefusesWhatIsNotAResolvConf(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "resolv.conf")
	watchWrite(t, path, "nameserver 10.0.0.1\n")
	refusals := make(chan error, 16)
	_, changes := startTestWatch(t, path, WatchOptions{PollInterval: 50 * time.Millisecond,
		Refused: func(err error) { refusals <- err }})
	big := filepath.Join(dir, "big")
	watchWrite(t, big, "")
	if err := os.Truncate(big, 100<<20); err != nil {
		t.Fatal(err)
	}
	swapIn := map[string]func(tmp string) error{
		"FIFO":                func(tmp string) error { return unix.Mkfifo(tmp, 0o644) },
		"device":              func(tmp string) error { return os.Symlink("/dev/zero", tmp) },
		"more than the 65536": func(tmp string) error { return os.Symlink(big, tmp) },
	}
	for _, why := range []string{"FIFO", "device", "more than the 65536"} {
		tmp := path + ".new"
		if err := swapIn[why](tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-refusals:
			if !errors.Is(err, boundedfile.ErrNotRegular) && !errors.Is(err, boundedfile.ErrTooLarge) || !strings.Contains(err.Error(), why) {
				t.Errorf("refusal %v, want one saying %q", err, why)
			}
		case <-time.After(watchBound):
			t.Fatalf("%s swapped in: no refusal within %v", why, watchBound)
		}
	}
	select {
	case got := <-changes:
		t.Fatalf("a refused file was delivered as a change: %d bytes", len(got))
	default:
	}
	watchRenameOver(t, path, "nameserver 10.0.0.2\n")
	watchExpect(t, changes, "nameserver 10.0.0.2\n")
	if len(refusals) != 0 {
		t.Errorf("%d more refusals: each state is reported once", len(refusals))
	}
}
