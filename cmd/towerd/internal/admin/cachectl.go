package admin

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
)

// The cache's endpoints: one name's entries, flush, the listing, dump and
// load.

// cacheEntry is one entry in the GET /cache answer.
type cacheEntry struct {
	Key              string  `json:"key"`
	Name             string  `json:"name"`
	Type             string  `json:"type"`
	Kind             string  `json:"kind"` // positive or nodata
	State            string  `json:"state"`
	TTLSeconds       float64 `json:"ttl_seconds"`
	RemainingSeconds float64 `json:"remaining_seconds"`
	ExpiredSeconds   float64 `json:"expired_seconds"`
	Stored           string  `json:"stored"`
	// Origin is how the entry came in: "upstream", "state file" (read back
	// at start) or "cache load" (an operator's file); Source says it with
	// the zone, for humans.
	Origin string   `json:"origin"`
	Source string   `json:"source"`
	Answer []string `json:"answer"`
}

// originLabels name a cache.Origin in /cache's answers.
var originLabels = map[cache.Origin]string{
	cache.OriginStored:   "upstream",
	cache.OriginRestored: "state file",
	cache.OriginImported: "cache load",
}

// serveCache shows what is cached under ?name=, optionally one ?type= only.
func (a *Server) serveCache(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	if _, ok := dns.IsDomainName(name); !ok || name == "" {
		http.Error(w, "name= must be a domain name, e.g. /cache?name=example.org&type=A", http.StatusBadRequest)
		return
	}
	var qtype uint16
	if t := r.URL.Query().Get("type"); t != "" {
		var ok bool
		if qtype, ok = dns.StringToType[strings.ToUpper(t)]; !ok {
			http.Error(w, fmt.Sprintf("type=%s is not a DNS type", t), http.StatusBadRequest)
			return
		}
	}
	entries := []cacheEntry{}
	for _, info := range a.cache.Inspect(name) {
		if qtype != 0 && info.Key.Type != qtype {
			continue
		}
		entries = append(entries, a.describe(info))
	}
	writeJSON(w, map[string]any{"name": dns.Fqdn(name), "entries": entries})
}

// serveFlush empties the cache, or forgets one name=.
func (a *Server) serveFlush(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	name, zone := r.Form.Get("name"), r.Form.Get("zone")
	var removed int
	switch {
	case name != "" && zone != "":
		http.Error(w, "name= and zone= exclude each other", http.StatusBadRequest)
		return
	case zone != "":
		z, err := zoneParam(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		removed = a.cache.RemoveZone(z)
	case name == "":
		removed = a.cache.Flush()
	default:
		if _, ok := dns.IsDomainName(name); !ok {
			http.Error(w, "name= must be a domain name", http.StatusBadRequest)
			return
		}
		removed = a.cache.RemoveName(name)
	}
	a.log.Info("cache flushed through the control socket", "name", name, "zone", zone, "removed", removed, "peer_uid", peerUID(r))
	writeJSON(w, map[string]any{"name": name, "zone": zone, "removed": removed})
}

// serveCacheList lists the cache, or the names at and below ?zone=; with
// ?stale=1 only the entries past their TTL.
func (a *Server) serveCacheList(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	zone, err := zoneParam(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	staleOnly := r.Form.Get("stale") == "1"
	entries := []cacheEntry{}
	for _, info := range a.cache.InspectZone(zone) {
		if staleOnly && info.Fresh {
			continue
		}
		entries = append(entries, a.describe(info))
	}
	writeJSON(w, map[string]any{"zone": zone, "entries": entries})
}

// entrySource says where an entry of the zone came from, for humans. What
// an upstream stored came from the servers of the zone the name routes to
// (pushed Consul records never enter the cache); what a file put there is
// named for the file, never for an upstream (issue 21).
func entrySource(o cache.Origin, zone string) string {
	switch o {
	case cache.OriginRestored:
		return "state file read at start (zone " + zone + ")"
	case cache.OriginImported:
		return "towerd cache load (zone " + zone + ")"
	}
	return "upstream zone " + zone
}

// describe is one entry as /cache and /cache/list show it.
func (a *Server) describe(info cache.Info) cacheEntry {
	v := a.view.Load()
	state := "fresh"
	if !info.Fresh {
		state = "stale"
		if v.StaleUntil == 0 || info.Expired > v.StaleUntil {
			state = "expired" // kept until looked up, never served
		}
	}
	zone := a.handler.ZoneOf(info.Key.Name)
	origin, source := originLabels[info.Origin], entrySource(info.Origin, zone)
	return cacheEntry{
		Key: info.Key.String(), Name: info.Key.Name, Type: dns.Type(info.Key.Type).String(), Kind: info.Kind.String(),
		State: state, TTLSeconds: info.TTL.Seconds(), RemainingSeconds: info.Remaining.Seconds(),
		ExpiredSeconds: info.Expired.Seconds(), Stored: info.Stored.UTC().Format(time.RFC3339Nano),
		Origin: origin, Source: source, Answer: info.Answer,
	}
}

// serveCacheDump writes the cache in the state directory's format
// (cache.Dump), for `towerd cache dump`.
func (a *Server) serveCacheDump(w http.ResponseWriter, r *http.Request) {
	// Into memory first (a few MiB at the default cache.size), so that a
	// failure is an error status, never a 200 with half a snapshot.
	var buf bytes.Buffer
	n, err := a.cache.Dump(&buf)
	if err != nil {
		http.Error(w, "dumping the cache: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	_, _ = w.Write(buf.Bytes()) // fails only when the client went away
	a.log.Info("cache dumped through the control socket", "entries", n, "peer_uid", peerUID(r))
}

// maxLoadBytes bounds a POST /cache/load body: a full default cache is a
// few MiB; entries beyond cache.size are dropped by Load anyway.
const maxLoadBytes = 256 << 20

// serveCacheLoad adds a snapshot's entries to the cache through the checks
// a state file gets on start (cache.Load: format, checksum, each entry
// answers its key, TTLs re-clamped to the running max_ttl, the stale age)
// and importCheck's (loadcheck.go). Entries are marked imported.
func (a *Server) serveCacheLoad(w http.ResponseWriter, r *http.Request) {
	stats, err := a.cache.LoadWith(http.MaxBytesReader(w, r.Body, maxLoadBytes),
		cache.LoadOptions{Imported: true, Check: a.importCheck})
	if err != nil {
		status := http.StatusBadRequest
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			status = http.StatusRequestEntityTooLarge
		}
		http.Error(w, "snapshot refused, the cache is unchanged: "+err.Error(), status)
		return
	}
	a.log.Info("cache loaded through the control socket", "entries", stats.Loaded, "skipped", stats.Skipped,
		"rejected", stats.Rejected, "why", stats.Rejections, "peer_uid", peerUID(r))
	writeJSON(w, map[string]any{"loaded": stats.Loaded, "skipped": stats.Skipped, "rejected": stats.Rejected,
		"rejections": stats.Rejections, "clamped": stats.Clamped, "written": stats.Written.UTC().Format(time.RFC3339)})
}
