// Package consultest starts real Consul agents for tests: Consul v1.14.11,
// built from its Go module by the separate module in test/consulagent
// (`make consul-agent`), run as `consul agent -dev` on loopback with ports of
// its own, and stopped by PID when the test ends. StartCluster runs one
// server and client agents joined to it, each on its own 127.x.y.z address
// with Consul's default limits, as on real nodes.
package consultest

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/towerd/towerd/test/dnstest"
)

// Bounds on waiting for an agent; none is a sleep, each is the longest a
// test waits before failing instead of hanging.
const (
	readyTimeout = 60 * time.Second // start to an elected leader and a registered node
	stopTimeout  = 10 * time.Second // SIGTERM to exit, then SIGKILL
	pollEvery    = 50 * time.Millisecond
)

// Options shape an agent.
type Options struct {
	// HTTPPort is the HTTP API's port; 0 picks a free one. A test that
	// replaces an agent passes the old one's port.
	HTTPPort int
	// ManagementToken, if set, turns ACLs on with default_policy "deny"
	// and makes this the initial management token (and the agent's own).
	ManagementToken string
	// IP is the loopback address the agent binds (serf, server RPC, HTTP,
	// DNS); "" = 127.0.0.1.
	IP string
	// Node is the node name; "" = "towerd-test".
	Node string
	// Join, if set, makes a client agent (not -dev) that joins the server
	// whose serf LAN address (ip:port) this is.
	Join string
	// HCL are more configuration fragments, one -hcl each (recursors,
	// dns_config, ...).
	HCL []string
	// DataDir is the agent's data_dir; "" = a fresh temporary directory.
	DataDir string
	// ResolvConf, if set, is a file bind-mounted over /etc/resolv.conf in
	// a private mount namespace of the agent's own (unshare -m; needs
	// root): an agent that runs checks by host name then asks the servers
	// that file names, never this machine's resolver. Unset, as root, the
	// agent gets one naming a loopback address nobody serves (deadResolvConf):
	// no agent a test starts may ask the machine's resolver anything.
	ResolvConf string
}

// Agent is a running agent.
type Agent struct {
	// HTTPAddr and DNSAddr are 127.0.0.1:port; DNS serves UDP and TCP.
	HTTPAddr, DNSAddr string
	// Node is the agent's node name.
	Node string
	// SerfAddr is the serf LAN ip:port, for clients to join; ServerAddr
	// the server RPC ip:port (a server's: where client agents send their
	// RPCs and streams).
	SerfAddr, ServerAddr string

	opts Options
	bin  string
	args []string
	// resolvConf, if set, is bind-mounted over /etc/resolv.conf in a
	// private mount namespace the agent runs in (Options.ResolvConf).
	resolvConf string
	cmd        *exec.Cmd
	exited     chan struct{}
	output     *dnstest.SyncBuffer
}

// Start runs an agent and waits until it has a leader and its node is in the
// catalog. It is stopped by PID when the test ends, if still running.
func Start(t testing.TB, opts Options) *Agent {
	t.Helper()
	bin := Binary(t)
	var lastErr error
	// A free port can be taken by another test between choosing and
	// binding it; a few attempts make that race harmless.
	for attempt := 0; attempt < 3; attempt++ {
		a, err := start(t, bin, opts)
		if err == nil {
			return a
		}
		lastErr = err
	}
	t.Fatalf("consul agent did not start: %v", lastErr)
	return nil
}

func start(t testing.TB, bin string, opts Options) (*Agent, error) {
	ip := opts.IP
	if ip == "" {
		ip = "127.0.0.1"
	}
	httpPort := opts.HTTPPort
	if httpPort == 0 {
		httpPort = freePortOn(t, ip)
	}
	dnsPort, serfPort, serverPort := freePortOn(t, ip), freePortOn(t, ip), freePortOn(t, ip)
	a := &Agent{
		HTTPAddr:   net.JoinHostPort(ip, strconv.Itoa(httpPort)),
		DNSAddr:    net.JoinHostPort(ip, strconv.Itoa(dnsPort)),
		SerfAddr:   net.JoinHostPort(ip, strconv.Itoa(serfPort)),
		ServerAddr: net.JoinHostPort(ip, strconv.Itoa(serverPort)),
		Node:       "towerd-test",
		opts:       opts,
		bin:        bin,
		output:     &dnstest.SyncBuffer{},
	}
	if opts.Node != "" {
		a.Node = opts.Node
	}
	args := []string{"agent", "-dev"}
	if opts.Join != "" {
		args = []string{"agent", "-retry-join", opts.Join, "-retry-interval", "1s"}
	}
	dataDir := opts.DataDir
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	args = append(args, "-bind", ip, "-client", ip,
		"-node", a.Node, "-data-dir", dataDir, "-log-level", "debug",
		"-http-port", strconv.Itoa(httpPort), "-dns-port", strconv.Itoa(dnsPort),
		"-serf-lan-port", strconv.Itoa(serfPort), "-server-port", strconv.Itoa(serverPort),
		// Everything else off, so parallel agents cannot collide.
		"-serf-wan-port", "-1", "-https-port", "-1", "-grpc-port", "-1", "-grpc-tls-port", "-1",
		// Counters in /v1/agent/metrics?format=prometheus are cumulative
		// (the default JSON form is per 10 s interval); gauges stay listed
		// for 10 minutes after their last change.
		"-hcl", `telemetry { prometheus_retention_time = "10m" disable_hostname = true }`,
	)
	if opts.ManagementToken != "" {
		args = append(args, "-hcl", fmt.Sprintf(`acl { enabled = true default_policy = "deny" `+
			`tokens { initial_management = %q agent = %q } }`, opts.ManagementToken, opts.ManagementToken))
	}
	for _, h := range opts.HCL {
		args = append(args, "-hcl", h)
	}
	a.args, a.resolvConf = args, opts.ResolvConf
	if a.resolvConf == "" && os.Geteuid() == 0 {
		a.resolvConf = DeadResolvConf(t)
	}
	if err := a.exec(); err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		a.Stop(t)
		if t.Failed() {
			t.Logf("consul agent %s output (last lines):\n%s", a.HTTPAddr, lastLines(a.output.String(), 60))
		}
	})
	if err := a.waitReady(); err != nil {
		a.Stop(t)
		return nil, fmt.Errorf("%w\n%s", err, lastLines(a.output.String(), 30))
	}
	return a, nil
}

