package daemon

import (
	"log/slog"
	"syscall"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
)

// File descriptors kept out of the TCP listeners' reach (issue 13): a TCP
// flood must never take the descriptor an upstream exchange needs (the
// miss would turn into SERVFAIL) or the admin server's. The budget of the
// soft RLIMIT_NOFILE, each share capped by the code that spends it:
//
//   - fdReserveBase: the listeners, the state and followed files, the
//     logs, the runtime's own (epoll, pipes) and the systemd sockets;
//   - the admin server's and the control channel's connections, each
//     capped at its max_connections (admin/limit.go; issue 21: 1,100 idle
//     admin connections once took every descriptor), plus their listener
//     and the one connection accepted past the cap only to be closed;
//   - the Consul watch: one agent connection per watched service while it
//     blocks (consul.max_watches), and one for the catalog;
//   - for every upstream resolution the in-flight cap allows, one socket
//     per attempt (attempts keep their sockets open, DESIGN.md) and one
//     for a TCP retry;
//
// and TCP clients get what is left, up to tcp.max_connections.
const (
	fdReserveBase = 64
	// minTCPConnections is the least the cap goes down to, so a descriptor
	// limit too low for the reserve still leaves TCP usable; the log says so.
	minTCPConnections = 8
)

// fdReserve is how many descriptors towerd may need outside DNS TCP
// connections.
func fdReserve(cfg config.Config) int {
	n := fdReserveBase + cfg.Upstream.MaxInflight*(cfg.Upstream.MaxAttempts+1)
	if cfg.Admin.Listen != "" {
		n += cfg.Admin.MaxConnections + 2
	}
	if cfg.Control.Socket != "" {
		n += cfg.Control.MaxConnections + 2
	}
	if cfg.Consul.Enabled {
		n += cfg.Consul.MaxWatches + 1
	}
	return n
}

// tcpConnectionCap raises the soft RLIMIT_NOFILE to the hard limit and
// returns tcp.max_connections, lowered so that the reserve stays free:
// min(max_connections, soft limit − reserve), and at least
// minTCPConnections.
func tcpConnectionCap(cfg config.Config, log *slog.Logger) int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		log.Warn("cannot read the file descriptor limit; tcp.max_connections is used as it is", "err", err)
		return cfg.TCP.MaxConnections
	}
	if rl.Cur < rl.Max {
		raised := syscall.Rlimit{Cur: rl.Max, Max: rl.Max}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err == nil {
			rl = raised
		}
	}
	return capForLimit(cfg, rl.Cur, log)
}

// capForLimit is tcpConnectionCap's arithmetic for a soft limit.
func capForLimit(cfg config.Config, limit uint64, log *slog.Logger) int {
	want := cfg.TCP.MaxConnections
	reserve := fdReserve(cfg)
	if limit >= uint64(reserve+want) { // RLIM_INFINITY too
		return want
	}
	got := minTCPConnections
	if limit > uint64(reserve) {
		got = max(got, int(limit)-reserve)
	}
	log.Warn("TCP connections capped below tcp.max_connections to keep file descriptors for upstreams, the Consul watch, the admin server and the control socket",
		"tcp_max_connections", got, "configured", want, "fd_limit", limit, "fd_reserve", reserve,
		"hint", "raise LimitNOFILE= or lower upstream.max_inflight (or admin.max_connections, control.max_connections, consul.max_watches)")
	return got
}
