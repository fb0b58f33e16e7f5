package consul

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// The watch set across restarts: WriteSet saves which services this node
// asked for and when, ReadSet restores them before Run, and Run watches them
// from the start, so a restarted node answers its services from memory
// before the first question (and Synced waits for them).

// SetFileName is the set's file in towerd's state directory, next to the
// cache snapshot.
const SetFileName = "watch-set.json"

// setVersion is the file format's version; another one is refused.
const setVersion = 1

// MaxSetFileSize is the most of the set's file ReadSet reads (issue 21):
// 150 services (consul.max_watches at most) take under 20 KiB; a longer
// file fails to decode and is ignored.
const MaxSetFileSize = 1 << 20

// SavedService is one service of a saved set.
type SavedService struct {
	Name string `json:"name"`
	// LastAsked is when a question last asked for it; zero = never (a
	// watch restored and not asked since).
	LastAsked time.Time `json:"last_asked,omitzero"`
}

// EndedWatch is a service whose watch ended while the agent had a
// streaming view for it, and when: the agent keeps the view for 20
// minutes, so the next towerd counts it against the bound on views.
type EndedWatch struct {
	Name string    `json:"name"`
	At   time.Time `json:"at"`
}

type savedSet struct {
	Version  int            `json:"version"`
	Saved    time.Time      `json:"saved"`
	Services []SavedService `json:"services"`
	Ended    []EndedWatch   `json:"ended,omitempty"`
}

// WriteSet writes the services watched because they were asked for (not the
// pinned ones, which the configuration names; nothing in the catalog mode),
// most recently asked first, and those whose views the agent still holds,
// as JSON.
func (w *Watcher) WriteSet(out io.Writer) (int, error) {
	set := savedSet{Version: setVersion, Saved: w.clock.Now().UTC(), Services: []SavedService{}}
	if !w.cfg.watchAll() {
		w.mu.Lock()
		for key, sl := range w.watches {
			if sl.pinned {
				continue
			}
			s := SavedService{Name: key}
			if ns := sl.asked.Load(); ns > 0 {
				s.LastAsked = time.Unix(0, ns).UTC()
			}
			set.Services = append(set.Services, s)
		}
		// Not yet started by Run: keep what was read, not an empty file.
		set.Services = append(set.Services, w.restored...)
		for key, at := range w.recent {
			set.Ended = append(set.Ended, EndedWatch{Name: key, At: at.UTC()})
		}
		w.mu.Unlock()
	}
	sortSaved(set.Services)
	sort.Slice(set.Ended, func(i, j int) bool { return set.Ended[i].Name < set.Ended[j].Name })
	b, err := json.MarshalIndent(set, "", "  ")
	if err != nil {
		return 0, err
	}
	_, err = out.Write(append(b, '\n'))
	return len(set.Services), err
}

// ReadSet reads a set WriteSet wrote; Run then watches its services from the
// start, the most recently asked first, as many as the cap leaves room for
// beside the pinned ones. Call it before Run. A watch restored and not asked
// for ends IdleTimeout after the start. It returns how many services it
// will watch.
func (w *Watcher) ReadSet(in io.Reader) (int, error) {
	var set savedSet
	dec := json.NewDecoder(io.LimitReader(in, MaxSetFileSize))
	if err := dec.Decode(&set); err != nil {
		return 0, fmt.Errorf("consul watch set: %w", err)
	}
	if set.Version != setVersion {
		return 0, fmt.Errorf("consul watch set: version %d, want %d", set.Version, setVersion)
	}
	if w.cfg.watchAll() {
		return 0, nil
	}
	pinned := uniqueFold(w.cfg.Services)
	seen := map[string]bool{}
	var keep []SavedService
	sortSaved(set.Services)
	for _, s := range set.Services {
		key := strings.ToLower(strings.TrimSpace(s.Name))
		if key == "" || !validServiceName(key) || seen[key] || pinned[key] != "" {
			continue
		}
		if len(keep)+len(pinned) >= w.cfg.MaxWatches {
			break
		}
		seen[key] = true
		keep = append(keep, SavedService{Name: key, LastAsked: s.LastAsked})
	}
	now := w.clock.Now()
	w.mu.Lock()
	w.restored = keep
	for _, e := range set.Ended {
		key := strings.ToLower(e.Name)
		// Only what the agent may still hold, as many as the bound counts.
		if validServiceName(key) && now.Sub(e.At) < agentViewTTL && !e.At.After(now) &&
			len(w.recent) < w.cfg.MaxWatches+viewMargin(w.cfg.MaxWatches) {
			w.recent[key] = e.At
		}
	}
	w.mu.Unlock()
	return len(keep), nil
}

// validServiceName refuses what no DNS question could have asked for: a
// name must be one label.
func validServiceName(s string) bool {
	return len(s) <= 63 && !strings.ContainsAny(s, ". /\\\x00")
}

func sortSaved(s []SavedService) {
	sort.SliceStable(s, func(i, j int) bool {
		if !s[i].LastAsked.Equal(s[j].LastAsked) {
			return s[i].LastAsked.After(s[j].LastAsked)
		}
		return s[i].Name < s[j].Name
	})
}