// exec starts the agent's process.
func (a *Agent) exec() error {
	a.cmd = exec.Command(a.bin, a.args...)
	if a.resolvConf != "" {
		// unshare and sh exec in turn: the agent keeps the PID that Stop
		// signals.
		a.cmd = exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c",
			`mount --bind "$1" /etc/resolv.conf && shift && exec "$@"`, "sh", a.resolvConf, a.bin}, a.args...)...)
	}
	a.cmd.Stdout, a.cmd.Stderr = a.output, a.output
	a.cmd.WaitDelay = 5 * time.Second
	a.exited = make(chan struct{})
	if err := a.cmd.Start(); err != nil {
		return err
	}
	cmd, exited := a.cmd, a.exited
	go func() {
		_ = cmd.Wait() // the exit is read from ProcessState
		close(exited)
	}()
	return nil
}

// Restart starts an agent stopped by Kill or Stop again: the same node,
// addresses, ports and data directory, as a node's agent restarted by its
// service manager. It returns once the process runs, not once it answers:
// the test measures when it does.
func (a *Agent) Restart(t testing.TB) {
	t.Helper()
	select {
	case <-a.exited:
	default:
		t.Fatalf("consul agent pid %d restarted while still running", a.cmd.Process.Pid)
	}
	if err := a.exec(); err != nil {
		t.Fatalf("restarting consul agent %s: %v", a.Node, err)
	}
}

// waitReady polls the HTTP API until a leader is elected and the agent's
// node is registered: then registrations and DNS work.
func (a *Agent) waitReady() error {
	client := a.Client(a.opts.ManagementToken)
	deadline := time.Now().Add(readyTimeout)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		leader, err := client.Status().Leader()
		if err == nil && leader != "" {
			node, _, err := client.Catalog().Node(a.Node, nil)
			if err == nil && node != nil {
				return nil
			}
		}
		select {
		case <-a.exited:
			return fmt.Errorf("consul agent exited: %v", a.cmd.ProcessState)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("consul agent on %s not ready within %v (last error: %v)", a.HTTPAddr, readyTimeout, err)
		}
	}
}

// Client returns an API client for the agent with token ("" = none).
func (a *Agent) Client(token string) *api.Client {
	c, err := api.NewClient(&api.Config{Address: a.HTTPAddr, Token: token,
		Transport: &http.Transport{}})
	if err != nil {
		panic(err) // a plain address cannot fail
	}
	return c
}

// Stop ends the agent by PID: SIGTERM, then SIGKILL if it lingers. Safe to
// call twice.
func (a *Agent) Stop(t testing.TB) {
	if a.cmd.Process == nil {
		return
	}
	select {
	case <-a.exited:
		return
	default:
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(stopTimeout):
		t.Errorf("consul agent pid %d still running %v after SIGTERM; killing it", a.cmd.Process.Pid, stopTimeout)
		_ = a.cmd.Process.Kill()
		<-a.exited
	}
}

// Kill ends the agent at once by PID (SIGKILL), like a crash.
func (a *Agent) Kill() {
	_ = a.cmd.Process.Kill()
	<-a.exited
}

// Output returns what the agent logged so far.
func (a *Agent) Output() string { return a.output.String() }

// Binary returns the path of the test agent, building it first if it is
// missing (as `make consul-agent` does; a lock keeps parallel test binaries
// from building it twice).
func Binary(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "test", "consulagent")
	bin := filepath.Join(dir, "bin", "consul")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "bin", ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	if _, err := os.Stat(bin); err == nil {
		return bin // built by another test binary while this one waited
	}
	t.Logf("building the Consul test agent (make consul-agent; about 3 minutes the first time)")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", "bin/consul", ".")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the Consul test agent in %s: %v\n%s", dir, err, out)
	}
	return bin
}

