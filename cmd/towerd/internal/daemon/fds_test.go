package daemon

import (
	"log/slog"
	"math"
	"testing"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
)

// The TCP cap leaves the reserve free: min(max_connections, limit −
// reserve), never below minTCPConnections (issue 13).
func TestTCPCapKeepsFDReserve(t *testing.T) {
	// max_connections 256, max_inflight 150, max_attempts 3; admin 32,
	// control 16 connections, 64 Consul watches.
	cfg := config.DefaultConfig()
	const reserve = 64 + 150*4 + (32 + 2) + (16 + 2) + (64 + 1) // 781
	if r := fdReserve(cfg); r != reserve {
		t.Fatalf("reserve %d, want %d", r, reserve)
	}
	off := cfg
	off.Admin.Listen, off.Control.Socket, off.Consul.Enabled = "", "", false
	if r := fdReserve(off); r != 64+150*4 {
		t.Errorf("reserve without admin, control and Consul %d, want %d", r, 64+150*4)
	}
	small := cfg
	small.Upstream.MaxInflight = 16 // reserve 781 - 600 + 64 = 245
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name  string
		cfg   config.Config
		limit uint64
		want  int
	}{
		{"plenty", cfg, 524288, 256},
		{"unlimited", cfg, math.MaxUint64, 256},
		{"exactly enough", cfg, reserve + 256, 256},
		{"1024", cfg, 1024, 1024 - reserve},
		{"900", cfg, 900, 900 - reserve},
		{"below the reserve", cfg, 256, minTCPConnections},
		{"300 with a small in-flight cap", small, 300, 300 - 245},
	} {
		if got := capForLimit(tc.cfg, tc.limit, log); got != tc.want {
			t.Errorf("%s: cap %d, want %d", tc.name, got, tc.want)
		}
	}
}
