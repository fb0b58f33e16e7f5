// Package admin is towerd's operators' side: the Prometheus registry and
// the metrics towerd adds to it (Telemetry), the admin HTTP server (/metrics,
// /stats, /healthz, /readyz, /cache, /cache/flush), the /stats report read
// back from the registry, and the client behind `towerd stats`. The daemon
// owns one Telemetry and one Server and tells them what changed; nothing
// here reaches into the daemon (issue 16).
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

// Server is the admin HTTP server. Its handlers only read: the registry,
// the cache and a View behind an atomic pointer, so a reload never waits
// for a slow HTTP client.
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
}

// routes returns the admin HTTP API. Cross-origin protection turns away
// browser requests from other sites, so a web page cannot flush the cache
// through a loopback port; on loopback, the Host check also stops a page
// that rebinds its own name to 127.0.0.1 (DNS rebinding) from reading
// /stats and /cache as if it were same-origin.
func (a *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.tel.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /stats", a.serveStats)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", a.serveReady)
	mux.HandleFunc("GET /cache", a.serveCache)
	mux.HandleFunc("POST /cache/flush", a.serveFlush)
	a.controlRoutes(mux) // control.go
	h := http.NewCrossOriginProtection().Handler(mux)
	if a.loopbackOnly {
		h = loopbackHosts(h)
	}
	return h
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

// Start listens on addr and serves in the background.
func (a *Server) Start(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("admin server on %s: %w", addr, err)
	}
	a.addr = l.Addr().String()
	if ap, err := netip.ParseAddrPort(a.addr); err == nil {
		a.loopbackOnly = ap.Addr().Unmap().IsLoopback()
	}
	a.srv = &http.Server{
		Handler:           a.routes(),
		ReadHeaderTimeout: 5 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelDebug),
	}
	a.done = make(chan error, 1)
	go func() { a.done <- a.srv.Serve(l) }()
	return nil
}

// Stop closes the listener and waits up to ctx for requests being served.
func (a *Server) Stop(ctx context.Context) {
	if a.srv == nil {
		return
	}
	if err := a.srv.Shutdown(ctx); err != nil {
		a.srv.Close()
	}
	<-a.done
}

func (a *Server) serveReady(w http.ResponseWriter, _ *http.Request) {
	if !a.ready.Load() {
		http.Error(w, "not ready: listeners not serving yet, or shutting down", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
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
