package doctor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/towerd/towerd/test/consultest"
	"github.com/towerd/towerd/test/dnstest"
)

// A real Consul agent with services registered with and without addresses
// and HTTP, TCP, gRPC and H2PING checks by IP and by host name, some with
// timeouts shorter than the node's resolver retry. The agent runs in a
// mount namespace of its own whose resolv.conf names a loopback address
// where nothing listens, so that its checks' lookups fail at once and
// never reach this machine's resolver; every check by IP targets a closed
// loopback port.

// deadResolvConf is a resolv.conf naming a loopback address nobody serves.
func deadResolvConf(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the agent runs in a private mount namespace (unshare -m)")
	}
	return consultest.DeadResolvConf(t)
}

// seeDataDir makes the agent's data_dir, a host path, the same path under
// root: the directory that is root on the host links to "/" inside the
// root, so data_dir resolves (inside the root) to root/var/lib/consul.
func seeDataDir(t *testing.T, root string) string {
	t.Helper()
	dataDir := filepath.Join(root, "var", "lib", "consul")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	inside := filepath.Join(root, root)
	if err := os.MkdirAll(filepath.Dir(inside), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", inside); err != nil {
		t.Fatal(err)
	}
	return dataDir
}

const cfgCheckHCL = `check {
  id = "cfg-tcp"
  name = "config tcp"
  tcp = "cfgnode.internal:22"
  interval = "1s"
  timeout = "1s"
}`

func registerFixtures(t *testing.T, c *api.Client) {
	t.Helper()
	regs := []*api.AgentServiceRegistration{
		{ID: "web", Name: "web", Port: 80, Check: &api.AgentServiceCheck{
			HTTP: "http://api.example.internal:8080/health", Interval: "1s", Timeout: "3s"}},
		{ID: "db", Name: "db", Address: "10.1.2.3", Port: 5432, Checks: api.AgentServiceChecks{
			{TCP: "127.0.0.1:1", Interval: "1s"},
			{GRPC: "db.internal:9000/health", Interval: "1s", Timeout: "1s"}}},
		{ID: "app", Name: "app", Address: "app.example.internal", Port: 8443, Check: &api.AgentServiceCheck{
			TCP: "127.0.0.1:1", Interval: "1s", Timeout: "500ms"}},
		{ID: "local", Name: "local", Address: "127.0.0.1", Port: 8500, Check: &api.AgentServiceCheck{
			HTTP: "http://localhost:1/ready", Interval: "1s", Timeout: "1s"}},
	}
	for _, r := range regs {
		if err := c.Agent().ServiceRegister(r); err != nil {
			t.Fatal(err)
		}
	}
	for _, ck := range []*api.AgentCheckRegistration{
		{ID: "node-h2", Name: "node h2ping", AgentServiceCheck: api.AgentServiceCheck{H2PING: "h2.example.internal:443", Interval: "1s"}},
		{ID: "node-ttl", Name: "node ttl", AgentServiceCheck: api.AgentServiceCheck{TTL: "30s"}},
	} {
		if err := c.Agent().CheckRegister(ck); err != nil {
			t.Fatal(err)
		}
	}
}

// waitForOutputs waits until every check with an interval has run once
// (the agent staggers the first run by up to the interval, 1 s here).
func waitForOutputs(t *testing.T, c *api.Client) {
	t.Helper()
	// The agent's state, with no event to wait on.
	dnstest.Eventually(t, func() bool {
		checks, err := c.Agent().Checks()
		if err != nil {
			t.Fatal(err)
		}
		for id, ck := range checks {
			if ck.Output == "" && id != "node-ttl" {
				return false
			}
		}
		return true
	}, 30*time.Second, "every check with an interval to have run once")
}

func items(f Finding) []string {
	var out []string
	for _, it := range f.Items {
		out = append(out, it.Subject)
	}
	return out
}

func expectItems(t *testing.T, f Finding, want ...string) {
	t.Helper()
	got := items(f)
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("%s: items %q, want %q", f.ID, got, want)
	}
}

