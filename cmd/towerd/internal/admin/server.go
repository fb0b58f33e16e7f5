// Package admin is towerd's operators' side: the Prometheus registry and
// the metrics towerd adds to it (Telemetry); the admin HTTP server on
// loopback, for what any local user may read (/metrics, /stats, /healthz,
// /readyz); the control channel on a Unix socket, for what only root and the
// operators' group may do (reload, flush, the cache's listing, dump and
// load, lookup, the query log switch: issue 21); the /stats report read back
// from the registry; and the client behind the control subcommands. The
// daemon owns one Telemetry and one Server and tells them what changed;
// nothing here reaches into the daemon (issue 16).
package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/resolver"
	"github.com/towerd/towerd/upstream"
)

// View is what the admin server shows of the running configuration; the
// daemon swaps it whole at start and on every reload (SetView).
type View struct {
	// Config is the configuration running, with [admin] as it was at start.
	Config config.Config
	// File is the config file it came from; "" for built-in defaults.
	File string
	// Groups are the upstream groups serving the zones.
	Groups []*upstream.Group
	// LoadedAt is when Config was loaded.
	LoadedAt time.Time
	// StaleUntil is serve_stale.max_age, 0 when serve-stale is off: how
	// long past expiry /cache calls an entry stale rather than expired.
	StaleUntil time.Duration
}

// Server is the admin HTTP server and the control channel's (two
// http.Servers, one set of state). The handlers only read the registry, the
// cache and a View behind an atomic pointer, so a reload never waits for a
// slow HTTP client.
type Server struct {
	log     *slog.Logger
	tel     *Telemetry
	cache   *cache.Cache
	handler *resolver.Handler
	version string
	now     func() time.Time
	reload  func() (ReloadResult, error) // SetReloader; nil refuses POST /reload

	ready atomic.Bool
	view  atomic.Pointer[View]
	// loopbackOnly: served on loopback, so every legitimate client names a
	// loopback address or localhost in Host.
	loopbackOnly bool

	srv  *http.Server
	addr string // where it actually listens (port 0 resolved)
	done chan error

	ctl     *http.Server // the control channel (control.go); nil when off
	ctlDone chan error
	// refusals rate-limits the log lines of refused control connections
	// (refused.go).
	refusals refusalLog
	// limits: the connection caps of the two servers (limit.go).
	adminConns, ctlConns *connLimiter
}

// routes returns the admin HTTP API: only what any local user may read.
// Cross-origin protection turns away browser requests from other sites; on
// loopback, the Host check also stops a page that rebinds its own name to
// 127.0.0.1 (DNS rebinding) from reading /stats as if it were same-origin.
// The control endpoints answer 403 here, naming the control socket.
func (a *Server) routes() http.Handler {
	mux := http.NewServeMux()
	a.readRoutes(mux)
	for _, path := range controlPaths {
		mux.HandleFunc(path, serveControlOnly)
	}
	h := http.NewCrossOriginProtection().Handler(mux)
	if a.loopbackOnly {
		h = loopbackHosts(h)
	}
	return h
}

// readRoutes adds the endpoints anyone may read to mux; the control
// channel serves them too, so `towerd stats -control` works without the
// admin port.
func (a *Server) readRoutes(mux *http.ServeMux) {
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.tel.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /stats", a.serveStats)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", a.serveReady)
}

// serveControlOnly answers a control endpoint asked on the admin port.
func serveControlOnly(w http.ResponseWriter, r *http.Request) {
	http.Error(w, r.URL.Path+" is served on towerd's control socket only ([control] socket, "+
		config.DefaultControlSocket+" by default): use the towerd subcommand, as root or a member of group "+
		config.DefaultControlGroup, http.StatusForbidden)
}

// loopbackHosts serves only requests whose Host is a loopback address or
// localhost.
func loopbackHosts(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.Trim(host, "[]")
		if ip, err := netip.ParseAddr(host); (err == nil && ip.IsLoopback()) || strings.EqualFold(host, "localhost") {
			next.ServeHTTP(w, r)
			return
		}
		http.Error(w, "Host must be a loopback address or localhost", http.StatusForbidden)
	})
}

