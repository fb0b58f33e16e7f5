package admin

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/resolver"
)

// The endpoints behind the operators' CLI (issue 15): reload, the query
// log switch, the cache listing, dump and load, and the lookup that
// explains an answer. Every one that changes state is a POST, so the
// cross-origin protection and the loopback Host check of routes() cover it.

// ReloadResult is what a reload did: the configuration keys whose new
// values are in force, and those that changed in the file but wait for a
// restart. The daemon returns it (Options of SetReloader).
type ReloadResult struct {
	Applied       []string `json:"applied"`
	RestartNeeded []string `json:"restart_needed"`
}

// SetReloader gives the server the daemon's reload (the same as SIGHUP);
// without one, POST /reload answers 503. Call it before Start.
func (a *Server) SetReloader(reload func() (ReloadResult, error)) { a.reload = reload }

// controlRoutes adds the CLI's endpoints to mux.
func (a *Server) controlRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /reload", a.serveReload)
	mux.HandleFunc("GET /log-queries", a.serveLogQueries)
	mux.HandleFunc("POST /log-queries", a.serveLogQueries)
	mux.HandleFunc("GET /cache/list", a.serveCacheList)
	mux.HandleFunc("GET /cache/dump", a.serveCacheDump)
	mux.HandleFunc("POST /cache/load", a.serveCacheLoad)
	mux.HandleFunc("POST /lookup", a.serveLookup)
}

func (a *Server) serveReload(w http.ResponseWriter, _ *http.Request) {
	if a.reload == nil {
		http.Error(w, "this towerd cannot reload", http.StatusServiceUnavailable)
		return
	}
	res, err := a.reload()
	if err != nil {
		// The running configuration stays; 409: the file conflicts with it.
		http.Error(w, "reload rejected; the running configuration stays: "+err.Error(), http.StatusConflict)
		return
	}
	if res.Applied == nil {
		res.Applied = []string{}
	}
	if res.RestartNeeded == nil {
		res.RestartNeeded = []string{}
	}
	writeJSON(w, res)
}

// serveLogQueries reports the query log's state (GET) or sets it (POST
// state=on|off).
func (a *Server) serveLogQueries(w http.ResponseWriter, r *http.Request) {
	on := a.handler.LogQueries()
	was := on
	if r.Method == http.MethodPost {
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		switch r.Form.Get("state") {
		case "on":
			on = true
		case "off":
			on = false
		default:
			http.Error(w, "state= must be on or off", http.StatusBadRequest)
			return
		}
		was = a.handler.SetLogQueries(on)
		if was != on {
			a.log.Info("query log switched through the admin API", "log_queries", on)
		}
	}
	writeJSON(w, map[string]bool{"log_queries": on, "was": was})
}

// zoneParam reads ?zone= as a canonical domain name, "." when absent.
func zoneParam(r *http.Request) (string, error) {
	zone := r.Form.Get("zone")
	if zone == "" {
		return ".", nil
	}
	if _, ok := dns.IsDomainName(zone); !ok {
		return "", fmt.Errorf("zone=%s is not a domain name", zone)
	}
	return dns.CanonicalName(zone), nil
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
	return cacheEntry{
		Key: info.Key.String(), Name: info.Key.Name, Type: dns.Type(info.Key.Type).String(), Kind: info.Kind.String(),
		State: state, TTLSeconds: info.TTL.Seconds(), RemainingSeconds: info.Remaining.Seconds(),
		ExpiredSeconds: info.Expired.Seconds(), Stored: info.Stored.UTC().Format(time.RFC3339Nano),
		// Everything cached came from the upstreams of the zone the name
		// routes to (pushed Consul records never enter the cache).
		Source: "upstream zone " + a.handler.ZoneOf(info.Key.Name), Answer: info.Answer,
	}
}

// serveCacheDump writes the cache in the state directory's format
// (cache.Dump), for `towerd cache dump`.
func (a *Server) serveCacheDump(w http.ResponseWriter, _ *http.Request) {
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
	a.log.Info("cache dumped through the admin API", "entries", n)
}

// maxLoadBytes bounds a POST /cache/load body: a full default cache is a
// few MiB; entries beyond cache.size are dropped by Load anyway.
const maxLoadBytes = 256 << 20

