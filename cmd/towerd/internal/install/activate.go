package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/miekg/dns"
	"github.com/towerd/towerd/systemd"
)

// Activation is `towerd install --activate`: once the files are in place,
// install runs systemctl itself, waits for towerd to answer, and undoes
// everything when it does not.
type Activation struct {
	// Timeout bounds the wait for towerd's first answer.
	Timeout time.Duration
	// Probe is where towerd must answer a DNS query; "" = 127.0.0.1:53,
	// the address resolv.conf now names. Under socket activation systemd
	// holds the socket and starts towerd on the first query, so an answer
	// there is towerd's (systemd itself never answers DNS).
	Probe string
	// Implied: not asked for with --activate, but install runs on a node
	// whose systemd runs. Then a dnsmasq holding port 53 is not an error:
	// install writes the files and prints the next: lines, dnsmasq's stop
	// first, as without a running systemd.
	Implied bool
}

// DefaultActivateTimeout is how long --activate waits for towerd.
const DefaultActivateTimeout = 10 * time.Second

// activator runs the commands of one activation and logs each in the
// report.
type activator struct {
	systemctl string // found on PATH before anything changed
	// sysusers is systemd-sysusers, found on PATH before anything changed,
	// when this install wrote the sysusers.d file (no package, whose
	// postinst ran it): towerd.service runs as user towerd, which must
	// exist before the socket starts it.
	sysusers string
	r        *Report
}

// run runs systemctl with args and reports it: "ran" and the command
// line, with its error and output when it failed.
func (a *activator) run(args ...string) error {
	return a.runProgram(a.systemctl, "systemctl", args...)
}

// runProgram runs the program at path, reported under name.
func (a *activator) runProgram(path, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	line := name + " " + strings.Join(args, " ")
	if err != nil {
		detail := err.Error()
		if s := strings.TrimSpace(out.String()); s != "" {
			detail += ": " + strings.Join(strings.Fields(s), " ")
		}
		a.r.same("failed", line, detail)
		return fmt.Errorf("%s: %s", line, detail)
	}
	a.r.Changes = append(a.r.Changes, Change{Action: "ran", Path: line})
	return nil
}

// activate starts what install wrote: daemon-reload, resolved restarted
// when its drop-in is in place (its stub gives up 127.0.0.53, and it
// rereads nothing else), the socket enabled and started, then a DNS query
// to the probe address until towerd answers or the time is up. The error
// says which step failed; the caller rolls back.
func (a *activator) activate(act Activation, resolvedDropIn bool) error {
	if a.sysusers != "" {
		if err := a.runProgram(a.sysusers, "systemd-sysusers", systemd.SysusersName); err != nil {
			return err
		}
	}
	if err := a.run("daemon-reload"); err != nil {
		return err
	}
	if resolvedDropIn {
		if err := a.run("restart", "systemd-resolved.service"); err != nil {
			return err
		}
	}
	if err := a.run("enable", "--now", systemd.SocketUnitName); err != nil {
		return err
	}
	probe := act.Probe
	if probe == "" {
		probe = towerdListenAddress + ":53"
	}
	timeout := act.Timeout
	if timeout <= 0 {
		timeout = DefaultActivateTimeout
	}
	start := time.Now()
	if err := waitForAnswer(probe, timeout); err != nil {
		a.r.same("failed", "towerd on "+probe, err.Error())
		return fmt.Errorf("towerd did not answer on %s within %v: %w", probe, timeout, err)
	}
	a.r.Changes = append(a.r.Changes, Change{Action: "ready", Path: "towerd on " + probe,
		Detail: fmt.Sprintf("answered after %v", time.Since(start).Round(time.Millisecond))})
	return nil
}

