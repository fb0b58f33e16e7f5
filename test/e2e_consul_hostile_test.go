package test

import (
	"encoding/json"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// consulBodyRSSBound is the RSS towerd may reach while the Consul agent's
// address sends endless bodies: its bodies open at once hold at most 16 MiB
// (four of the 4 MiB bound), plus decoding and towerd's own working set
// (measured: 42 MiB for the chunked 200, 17 MiB for the 429; times
// rssRaceFactor under the race detector). Without the bound it went past
// 2 GB within 6–14 s (issue 21).
const consulBodyRSSBound = 64 << 20

// endlessConsul plays the Consul agent's HTTP API as a broken or hostile
// one would (or a local user who bound the agent's port while it was down):
// /v1/agent/self answers as a real agent does, every other query gets a
// body that never ends, as a chunked 200 (a JSON array that goes on) or a
// 429. It counts the bytes it wrote.
type endlessConsul struct {
	addr    string
	written atomic.Int64
}

func startEndlessConsul(t *testing.T, status int) *endlessConsul {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &endlessConsul{addr: ln.Addr().String()}
	entry := `{"Node":{"Node":"n1","Address":"10.0.0.1","Datacenter":"dc1"},` +
		`"Service":{"ID":"web1","Service":"web","Address":"10.6.6.6","Port":80},"Checks":[]},`
	chunk := []byte(strings.Repeat(entry, 256))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/agent/self" {
			_ = json.NewEncoder(w).Encode(map[string]any{"Config": map[string]any{"Datacenter": "dc1"},
				"DebugConfig": map[string]any{"DNSDomain": "consul."}})
			return
		}
		w.Header().Set("X-Consul-Index", "7")
		w.WriteHeader(status)
		if status == http.StatusOK {
			_, _ = w.Write([]byte("["))
		}
		for r.Context().Err() == nil {
			n, err := w.Write(chunk)
			e.written.Add(int64(n))
			if err != nil {
				return
			}
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return e
}

// TestConsulEndlessBodies (issue 21, item 5): the agent's address answers
// every health query with a body that never ends, a chunked 200 or a 429.
// towerd reads each within its bound, backs off, and sends the names to the
// agent's DNS: for eight seconds of it, RSS stays within
// consulBodyRSSBound, another zone answers every time, and the watched and
// asked-for service names resolve through the agent's DNS (its address,
// not the body's); then towerd reloads and stops on SIGTERM.
func TestConsulEndlessBodies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		metric string
	}{
		{"chunked 200", http.StatusOK, "towerd_consul_watch_oversize_bodies_total"},
		{"429", http.StatusTooManyRequests, "towerd_consul_watch_agent_429s_total"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			agent := startEndlessConsul(t, tc.status)
			consulDNS, def := newTestUpstream(t), newTestUpstream(t)
			consulDNS.Add(t, "web.service.consul. 0 IN A 10.7.0.1", "db.service.consul. 0 IN A 10.7.0.2",
				"api.service.consul. 0 IN A 10.7.0.3")
			def.Add(t, "www.example. 300 IN A 192.0.2.1")
			cfg := writeConfig(t, "[consul]\n"+pins("web", "db"))
			d := startTowerd(t, "-config", cfg, "-listen", "127.0.0.1:0", "-upstream", def.Addr,
				"-consul-dns", consulDNS.Addr, "-consul-http", agent.addr)

			want := map[string]string{"www.example.": "192.0.2.1", "web.service.consul.": "10.7.0.1",
				"db.service.consul.": "10.7.0.2", "api.service.consul.": "10.7.0.3"}
			names := []string{"www.example.", "web.service.consul.", "db.service.consul.", "api.service.consul."}
			var maxRSS int64
			asked, wrong := 0, 0
			end := time.Now().Add(8 * time.Second) // the attack's length, not a synchronisation
			for time.Now().Before(end) {
				for _, name := range names {
					m, err := ask(d.UDP, name, dns.TypeA)
					asked++
					if err != nil || m.Rcode != dns.RcodeSuccess || !slices.Equal(sortedAddresses(m), []string{want[name]}) {
						if wrong == 0 {
							t.Errorf("%s under endless bodies: %v %v, want %s", name, m, err, want[name])
						}
						wrong++
					}
				}
				rss, err := processRSS(d.cmd.Process.Pid)
				if err != nil {
					t.Fatal(err)
				}
				maxRSS = max(maxRSS, rss)
				time.Sleep(50 * time.Millisecond) // the questions' pace
			}
			t.Logf("%s: %d questions, %d wrong; RSS at most %.1f MiB; the agent's address wrote %.1f MiB; %s %v",
				tc.name, asked, wrong, float64(maxRSS)/(1<<20), float64(agent.written.Load())/(1<<20), tc.metric,
				towerdMetric(t, d, tc.metric))
			if wrong != 0 {
				t.Errorf("%d of %d answers wrong under endless bodies", wrong, asked)
			}
			bound := int64(consulBodyRSSBound)
			if raceEnabled {
				bound *= rssRaceFactor
			}
			if maxRSS > bound {
				t.Errorf("RSS reached %.1f MiB under endless bodies, bound %d MiB", float64(maxRSS)/(1<<20), bound>>20)
			}
			if v := towerdMetric(t, d, tc.metric); v < 1 {
				t.Errorf("%s = %v, want the bodies counted", tc.metric, v)
			}
			if v := towerdMetric(t, d, "towerd_consul_watch_services"); v != 0 {
				t.Errorf("%v services answered from the endless bodies, want 0", v)
			}
			d.signal(t, syscall.SIGHUP)
			if _, err := d.stderr.waitFor(regexp.MustCompile(`msg=reloaded`), reloadTimeout, d.exited); err != nil {
				t.Errorf("no reload under endless bodies: %v", err)
			}
			d.stopAndCheck(t)
		})
	}
}