// freePortOn returns a port free on ip for both TCP and UDP when called
// (Consul binds both for DNS and serf), below the kernel's range of
// ephemeral ports (issue 33). An agent keeps its ports across Restart and
// a replacing agent takes its predecessor's HTTP port; a port from the
// ephemeral range, free for the seconds in between, is the kernel's to
// hand out meanwhile as any socket's source port (towerd's upstream
// attempts open thousands of UDP sockets a second in the flood tests),
// and the agent then exited 1 on "address already in use". Below the
// range, only a bind that names the port can take it.
func freePortOn(t testing.TB, ip string) int {
	t.Helper()
	lo, hi := agentPortRange()
	for range 100 {
		port := lo + mrand.IntN(hi-lo)
		l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
		if err != nil {
			continue
		}
		pc, err := net.ListenPacket("udp", l.Addr().String())
		l.Close()
		if err == nil {
			pc.Close()
			return port
		}
	}
	t.Fatalf("no port in [%d, %d) free for both TCP and UDP on %s", lo, hi, ip)
	return 0
}

// agentPortRange is where freePortOn looks: [20000, the first ephemeral
// port), or a fixed [20000, 30000) when the kernel's range cannot be read
// or leaves too little below it.
func agentPortRange() (lo, hi int) {
	lo, hi = 20000, 30000
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	if f := strings.Fields(string(b)); len(f) == 2 {
		if first, err := strconv.Atoi(f[0]); err == nil && first >= lo+5000 {
			hi = first
		}
	}
	return lo, hi
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Cluster is one server agent and client agents joined to it.
type Cluster struct {
	Server  *Agent
	Clients []*Agent
}

// StartCluster starts a server (-dev: in-memory, its own leader) and n
// client agents joined to it, each on its own loopback address 127.x.y.z
// (x.y picked at random so parallel clusters do not share addresses), with
// Consul's default limits (http_max_conns_per_client 200, no RPC rate
// limit). It returns once every client is a member with its node in the
// catalog.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	// 127.<100-227>.<1-254>.<1+i>: away from 127.0.0.x, which the other
	// tests use.
	var base [2]byte
	if _, err := rand.Read(base[:]); err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("127.%d.%d.", 100+int(base[0])%128, 1+int(base[1])%254)
	c := &Cluster{Server: Start(t, Options{IP: prefix + "1", Node: "server"})}
	for i := range n {
		c.Clients = append(c.Clients, Start(t, Options{IP: prefix + strconv.Itoa(2+i),
			Node: fmt.Sprintf("client%d", i+1), Join: c.Server.SerfAddr}))
	}
	return c
}

// Metrics reads the agent's own metrics in Prometheus form: name (with
// labels as Prometheus writes them) → value. Counters are cumulative since
// the agent started.
func (a *Agent) Metrics(t testing.TB) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + a.HTTPAddr + "/v1/agent/metrics?format=prometheus")
	if err != nil {
		t.Fatalf("metrics of %s: %v", a.Node, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("metrics of %s: %d %v\n%s", a.Node, resp.StatusCode, err, body)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out
}

// BytesTo reads what the established TCP connections from a to the server
// agent's RPC port carried (RPCs and streams alike, multiplexed there):
// bytes a sent and received, from the kernel's counters (`ss -ti`). A
// connection closed meanwhile drops out of the sum; client agents keep
// theirs open.
func (a *Agent) BytesTo(t testing.TB, server *Agent) (sent, received uint64) {
	t.Helper()
	srcIP, _, _ := net.SplitHostPort(a.ServerAddr)
	out, err := exec.Command("ss", "-tinH", "state", "established", "src", srcIP, "dst", server.ServerAddr).Output()
	if err != nil {
		t.Fatalf("ss: %v", err)
	}
	for _, field := range strings.Fields(string(out)) {
		k, v, ok := strings.Cut(field, ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "bytes_sent":
			sent += n
		case "bytes_received":
			received += n
		}
	}
	return sent, received
}

// Sum adds the values of every series of metric name (any labels).
func Sum(m map[string]float64, name string) float64 {
	var sum float64
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			sum += v
		}
	}
	return sum
}

// DeadResolvConf writes a resolv.conf whose one nameserver is a loopback
// address nobody serves (a random one of 127.251.0.0/16): what an agent
// looks up by host name fails at once, on loopback, instead of reaching the
// machine's configured resolver. Start gives it to every agent run as root
// without Options.ResolvConf.
func DeadResolvConf(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "resolv.conf")
	ip := fmt.Sprintf("127.251.%d.%d", 1+mrand.IntN(254), 1+mrand.IntN(254))
	if err := os.WriteFile(path, []byte("nameserver "+ip+"\noptions timeout:1 attempts:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
