package test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/towerd/towerd/test/faultproxy"
)

// The fault proxy as a process of its own: this test binary started again
// with proxyEnv set (see runMain), for a proxy that must live in another
// network namespace than the test (issue 23's day, where the shared DNS
// sits on a LAN of namespaces): every socket it opens, to its clients and
// to its target, is then that namespace's.
//
// proxyEnv is "listen target seed". The process says "ready" on its
// standard output once it serves, reads commands from its standard input
// — "faults <delay> <jitter> <loss>", "blackhole on", "blackhole off" —
// answering each with "ok", and at the end of its input prints its Stats
// as JSON and exits.
const proxyEnv = "TOWERD_E2E_FAULT_PROXY"

// proxyProc is a running fault proxy process.
type proxyProc struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines *bufio.Scanner
}

// startProxyProc runs the proxy with wrap (a command that runs its last
// arguments, e.g. `ip netns exec NS`) in front.
func startProxyProc(t *testing.T, wrap []string, listen, target string, seed uint64) *proxyProc {
	t.Helper()
	args := append(append([]string(nil), wrap...), os.Args[0], "-test.run=^$")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %d", proxyEnv, listen, target, seed))
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proxyProc{cmd: cmd, in: in, lines: bufio.NewScanner(out)}
	t.Cleanup(func() {
		in.Close()
		_ = cmd.Wait()
	})
	if line := p.next(t); line != "ready" {
		t.Fatalf("fault proxy process: %q, want ready", line)
	}
	t.Logf("fault proxy %s → %s in its own process, seed %d", listen, target, seed)
	return p
}

func (p *proxyProc) next(t *testing.T) string {
	t.Helper()
	if !p.lines.Scan() {
		t.Fatalf("fault proxy process ended: %v", p.lines.Err())
	}
	return p.lines.Text()
}

// send gives the process one command and waits for its "ok".
func (p *proxyProc) send(t *testing.T, command string) {
	t.Helper()
	if _, err := fmt.Fprintln(p.in, command); err != nil {
		t.Fatalf("fault proxy command %q: %v", command, err)
	}
	if line := p.next(t); line != "ok" {
		t.Fatalf("fault proxy command %q: %q", command, line)
	}
}

// stop ends the process and returns its counts.
func (p *proxyProc) stop(t *testing.T) faultproxy.Stats {
	t.Helper()
	p.in.Close()
	var st faultproxy.Stats
	if p.lines.Scan() {
		if err := json.Unmarshal(p.lines.Bytes(), &st); err != nil {
			t.Errorf("fault proxy stats %q: %v", p.lines.Text(), err)
		}
	}
	if err := p.cmd.Wait(); err != nil {
		t.Errorf("fault proxy process: %v", err)
	}
	return st
}

// runProxyProc is the process's main.
func runProxyProc(spec string) int {
	f := strings.Fields(spec)
	if len(f) != 3 {
		fmt.Fprintf(os.Stderr, "%s: %q, want listen target seed\n", proxyEnv, spec)
		return 1
	}
	seed, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	p, err := faultproxy.New(faultproxy.Options{Listen: f[0], Target: f[1], Seed: seed})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer p.Close()
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		words := strings.Fields(in.Text())
		switch {
		case len(words) == 4 && words[0] == "faults":
			delay, err1 := time.ParseDuration(words[1])
			jitter, err2 := time.ParseDuration(words[2])
			loss, err3 := strconv.ParseFloat(words[3], 64)
			if err1 != nil || err2 != nil || err3 != nil {
				fmt.Println("bad faults")
				continue
			}
			p.SetFaults(faultproxy.Faults{Delay: delay, Jitter: jitter, Loss: loss})
		case len(words) == 2 && words[0] == "blackhole":
			p.SetBlackhole(words[1] == "on")
		default:
			fmt.Println("unknown command")
			continue
		}
		fmt.Println("ok")
	}
	st := p.Stats()
	if err := json.NewEncoder(os.Stdout).Encode(st); err != nil {
		return 1
	}
	return 0
}