// NewServer returns an admin server over tel's registry, the cache c and
// the handler h (which names the zone a cached name routes to). It serves
// once Start is called; /stats needs a SetView first.
func NewServer(log *slog.Logger, tel *Telemetry, c *cache.Cache, h *resolver.Handler, version string) *Server {
	return &Server{log: log, tel: tel, cache: c, handler: h, version: version, now: time.Now}
}

// SetView replaces what /stats and /cache show of the configuration.
func (a *Server) SetView(v *View) { a.view.Store(v) }

// SetReady turns /readyz to 200 (every listener serves) or 503.
func (a *Server) SetReady(ready bool) { a.ready.Store(ready) }

// Addr is where the server listens, with port 0 resolved; "" before Start.
func (a *Server) Addr() string { return a.addr }

// Timeouts of the admin server: its requests have no body and its answers
// are a scrape at most, so a client slower than these is not one.
const (
	adminHeaderTimeout = 5 * time.Second
	adminReadTimeout   = 10 * time.Second
	adminWriteTimeout  = 30 * time.Second
	// adminIdleTimeout keeps a scraper's keep-alive connection between
	// scrapes of a 15 s interval; past the cap, idle ones make room anyway.
	adminIdleTimeout = 30 * time.Second
	// maxHeaderBytes bounds a request's header on both servers (Go's
	// default is 1 MiB); towerd's own clients send a few hundred bytes.
	maxHeaderBytes = 16 << 10
)

// Start listens on addr and serves in the background, at most maxConns
// connections at once (limit.go).
func (a *Server) Start(addr string, maxConns int) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("admin server on %s: %w", addr, err)
	}
	a.addr = l.Addr().String()
	if ap, err := netip.ParseAddrPort(a.addr); err == nil {
		a.loopbackOnly = ap.Addr().Unmap().IsLoopback()
	}
	a.srv, a.adminConns = a.bounded(a.routes(),
		httpBounds{adminHeaderTimeout, adminReadTimeout, adminWriteTimeout, adminIdleTimeout, maxConns})
	a.done = serve(a.srv, a.adminConns.listener(l))
	return nil
}

// httpBounds are one HTTP server's limits: its timeouts and its cap on
// connections held at once.
type httpBounds struct {
	header, read, write, idle time.Duration
	conns                     int
}

// bounded returns an http.Server for h with b's timeouts, headers of at
// most maxHeaderBytes, and its connections capped by the limiter it returns.
func (a *Server) bounded(h http.Handler, b httpBounds) (*http.Server, *connLimiter) {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: b.header,
		ReadTimeout:       b.read,
		WriteTimeout:      b.write,
		IdleTimeout:       b.idle,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelDebug),
	}
	lim := newConnLimiter(b.conns)
	lim.track(srv)
	return srv, lim
}

// serve runs srv on l in the background; the channel gets Serve's result.
func serve(srv *http.Server, l net.Listener) chan error {
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	return done
}

// Stop closes the listeners and waits up to ctx for requests being served.
func (a *Server) Stop(ctx context.Context) {
	for _, s := range []struct {
		srv  *http.Server
		done chan error
	}{{a.srv, a.done}, {a.ctl, a.ctlDone}} {
		if s.srv == nil {
			continue
		}
		if err := s.srv.Shutdown(ctx); err != nil {
			s.srv.Close()
		}
		<-s.done
	}
}

func (a *Server) serveReady(w http.ResponseWriter, _ *http.Request) {
	if !a.ready.Load() {
		http.Error(w, "not ready: listeners not serving yet, or shutting down", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
	// DNS is served, so ready; the Consul watch warms up behind it (until
	// its first sync, Consul names go to Consul's DNS), and says so here.
	if ws := a.tel.watchState(); ws != nil {
		fmt.Fprintf(w, "consul watch: %s\n", ws.State)
	}
}

func (a *Server) serveStats(w http.ResponseWriter, _ *http.Request) {
	r, err := a.report()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeJSON(w, r)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // fails only when the client went away
}
