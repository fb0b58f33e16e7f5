package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/towerd/towerd/cache"
)

// Cache persistence: on a clean stop towerd writes its cache to the state
// directory, and on start it reads it back with every entry's age intact, so
// a node restarted while its upstream is down still has stale answers to
// serve (issue 7). The format and its checks live in cache.Dump/Load; this
// file only finds the directory and handles the file.

// DefaultStateDir is where the cache is saved: systemd's StateDirectory=towerd.
const DefaultStateDir = "/var/lib/towerd"

// cacheFileName is the snapshot's name inside the state directory.
const cacheFileName = "cache.bin"

// resolveStateDir returns the directory to save the cache in, "" for none.
// systemd passes the directories of StateDirectory= in $STATE_DIRECTORY
// (colon-separated); it wins while state_dir is left at its default, so a
// unit with another StateDirectory= (or DynamicUser=, which moves it under
// /var/lib/private) needs no config change.
func resolveStateDir(configured string) string {
	if configured == DefaultStateDir {
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
func (d *daemon) stateFile(cfg Config) string {
	dir := resolveStateDir(cfg.StateDir)
	if dir == "" {
		return ""
	}
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		d.log.Info("state directory missing; the cache is not saved across restarts", "state_dir", dir)
		return ""
	}
	return filepath.Join(dir, cacheFileName)
}

// loadCache fills c from the snapshot, if there is one. A file that cannot
// be used is logged and left for the next save to replace: towerd starts
// with an empty cache rather than not at all.
func (d *daemon) loadCache(c *cache.Cache, cfg Config) {
	path := d.stateFile(cfg)
	if path == "" {
		return
	}
	f, err := os.Open(path)
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
	if stats.Loaded > 0 {
		attrs = append(attrs, "oldest_entry_age", now.Sub(stats.Oldest).Round(time.Second).String())
	}
	d.log.Info("loaded saved cache", attrs...)
}

// saveCache writes c to the snapshot file. It runs after the listeners have
// drained and upstream work has stopped, so the file holds the last answers
// towerd had.
func (d *daemon) saveCache(c *cache.Cache, cfg Config) {
	path := d.stateFile(cfg)
	if path == "" {
		return
	}
	start := time.Now()
	n, err := writeSnapshot(path, c)
	if err != nil {
		d.log.Warn("cache not saved", "file", path, "err", err)
		return
	}
	d.log.Info("saved cache", "file", path, "entries", n, "took", time.Since(start).Round(time.Millisecond).String())
}

// writeSnapshot replaces path atomically: the snapshot goes to a temporary
// file in the same directory, is synced, and is renamed over path, and the
// directory is synced so the rename survives a power cut. A reader (the next
// start) sees the old file or the new one, never half of one.
func writeSnapshot(path string, c *cache.Cache) (n int, err error) {
	dir := filepath.Dir(path)
	// CreateTemp makes the file 0600: the cache tells which names this node
	// looks up, which is nobody else's business.
	f, err := os.CreateTemp(dir, "."+cacheFileName+".*")
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if n, err = c.Dump(f); err != nil {
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
