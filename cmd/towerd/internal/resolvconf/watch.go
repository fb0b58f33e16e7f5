package resolvconf

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/towerd/towerd/resolver/boundedfile"
	"github.com/towerd/towerd/resolver/clock"
)

// DefaultPollInterval is how often a watched file is re-read when no
// interval is given. Inotify usually reports a change at once; the poll is
// the safety net (a directory that did not exist yet, a file system without
// inotify, an event lost to a full queue) and keeps a change within issue
// 14's 2 s even then.
const DefaultPollInterval = time.Second

// WatchOptions tune a Watcher. The zero value is what the daemon uses.
type WatchOptions struct {
	// PollInterval is how often the file is re-read regardless of inotify.
	// Zero means DefaultPollInterval.
	PollInterval time.Duration
	// NoInotify leaves inotify out, so only the poll notices changes
	// (tests of the fallback).
	NoInotify bool
	// Refused, when set, is called (from the watch's goroutine) when the
	// file becomes one FileRule refuses (a FIFO, a device, too large),
	// once for each reason in a row: the last bytes seen stay in force,
	// and the caller gets to say why.
	Refused func(error)
	// Clock runs the poll (issue 33): a test steps it to make the poll
	// happen, without inotify and without waiting. Nil = the wall clock.
	Clock clock.Clock
}

// Watcher follows one resolv.conf-style file: DHCP clients and resolved
// replace it by renaming a new file over it, NetworkManager and resolvconf
// may re-point a symlink, and an editor may write it in place. Watcher
// notices all three by watching the directories of the path and of what it
// currently resolves to, re-reading the file on any event there, and
// comparing the bytes with the last ones it reported.
type Watcher struct {
	path    string
	changed func([]byte)
	opts    WatchOptions

	initial []byte
	last    []byte
	refusal string // why the file was last refused, "" once it read
	done    chan struct{}

	// Touched only by the run goroutine after Start returns.
	inotify *os.File
	watched map[string]dirWatch
}

// dirWatch is one armed directory: the inode it was when armed, so a
// directory replaced under the same name is armed again, and the watch
// descriptor to drop then.
type dirWatch struct {
	ino uint64
	wd  int
}

// StartWatch reads path, arms the watch, and from then on calls changed
// (from one goroutine, one call at a time) with the file's new bytes each
// time they differ from the last bytes seen, until ctx is done. A file that
// disappears is not a change: the last servers stay in force until a file
// is back (a DHCP client replaces its file; it does not leave none). The
// file need not exist at start; Initial is then nil. An empty file counts
// as missing: it is almost always one caught between truncate and write.
func StartWatch(ctx context.Context, path string, opts WatchOptions, changed func([]byte)) *Watcher {
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	w := &Watcher{path: path, changed: changed, opts: opts, done: make(chan struct{}), watched: map[string]dirWatch{}}
	events := make(chan struct{}, 1)
	var readers sync.WaitGroup
	if !opts.NoInotify {
		if fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK); err == nil {
			// A non-blocking descriptor goes to the runtime's poller, so
			// Close from the run goroutine wakes the blocked Read.
			w.inotify = os.NewFile(uintptr(fd), "inotify")
			readers.Add(1)
			go func() {
				defer readers.Done()
				readEvents(w.inotify, events)
			}()
		}
	}
	// Arm before the first read: a change between the two is then seen.
	w.arm()
	w.initial, _ = w.read()
	w.last = w.initial
	go func() {
		defer close(w.done)
		w.run(ctx, events)
		if w.inotify != nil {
			w.inotify.Close()
		}
		readers.Wait()
	}()
	return w
}

// Initial is the file's content when the watch started (nil if missing).
func (w *Watcher) Initial() []byte { return w.initial }

// Done is closed once the watch has stopped after its context ended.
func (w *Watcher) Done() <-chan struct{} { return w.done }

func (w *Watcher) run(ctx context.Context, events <-chan struct{}) {
	tick, ticks := clock.Or(w.opts.Clock).NewTicker(w.opts.PollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-events:
		case <-ticks:
		}
		w.arm()
		data, err := w.read()
		// An empty file is taken for one being written (created or
		// truncated, its bytes not there yet), like a missing one: the
		// last servers stay.
		if err != nil || len(data) == 0 || bytes.Equal(data, w.last) {
			continue
		}
		w.last = data
		w.changed(data)
	}
}

// read reads the file under FileRule and tells Refused of a refusal
// that is new. Neither the open nor the read can block, so stopping the
// watch never waits on the file.
func (w *Watcher) read() ([]byte, error) {
	data, err := ReadFile(w.path)
	var refused *boundedfile.RefusedError
	if !errors.As(err, &refused) {
		w.refusal = ""
		return data, err
	}
	if refused.Why != w.refusal {
		w.refusal = refused.Why
		if w.opts.Refused != nil {
			w.opts.Refused(err)
		}
	}
	return nil, err
}

// arm adds inotify watches for the directory of the path and of every
// link on the way to the file, as they are now. A directory that does not
// exist yet is tried again on the next poll; one replaced by another of the
// same name (its old inode reports IN_DELETE_SELF or IN_MOVE_SELF, which
// wakes the loop) is armed anew.
func (w *Watcher) arm() {
	if w.inotify == nil {
		return
	}
	fd := int(w.inotify.Fd())
	for _, dir := range watchDirs(w.path) {
		var st unix.Stat_t
		if err := unix.Stat(dir, &st); err != nil {
			delete(w.watched, dir)
			continue
		}
		old, ok := w.watched[dir]
		if ok && old.ino == st.Ino {
			continue
		}
		if ok {
			unix.InotifyRmWatch(fd, uint32(old.wd)) // already gone if the directory was deleted
		}
		// Not IN_MODIFY: a writer truncates before it writes, and reading
		// then would see the file half-written. IN_CLOSE_WRITE says the
		// writer is done.
		const mask = unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM |
			unix.IN_CREATE | unix.IN_DELETE | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF
		if wd, err := unix.InotifyAddWatch(fd, dir, mask); err == nil {
			w.watched[dir] = dirWatch{ino: st.Ino, wd: wd}
		} else {
			delete(w.watched, dir)
		}
	}
}

// watchDirs are the directories whose entries decide what path reads: its
// own and, for each symlink on the way, the directory of its target.
func watchDirs(path string) []string {
	dirs := []string{filepath.Dir(path)}
	name := path
	for range 40 {
		target, err := os.Readlink(name)
		if err != nil {
			break
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(name), target)
		}
		name = filepath.Clean(target)
		dirs = append(dirs, filepath.Dir(name))
	}
	if real, err := filepath.EvalSymlinks(path); err == nil {
		dirs = append(dirs, filepath.Dir(real))
	}
	return dirs
}

// readEvents turns every batch of inotify events into one wake-up; which
// name changed does not matter, the file is small and re-read whole.
func readEvents(f *os.File, events chan<- struct{}) {
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		_, err := f.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			// EINTR and friends: the poll still covers us.
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
				continue
			}
			return
		}
		select {
		case events <- struct{}{}:
		default:
		}
	}
}
