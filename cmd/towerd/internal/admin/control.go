package admin

import (
	"fmt"
	"net/http"

	"github.com/miekg/dns"
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