// rollback undoes an activation that failed: the units disabled and
// stopped, every file put back by uninstall, systemd told, and resolved
// restarted once its drop-in is gone. It keeps going after a failed
// command, so as much as possible is undone, and returns the first error.
func (a *activator) rollback(fsys fileSystem) error {
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	if err := a.run("disable", "--now", systemd.SocketUnitName, systemd.ServiceUnitName); err != nil {
		keep(err)
	}
	// uninstall refuses while an enable link exists; disable removed them
	// (or failed, and then uninstall says so).
	u, err := uninstall(fsys, UninstallOptions{})
	if u != nil {
		a.r.Changes = append(a.r.Changes, u.Changes...)
		a.r.Warnings = append(a.r.Warnings, u.Warnings...)
	}
	if err != nil {
		keep(fmt.Errorf("uninstall: %w", err))
		return first
	}
	if err := a.run("daemon-reload"); err != nil {
		keep(err)
	}
	for _, c := range u.Changes {
		if c.Path == ResolvedDropIn && c.Action == "removed" {
			if err := a.run("restart", "systemd-resolved.service"); err != nil {
				keep(err)
			}
		}
	}
	return first
}

// waitForAnswer asks addr for "." NS over UDP until any DNS reply comes
// back (an error rcode counts: towerd answered) or timeout passes. Each try
// waits at most a second for its reply, so a towerd still starting is asked
// again.
func waitForAnswer(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	c := &dns.Client{Net: "udp"}
	q := new(dns.Msg)
	q.SetQuestion(".", dns.TypeNS)
	var last error
	for {
		left := time.Until(deadline)
		if left <= 0 {
			if last == nil {
				last = errors.New("no reply")
			}
			return last
		}
		c.Timeout = min(left, time.Second)
		q.Id = dns.Id()
		tryStart := time.Now()
		if _, _, err := c.Exchange(q, addr); err == nil {
			return nil
		} else {
			last = err
		}
		// A refused port answers at once: wait out the rest of the try's
		// second rather than spin.
		if rest := c.Timeout - time.Since(tryStart); rest > 0 {
			time.Sleep(min(rest, time.Until(deadline)))
		}
	}
}

// preflightActivate checks, before anything changes, that --activate can
// do its part: systemctl is on PATH, and no dnsmasq holds port 53.
func (in *installer) preflightActivate(p nodePlan) (*activator, error) {
	systemctl, err := exec.LookPath("systemctl")
	if err != nil {
		return nil, fmt.Errorf("--activate: %w", err)
	}
	if p.dnsmasq.ServesDNS && (p.dnsmasq.Enabled || nodeHas(in.fsys, dnsmasqPIDFile)) {
		return nil, fmt.Errorf("--activate: dnsmasq holds port 53, which towerd.socket needs; stop it first (%s), then run install --activate again",
			strings.Join(p.dnsmasq.StopCommands, "; "))
	}
	act := &activator{systemctl: systemctl, r: in.r}
	if !p.packaged {
		if act.sysusers, err = exec.LookPath("systemd-sysusers"); err != nil {
			return nil, fmt.Errorf("--activate: towerd.service runs as user towerd, which systemd-sysusers creates: %w", err)
		}
	}
	return act, nil
}

// activate starts towerd (activator.activate) and, when it does not
// answer, rolls back: the units are disabled and every file install wrote
// is put back, so the node keeps the resolver it had.
func (in *installer) activate(act *activator, opts Activation, p nodePlan) error {
	err := act.activate(opts, in.m.file(ResolvedDropIn) != nil)
	if err == nil {
		if in.m.file(NMDropIn) != nil {
			in.r.Next = append(in.r.Next, "systemctl reload NetworkManager   # rc-manager=unmanaged")
		}
		if p.docker.Next != "" && in.m.file(DockerSocketDropIn) != nil {
			in.r.Next = append(in.r.Next, p.docker.Next)
		}
		return nil
	}
	in.r.warn("activation failed (%v): rolling back everything install did", err)
	in.r.Undo = nil // the rollback is the undo
	if rbErr := act.rollback(in.fsys); rbErr != nil {
		return fmt.Errorf("%w; the rollback did not finish either: %v (see the lines above; towerd uninstall finishes it)", err, rbErr)
	}
	return fmt.Errorf("%w; rolled back: the units are disabled and the files are as they were before install", err)
}