// serveCacheLoad adds a snapshot's entries to the cache through the checks
// a state file gets on start (cache.Load: format, checksum, each entry
// answers its key, TTLs re-clamped to the running max_ttl, the stale age).
func (a *Server) serveCacheLoad(w http.ResponseWriter, r *http.Request) {
	stats, err := a.cache.Load(http.MaxBytesReader(w, r.Body, maxLoadBytes))
	if err != nil {
		status := http.StatusBadRequest
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			status = http.StatusRequestEntityTooLarge
		}
		http.Error(w, "snapshot refused, the cache is unchanged: "+err.Error(), status)
		return
	}
	a.log.Info("cache loaded through the admin API", "entries", stats.Loaded, "skipped", stats.Skipped, "rejected", stats.Rejected)
	writeJSON(w, map[string]any{"loaded": stats.Loaded, "skipped": stats.Skipped, "rejected": stats.Rejected,
		"rejections": stats.Rejections, "clamped": stats.Clamped, "written": stats.Written.UTC().Format(time.RFC3339)})
}

// LookupReport is POST /lookup's answer: how this towerd answers a
// question and why, for `towerd lookup`.
type LookupReport struct {
	Name    string         `json:"name"`
	Type    string         `json:"type"`
	Zone    string         `json:"zone"`
	Servers []LookupServer `json:"servers"`
	// Watch is "covered" when the Consul watch may answer the name,
	// "not covered", or "off".
	Watch string `json:"watch"`
	// Cached are the name's cache entries of this type before the query.
	Cached []cacheEntry `json:"cached"`
	// The query's outcome: where the answer came from (resolver.Source*),
	// the upstream server that replied, the rcode and the time taken.
	Source          string   `json:"source"`
	Upstream        string   `json:"upstream,omitempty"`
	Rcode           string   `json:"rcode"`
	DurationSeconds float64  `json:"duration_seconds"`
	Answer          []string `json:"answer"`
	Authority       []string `json:"authority"`
}

// LookupServer is one server of the zone with its health.
type LookupServer struct {
	Address     string  `json:"address"`
	Up          bool    `json:"up"`
	SRTTSeconds float64 `json:"srtt_seconds"`
}

// serveLookup asks towerd name= type= (default A) as a loopback client
// would, and says what it knew before and where the answer came from. The
// query is real (counted, cached, logged), hence POST.
func (a *Server) serveLookup(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	name := r.Form.Get("name")
	if _, ok := dns.IsDomainName(name); !ok || name == "" {
		http.Error(w, "name= must be a domain name", http.StatusBadRequest)
		return
	}
	name = dns.Fqdn(name)
	qtype := dns.TypeA
	if t := r.Form.Get("type"); t != "" {
		var ok bool
		if qtype, ok = dns.StringToType[strings.ToUpper(t)]; !ok {
			http.Error(w, fmt.Sprintf("type=%s is not a DNS type", t), http.StatusBadRequest)
			return
		}
	}
	rep := LookupReport{Name: name, Type: dns.Type(qtype).String(), Zone: a.handler.ZoneOf(name),
		Servers: []LookupServer{}, Cached: []cacheEntry{}, Answer: []string{}, Authority: []string{}}
	for _, g := range a.view.Load().Groups {
		if g.Address() != rep.Zone {
			continue
		}
		for _, s := range g.Servers() {
			rep.Servers = append(rep.Servers, LookupServer{Address: s.Address, Up: s.Up, SRTTSeconds: s.SRTT.Seconds()})
		}
	}
	switch covered, on := a.handler.RecordsCover(name); {
	case !on:
		rep.Watch = "off"
	case covered:
		rep.Watch = "covered"
	default:
		rep.Watch = "not covered"
	}
	for _, info := range a.cache.Inspect(name) {
		if info.Key.Type == qtype && !info.Key.DO && !info.Key.CD {
			rep.Cached = append(rep.Cached, a.describe(info))
		}
	}
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	reply, q := a.handler.Trace(m, netip.AddrFrom4([4]byte{127, 0, 0, 1}))
	rep.Source, rep.Upstream, rep.Rcode, rep.DurationSeconds = q.Source, q.Server, resolver.RcodeLabel(q.Rcode), q.Duration.Seconds()
	if reply != nil {
		for _, rr := range reply.Answer {
			rep.Answer = append(rep.Answer, rr.String())
		}
		for _, rr := range reply.Ns {
			rep.Authority = append(rep.Authority, rr.String())
		}
	}
	writeJSON(w, rep)
}
