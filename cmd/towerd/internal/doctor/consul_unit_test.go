package doctor

import (
	"testing"
	"time"
)

// The outputs Consul 1.14's checks write, and the target doctor reads in
// each.
func TestTargetFromOutput(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ output, want string }{
		{`HTTP GET http://api.example.internal:8080/health: 200 OK Output: ok`, "http://api.example.internal:8080/health"},
		{`Get "http://api.example.internal:8080/health": dial tcp: lookup api.example.internal on 10.0.0.2:53: no such host`, "http://api.example.internal:8080/health"},
		{`TCP connect db.internal:5432: Success`, "db.internal:5432"},
		{`dial tcp 127.0.0.1:1: connect: connection refused`, "127.0.0.1:1"},
		{`gRPC check db.internal:9000/health: success`, "db.internal:9000/health"},
		{`rpc error: code = Unavailable desc = connection error: desc = "transport: Error while dialing: dial tcp: lookup db.internal on 127.0.0.203:53: read: connection refused"`, "db.internal"},
		{`Failed to dial to h2.example.internal:443: dial tcp: lookup h2.example.internal on 10.0.0.2:53: no such host`, "h2.example.internal:443"},
		{`Agent alive and reachable`, ""},
		{``, ""},
	} {
		if got := targetFromOutput(c.output); got != c.want {
			t.Errorf("targetFromOutput(%q) = %q, want %q", c.output, got, c.want)
		}
	}
}

func TestTargetHost(t *testing.T) {
	t.Parallel()
	for target, want := range map[string]string{
		"http://api.example.internal:8080/health": "api.example.internal",
		"https://[2001:db8::1]/ready":             "2001:db8::1",
		"db.internal:9000/health":                 "db.internal",
		"10.1.2.3:5432":                           "10.1.2.3",
		"[::1]:22":                                "::1",
		"db.internal":                             "db.internal",
	} {
		if got := targetHost(target); got != want {
			t.Errorf("targetHost(%q) = %q, want %q", target, got, want)
		}
	}
	for host, want := range map[string]bool{"db.internal": true, "localhost": false, "web.localhost.": false, "10.0.0.1": false, "::1": false, "": false} {
		if isName(host) != want {
			t.Errorf("isName(%q) = %v", host, !want)
		}
	}
}

// A check whose target doctor cannot see (no definition, no data_dir, no
// output yet) is named, not judged; names in /etc/hosts are not lookups.
func TestChecksNotJudged(t *testing.T) {
	t.Parallel()
	n := &Node{Consul: &consulView{DataDir: "/opt/consul", Checks: []consulCheck{
		{ID: "service:web", Name: "web", Type: "http"},
		{ID: "node-ttl", Type: "ttl"},
		{ID: "hosts", Type: "tcp", Target: "db.lan:5432", TargetFrom: "data_dir", Timeout: time.Second},
	}}}
	n.Hosts = nodeFile{Path: "/etc/hosts", Data: []byte("10.0.0.5 db.lan db # the database\n")}
	r := Report{Findings: checkChecks(n)}
	expectFindings(t, r, "consul-check-target-unknown:info")
	expectItems(t, finding(t, r, "consul-check-target-unknown"), "service:web (web)")
	// The same host name not in /etc/hosts is a lookup.
	n.Hosts = nodeFile{}
	expectFindings(t, Report{Findings: checkChecks(n)}, "consul-check-target-unknown:info",
		"consul-check-hostname:warning", "consul-check-timeout-under-resolver:problem")
}

func TestResolvedServer(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"127.0.0.1": "127.0.0.1:53", "127.0.0.1:5353": "127.0.0.1:5353", "10.0.0.2#dns.example": "10.0.0.2:53",
		"[::1]:53": "[::1]:53", "fe80::1%eth0": "[fe80::1]:53", "dns.example": "",
	} {
		if got, _ := resolvedServer(in); got != want {
			t.Errorf("resolvedServer(%q) = %q, want %q", in, got, want)
		}
	}
}
