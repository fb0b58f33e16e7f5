package doctor

import (
	"bytes"
	"io/fs"
	"net/netip"
	"time"

	"github.com/towerd/towerd/cmd/towerd/internal/admin"
	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/cmd/towerd/internal/install"
	"github.com/towerd/towerd/cmd/towerd/internal/resolvconf"
)

// Node is everything doctor read about a node; the checks read nothing
// else. A part that was not read (not asked for, or not this machine) is
// nil and named in Skipped.
type Node struct {
	// Root is the directory that stands for the node's "/".
	Root string

	ResolvConf     nodeFile // /etc/resolv.conf
	ResolvConfLink string   // where /etc/resolv.conf links to, "" for a file
	Nsswitch       nodeFile
	Hosts          nodeFile // /etc/hosts

	// Manager is what maintains resolv.conf (install's detection);
	// ManagerMissing are the files install would write to keep it from
	// taking resolv.conf back that are not in place.
	Manager        *install.ManagerPlan
	ManagerMissing []string
	Docker         *install.DockerPlan
	Dnsmasq        install.DnsmasqState
	DnsmasqRunning bool // its pid file is there
	Resolved       resolvedView

	// Listeners are the sockets bound to port 53, from /proc (nil when
	// /proc was not read).
	Listeners []listener

	Towerd towerdFiles
	// Running is the running towerd's /stats; nil when not asked.
	Running *runningTowerd
	// Consul is what the agent answered; nil when not asked.
	Consul *consulView
	// Rules are the Prometheus rules read; nil when not asked.
	Rules *rulesView
	// TLSUpstreams are the config's DNS over TLS servers as doctor's
	// own connections found them; nil when not asked.
	TLSUpstreams []tlsUpstream
	// DNSSECPath is what zone "."'s servers answered doctor's DNSSEC
	// probes; nil when not asked.
	DNSSECPath []dnssecPath

	Skipped []Skip
}

// nodeFile is one file read under the root.
type nodeFile struct {
	Path string
	Data []byte
	Err  error // fs.ErrNotExist when there is none
}

func (f nodeFile) ok() bool { return f.Err == nil }

// resolvConf parses the file; a file that cannot be read parses as empty.
func (f nodeFile) resolvConf() resolvconf.Conf {
	if !f.ok() {
		return resolvconf.Conf{}
	}
	rc, _ := resolvconf.Parse(bytes.NewReader(f.Data))
	return rc
}

// resolvedView is systemd-resolved's configuration, merged from
// resolved.conf and its drop-ins.
type resolvedView struct {
	// Present: installed; Running: running now or enabled at boot.
	Present, Running bool
	// StubListener is DNSStubListener= ("" when unset: yes).
	StubListener string
	// DNS are the servers of DNS=, as written.
	DNS []string
	// SetBy names the file that set each key last.
	SetBy map[string]string
}

// listener is one socket bound to port 53.
type listener struct {
	Proto string // "udp" or "tcp"
	Addr  netip.AddrPort
	// Owners are the processes holding the socket ("towerd (pid 812)");
	// empty when /proc/PID/fd could not be read.
	Owners []process
}

type process struct {
	PID  int
	Comm string
}

// towerdFiles is what the node's files say about towerd.
type towerdFiles struct {
	// Installed: a towerd binary, unit or config file is on the node.
	Installed bool
	// ConfigPath is the config file as the node sees it. Config holds
	// the defaults, the file and its drop-ins; ConfigErr is why they do
	// not load.
	ConfigPath string
	Config     config.Config
	ConfigErr  error
	// RootZone is zone "."'s servers as towerd would start with them.
	RootZone rootZone
	// SocketEnabled: towerd.socket is wanted by sockets.target.
	SocketEnabled bool
	// StateDirectory: towerd.service has StateDirectory=towerd, which
	// creates the default state_dir.
	StateDirectory bool
	StateDir       stateDir
	// ConsulToken is the token towerd's watch uses, read from the node;
	// never printed. TokenSource says where it came from.
	ConsulToken, TokenSource string
}

// rootZone is where zone "." gets its servers.
type rootZone struct {
	Configured bool     // servers are set in the config
	File       string   // else the file followed
	Servers    []string // host:port, towerd's own addresses left out
	Dropped    []string // towerd's own addresses found there
	Err        error    // the file could not be read
}

type stateDir struct {
	Path string
	Info fs.FileInfo // nil when it does not exist
	Err  error
}

// runningTowerd is what a running towerd's admin server said.
type runningTowerd struct {
	Addr   string
	Err    error // nil when /stats answered
	Report admin.Report
}

// consulView is what the local agent's HTTP API answered.
type consulView struct {
	Addr string
	Err  error // the agent did not answer at all

	// From /v1/agent/self; SelfErr when it was refused.
	SelfErr    error
	Node       string
	Datacenter string
	NodeAddr   string // the node's advertised LAN address
	DataDir    string
	DNS        consulDNS

	Services    []consulService
	ServicesErr error
	Checks      []consulCheck
	ChecksErr   error
}

type consulDNS struct {
	Known           bool // false when /v1/agent/self was refused
	Recursors       []string
	RecursorTimeout string
	OnlyPassing     bool
	AllowStale      bool
	UseCache        bool
	CacheMaxAge     string
	MaxStale        string
	SOAMinTTL       int
}

type consulService struct {
	ID, Name, Address string
	Port              int
}

// consulCheck is one of the agent's checks with its target as doctor
// found it.
type consulCheck struct {
	ID, Name, ServiceID, Type string
	// Timeout is the check's own; 0 when it has none (Consul then uses
	// 10 s for HTTP, TCP, gRPC, H2PING and UDP checks).
	Timeout time.Duration
	// Target is the URL or host:port it reaches; TargetFrom says where
	// doctor found it ("definition", "config", "data_dir", "output"), ""
	// when it did not.
	Target, TargetFrom string
}

// rulesView is the alerting and recording rules Prometheus has, or would
// have, loaded.
type rulesView struct {
	Source  string
	Err     error
	Alerts  []alertRule
	Records map[string]bool
	// Unread are files that could not be read or parsed, with why.
	Unread []Item
}

type alertRule struct {
	Name, Expr, From string
}
