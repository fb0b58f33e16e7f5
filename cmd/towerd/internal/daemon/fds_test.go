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
	cfg := config.DefaultConfig() // max_connections 256, max_inflight 150, max_attempts 3
	if r := fdReserve(cfg); r != 128+150*4 {
		t.Fatalf("reserve %d, want %d", r, 128+150*4)
	}
	small := cfg
	small.Upstream.MaxInflight = 16 // reserve 128+64 = 192
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name  string
		cfg   config.Config
		limit uint64
		want  int
	}{
		{"plenty", cfg, 524288, 256},
		{"unlimited", cfg, math.MaxUint64, 256},
		{"exactly enough", cfg, 728 + 256, 256},
		{"1024", cfg, 1024, 256},
		{"900", cfg, 900, 900 - 728},
		{"below the reserve", cfg, 256, minTCPConnections},
		{"256 with a small in-flight cap", small, 256, 64},
	} {
		if got := capForLimit(tc.cfg, tc.limit, log); got != tc.want {
			t.Errorf("%s: cap %d, want %d", tc.name, got, tc.want)
		}
	}
}
