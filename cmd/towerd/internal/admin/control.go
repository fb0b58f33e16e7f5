package admin

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/miekg/dns"
)

// The control channel (issue 21): the endpoints behind the operators' CLI
// (issue 15) — reload, the query log switch, one name's cache entries,
// flush, the cache listing, dump and load, and the lookup that explains an
// answer — served over a Unix socket to root, towerd's user and the
// operators' group only (access.go). Any local user can reach the loopback
// admin port, and through these endpoints any of them once flushed the
// cache, switched on the query log and loaded a forged snapshot that made
// www.example.com answer 6.6.6.6 for the whole node.

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

// controlPaths are the control channel's own endpoints; the admin port
// answers them with 403 and the way to the socket (routes).
var controlPaths = []string{"/reload", "/log-queries", "/cache", "/cache/flush", "/cache/list", "/cache/dump",
	"/cache/load", "/lookup"}

// controlRoutes returns the control channel's API: the control endpoints
// and what the admin port serves, behind the peer check. A browser cannot
// reach a Unix socket, so the admin port's cross-origin and Host checks
// have nothing to stop here.
func (a *Server) controlRoutes() http.Handler {
	mux := http.NewServeMux()
	a.readRoutes(mux)
	mux.HandleFunc("POST /reload", a.serveReload)
	mux.HandleFunc("GET /log-queries", a.serveLogQueries)
	mux.HandleFunc("POST /log-queries", a.serveLogQueries)
	mux.HandleFunc("GET /cache", a.serveCache)
	mux.HandleFunc("POST /cache/flush", a.serveFlush)
	mux.HandleFunc("GET /cache/list", a.serveCacheList)
	mux.HandleFunc("GET /cache/dump", a.serveCacheDump)
	mux.HandleFunc("POST /cache/load", a.serveCacheLoad)
	mux.HandleFunc("POST /lookup", a.serveLookup)
	return requireAllowed(mux)
}

// Timeouts of the control channel: a load sends up to maxLoadBytes, a dump
// answers with the whole cache, a lookup waits for an upstream (at most
// query_timeout); nothing takes a minute on a Unix socket.
const (
	controlHeaderTimeout = 5 * time.Second
	controlReadTimeout   = time.Minute
	controlWriteTimeout  = time.Minute
	controlIdleTimeout   = 10 * time.Second
)

// StartControl serves the control channel on l, a Unix stream socket
// (the one systemd passed, or one the daemon bound), to the peers policy
// allows, at most maxConns connections at once. Stop ends it with the
// admin server.
func (a *Server) StartControl(l net.Listener, policy AccessPolicy, maxConns int) {
	a.ctl, a.ctlConns = a.bounded(a.controlRoutes(),
		httpBounds{controlHeaderTimeout, controlReadTimeout, controlWriteTimeout, controlIdleTimeout, maxConns})
	a.ctl.ConnContext = a.connVerdict(policy)
	a.ctlDone = serve(a.ctl, a.ctlConns.listener(l))
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
			a.log.Info("query log switched through the control socket", "log_queries", on, "peer_uid", peerUID(r))
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
