package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/resolver/clock"
)

// Cache persistence: on a clean stop, and every state_save_interval while
// serving, towerd writes its cache to the state directory, and on start it
// reads it back with every entry's age intact, so a node restarted while its
// upstream is down still has stale answers to serve (issue 7), even when it
// was a crash and not a clean stop. The format and its checks live in
// cache.Dump/Load; this file only finds the directory and handles the file.

// cacheFileName is the snapshot's name inside the state directory.
const cacheFileName = "cache.bin"

// resolveStateDir returns the directory to save the cache in, "" for none.
// systemd passes the directories of StateDirectory= in $STATE_DIRECTORY
// (colon-separated); it wins while state_dir is left at its default, so a
// unit with another StateDirectory= (or DynamicUser=, which moves it under
// /var/lib/private) needs no config change.
func resolveStateDir(configured string) string {
	if configured == config.DefaultStateDir {
		if env, _, _ := strings.Cut(os.Getenv("STATE_DIRECTORY"), ":"); env != "" {
			return env
		}
	}
	return configured
}

// stateFile returns the snapshot's path, or "" when persistence is off or the
// directory is missing. towerd does not create the directory: systemd does,
// with the owner and mode the unit asks for, and a directory towerd made
// itself as root somewhere under /var/lib would surprise an operator.
func (d *Daemon) stateFile(cfg config.Config) string {
	path, dir := statePath(cfg)
	if path == "" && dir != "" {
		d.log.Info("state directory missing; the cache is not saved across restarts", "state_dir", dir)
	}
	return path
}

// statePath is stateFile without the log line: the snapshot's path, or ""
// with the directory that is missing ("" too when persistence is off).
func statePath(cfg config.Config) (path, dir string) {
	dir = resolveStateDir(cfg.StateDir)
	if dir == "" {
		return "", ""
	}
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		return "", dir
	}
	return filepath.Join(dir, cacheFileName), dir
}

// loadCache fills c from the snapshot, if there is one. A file that cannot
// be trusted or used is logged and set aside (cache.OpenSnapshot, Load):
// towerd starts with an empty cache rather than not at all.
func (d *Daemon) loadCache(c *cache.Cache, cfg config.Config) {
	path := d.stateFile(cfg)
	if path == "" {
		return
	}
	f, err := cache.OpenSnapshot(path) // refuses links, FIFOs, others' and writable files
	if errors.Is(err, fs.ErrNotExist) {
		d.log.Info("no saved cache to load", "file", path)
		return
	}
	if err != nil {
		d.log.Warn("saved cache ignored", "file", path, "err", err)
		return
	}
	defer f.Close()
	stats, err := c.Load(f)
	if err != nil {
		d.log.Warn("saved cache ignored; starting with an empty cache", "file", path, "err", err)
		return
	}
	now := time.Now()
	attrs := []any{"file", path, "entries", stats.Loaded, "skipped", stats.Skipped,
		"saved_ago", now.Sub(stats.Written).Round(time.Second).String()}
	if stats.Rejected > 0 {
		d.log.Warn("saved cache entries dropped", "file", path, "rejected", stats.Rejected, "why", stats.Rejections)
	}
	if stats.Loaded > 0 {
		attrs = append(attrs, "clamped_to_max_ttl", stats.Clamped, "oldest_entry_age", now.Sub(stats.Oldest).Round(time.Second).String())
	}
	d.log.Info("loaded saved cache", attrs...)
}

// saveCache writes c to the snapshot file on stop. It runs after the
// listeners have drained and upstream work has stopped, so the file holds
// the last answers towerd had.
func (d *Daemon) saveCache(c *cache.Cache, cfg config.Config) {
	path := d.stateFile(cfg)
	if path == "" {
		return
	}
	d.writeCache(c, path, slog.LevelInfo)
	d.saveWatchSet(path, slog.LevelInfo) // consul.go
}