func TestConsulAgentServicesAndChecks(t *testing.T) {
	t.Parallel()
	resolv := deadResolvConf(t)
	root := cleanNode(t).write(t)
	agent := consultest.Start(t, consultest.Options{
		DataDir: seeDataDir(t, root), ResolvConf: resolv,
		HCL: []string{`recursors = ["10.0.0.2", "10.0.0.3"]`, cfgCheckHCL},
	})
	registerFixtures(t, agent.Client(""))

	// Through towerd, a lost packet costs a lookup at most 1.8 s: only
	// the 1 s checks are too short.
	r := diagnose(t, root, Options{ConsulAddr: agent.HTTPAddr})
	expectFindings(t, r, "consul-service-no-address:info", "consul-service-address-hostname:warning",
		"consul-check-hostname:warning", "consul-check-timeout-under-resolver:problem",
		"consul-recursors:info", "consul-dns-config:info")
	expectItems(t, finding(t, r, "consul-service-no-address"), "web (web)")
	expectItems(t, finding(t, r, "consul-service-address-hostname"), "app (app)")
	byName := finding(t, r, "consul-check-hostname")
	expectItems(t, byName, "cfg-tcp (config tcp)", "node-h2 (node h2ping)", "service:db:2 (Service 'db' check)", "service:web (Service 'web' check)")
	for _, it := range byName.Items {
		want := map[string]string{"cfg-tcp": "seen in its config", "node-h2": "timeout 10s (Consul's default)",
			"service:db:2": "grpc db.internal:9000/health, timeout 1s; seen in its data_dir",
			"service:web":  "http http://api.example.internal:8080/health, timeout 3s; seen in its data_dir"}[strings.Fields(it.Subject)[0]]
		if !strings.Contains(it.Detail, want) {
			t.Errorf("%s: %q does not say %q", it.Subject, it.Detail, want)
		}
	}
	short := finding(t, r, "consul-check-timeout-under-resolver")
	expectItems(t, short, "cfg-tcp (config tcp)", "service:db:2 (Service 'db' check)")
	if !strings.Contains(short.Saw, "1.8s") {
		t.Errorf("saw %q does not name towerd's 1.8 s", short.Saw)
	}
	expectItems(t, finding(t, r, "consul-recursors"), "10.0.0.2", "10.0.0.3")
	if f := finding(t, r, "consul-dns-config"); !strings.Contains(f.Saw, "allow_stale = true") || !strings.Contains(f.Saw, "soa.min_ttl = 0") {
		t.Errorf("consul-dns-config saw %q", f.Saw)
	}

	// Straight to the shared resolver, glibc resends after 5 s: the 3 s
	// HTTP check is too short as well (the reproduced day's cause).
	if err := os.WriteFile(filepath.Join(root, "etc", "resolv.conf"), []byte("nameserver 10.0.0.2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = diagnose(t, root, Options{ConsulAddr: agent.HTTPAddr})
	expectFindings(t, r, "resolv-conf-bypasses-towerd:problem", "resolver-timeout-long:warning",
		"consul-service-no-address:info", "consul-service-address-hostname:warning",
		"consul-check-hostname:warning", "consul-check-timeout-under-resolver:problem",
		"consul-recursors:info", "consul-dns-config:info")
	expectItems(t, finding(t, r, "consul-check-timeout-under-resolver"),
		"cfg-tcp (config tcp)", "service:db:2 (Service 'db' check)", "service:web (Service 'web' check)")

	// Without the data_dir (doctor not root, or not on the node), the
	// targets come from the checks' last outputs.
	waitForOutputs(t, agent.Client(""))
	r = diagnose(t, cleanNode(t).write(t), Options{ConsulAddr: agent.HTTPAddr})
	byName = finding(t, r, "consul-check-hostname")
	expectItems(t, byName, "cfg-tcp (config tcp)", "node-h2 (node h2ping)", "service:db:2 (Service 'db' check)", "service:web (Service 'web' check)")
	for _, it := range byName.Items {
		if name := strings.Fields(it.Subject)[0]; name != "cfg-tcp" && !strings.Contains(it.Detail, "seen in its output") {
			t.Errorf("%s: %q, want the target from its output", it.Subject, it.Detail)
		}
	}
}

// With ACLs on, doctor reads with towerd's own token: the token file that
// towerd.service loads as a credential, found through its drop-in.
func TestConsulAgentTokenAndDNSConfig(t *testing.T) {
	t.Parallel()
	resolv := deadResolvConf(t)
	const token = "8f2ec7b9-3c1a-4a7e-9d64-0b7a3b1e9c55"
	agent := consultest.Start(t, consultest.Options{ManagementToken: token, ResolvConf: resolv,
		HCL: []string{`dns_config { allow_stale = false }`}})

	r := diagnose(t, cleanNode(t).write(t), Options{ConsulAddr: agent.HTTPAddr})
	expectFindings(t, r, "consul-acl-denied:warning")
	expectItems(t, finding(t, r, "consul-acl-denied"), "/v1/agent/self")

	f := cleanNode(t)
	f.files["/etc/towerd/towerd.toml"] = "[consul]\ntoken_file = \"${CREDENTIALS_DIRECTORY}/consul-token\"\n" + f.files["/etc/towerd/towerd.toml"]
	f.files["/etc/towerd/consul-token"] = token + "\n"
	f.modes["/etc/towerd/consul-token"] = 0o600
	f.files["/etc/systemd/system/towerd.service.d/consul-token.conf"] = "[Service]\nLoadCredential=consul-token:/etc/towerd/consul-token\n"
	r = diagnose(t, f.write(t), Options{ConsulAddr: agent.HTTPAddr})
	expectFindings(t, r, "consul-dns-allow-stale-off:warning", "consul-dns-config:info")
}
