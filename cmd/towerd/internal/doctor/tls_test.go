package doctor

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/test/dnstest"
)

// TestTLSUpstreams: doctor connects to each DNS over TLS server as towerd
// would; a server whose name verifies and that answers is no finding, one
// whose certificate lacks the configured name is, with the reason.
func TestTLSUpstreams(t *testing.T) {
	t.Parallel()
	ca := dnstest.NewCA(t)
	cert, _, _ := ca.Leaf(t, "dns.test")
	srv := dnstest.NewDoTServer(t, cert, dnstest.DoTAnswer)
	caFile := ca.WriteFile(t, t.TempDir())
	cfg := config.DefaultConfig()
	cfg.Zones = []config.ZoneConfig{
		{Name: "good.", Servers: []string{"tls://" + srv.Addr + "#dns.test"}, TLSCAFile: caFile},
		{Name: "bad.", Servers: []string{"tls://" + srv.Addr + "#wrong.test"}, TLSCAFile: caFile},
		{Name: "plain.", Servers: []string{"127.0.0.1:53"}},
	}
	if !hasTLSServers(cfg) {
		t.Fatal("hasTLSServers = false")
	}
	n := &Node{TLSUpstreams: readTLSUpstreams(context.Background(), cfg, 5*time.Second)}
	if len(n.TLSUpstreams) != 2 {
		t.Fatalf("checked %d servers, want the 2 TLS ones", len(n.TLSUpstreams))
	}
	r := Report{Findings: checkTLSUpstreams(n)}
	expectFindings(t, r, "towerd-tls-upstream-fails:problem")
	if f := finding(t, r, "towerd-tls-upstream-fails"); !strings.Contains(f.Saw, "zone bad.") || !strings.Contains(f.Saw, "(name)") {
		t.Errorf("saw %q", f.Saw)
	}
	if srv.Queries() != 1 {
		t.Errorf("server read %d queries, want the good zone's 1", srv.Queries())
	}
}