// writeCache saves c to path, counts the outcome in the metrics and logs it:
// success at level, failure as a warning.
func (d *Daemon) writeCache(c *cache.Cache, path string, level slog.Level) {
	start := time.Now()
	n, err := writeSnapshot(path, c)
	d.tel.RecordCacheSave(time.Now(), err)
	if err != nil {
		d.log.Warn("cache not saved", "file", path, "err", err)
		return
	}
	d.log.Log(context.Background(), level, "saved cache", "file", path, "entries", n,
		"took", time.Since(start).Round(time.Millisecond).String())
}

// cacheSaver saves the cache every state_save_interval while towerd serves.
// The save on stop never happens after a crash, a SIGKILL or the OOM
// killer; without this the next start would load the file of the last clean
// stop, however old, or nothing. It runs in its own goroutine so that a slow
// disk delays neither signals nor watchdog pings, and the cache keeps
// answering while it is written (cache.Dump holds its lock only to list the
// entries).
type cacheSaver struct {
	configs chan config.Config // a reload's configuration: new interval, new state_dir
	quit    chan struct{}
	done    chan struct{}
}

// startCacheSaver starts saving c every cfg.StateSaveInterval; stop ends it.
func (d *Daemon) startCacheSaver(c *cache.Cache, cfg config.Config) *cacheSaver {
	s := &cacheSaver{configs: make(chan config.Config, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go s.run(d, c, cfg)
	return s
}

func (s *cacheSaver) run(d *Daemon, c *cache.Cache, cfg config.Config) {
	defer close(s.done)
	clk := clock.Or(d.opts.Clock) // a test's Daemon may have none
	timer, fired := clk.NewTimer(time.Hour)
	defer timer.Stop()
	// The next save is due one interval after the last one (or the start),
	// also after a reload: reloads more frequent than the interval must not
	// put saving off for good.
	last := clk.Now()
	arm := func() {
		if cfg.StateSaveInterval.Duration > 0 {
			timer.Reset(last.Add(cfg.StateSaveInterval.Duration).Sub(clk.Now()))
		} else {
			timer.Stop() // "0s": only the save on stop
		}
	}
	arm()
	for {
		select {
		case <-s.quit:
			return
		case cfg = <-s.configs:
			arm()
		case <-fired:
			last = clk.Now()
			// A directory missing at start was logged then; saying so again
			// every few minutes at info would be noise.
			if path, dir := statePath(cfg); path != "" {
				d.writeCache(c, path, slog.LevelDebug)
				d.saveWatchSet(path, slog.LevelDebug) // consul.go
			} else if dir != "" {
				d.log.Debug("state directory missing; periodic cache save skipped", "state_dir", dir)
			}
			arm()
		}
	}
}

// reconfigure hands the saver a reloaded configuration; the next save is
// due one new interval after the last. Only the daemon's main loop calls it,
// so draining the buffer before sending cannot block.
func (s *cacheSaver) reconfigure(cfg config.Config) {
	select {
	case <-s.configs:
	default:
	}
	s.configs <- cfg
}

// stop ends the saver and waits for a save in progress: the save on stop
// must be the last one to rename its file into place.
func (s *cacheSaver) stop() {
	close(s.quit)
	<-s.done
}

// writeSnapshot replaces path atomically: the snapshot goes to a temporary
// file in the same directory, is synced, and is renamed over path, and the
// directory is synced so the rename survives a power cut. A reader (the next
// start) sees the old file or the new one, never half of one.
func writeSnapshot(path string, c *cache.Cache) (n int, err error) {
	return writeAtomic(path, c.Dump)
}

// writeAtomic is writeSnapshot for any file: dump writes the content.
func writeAtomic(path string, dump func(io.Writer) (int, error)) (n int, err error) {
	dir := filepath.Dir(path)
	// CreateTemp makes the file 0600: the cache (and the watch set) tell
	// which names this node looks up, which is nobody else's business.
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if n, err = dump(f); err != nil {
		return 0, fmt.Errorf("writing %s: %w", f.Name(), err)
	}
	if err = f.Sync(); err != nil {
		return 0, err
	}
	if err = f.Close(); err != nil {
		return 0, err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return 0, err
	}
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync() // best effort: some file systems cannot sync a directory
		d.Close()
	}
	return n, nil
}
