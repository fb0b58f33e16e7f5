package test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"syscall"
	"testing"

	"github.com/miekg/dns"
)

// TestRestartDuringBlackHole is issue 7's test 5: names cached before a
// restart are answered stale after it, while the upstream is black-holed
// (a UDP socket that reads queries and never answers). The first towerd
// saves its cache on SIGTERM; the second loads it from the same state
// directory and has nothing else to answer from.
func TestRestartDuringBlackHole(t *testing.T) {
	t.Parallel()
	const freshName, freshAddr = "fresh.persist.example.", "192.0.2.50"
	staleNames := map[string]string{
		"a.persist.example.": "192.0.2.51",
		"b.persist.example.": "192.0.2.52",
	}
	up := newTestUpstream(t)
	// TTL 0 (Consul's default) is stored already expired: after the restart
	// these can only be answered stale. The TTL-3600 name is still fresh and
	// must keep the TTL it has left, not start over.
	for name, addr := range staleNames {
		up.Add(t, name+" 0 IN A "+addr)
	}
	up.Add(t, freshName+" 3600 IN A "+freshAddr)

	stateDir := t.TempDir()
	args := func(upstreamAddr string) []string {
		return []string{"-config", "", "-listen", "127.0.0.1:0", "-upstream", upstreamAddr,
			"-consul-dns", upstreamAddr, "-state-dir", stateDir}
	}
	first := startTowerd(t, args(up.Addr)...)
	for name, addr := range staleNames {
		if r := dig(t, first.UDP, name, "A"); r.Status != "NOERROR" || !slices.Equal(addresses(r.Answer), []string{addr}) {
			t.Fatalf("warm-up %s: status %s, answer %v", name, r.Status, r.Answer)
		}
	}
	if r := dig(t, first.UDP, freshName, "A"); r.Status != "NOERROR" || len(r.Answer) != 1 {
		t.Fatalf("warm-up %s: status %s, answer %v", freshName, r.Status, r.Answer)
	}

	// The upstream goes dark, then towerd restarts.
	up.Stop()
	hole := newBlackhole(t, up.Addr)
	first.signal(t, syscall.SIGTERM)
	if code := first.waitExit(t, stopTimeout); code != 0 {
		t.Fatalf("first towerd exited %d, want 0\n%s", code, first.stderr)
	}
	if _, err := first.stderr.waitFor(regexp.MustCompile(`msg="saved cache" .*entries=3`), readyTimeout, first.exited); err != nil {
		t.Fatalf("first towerd did not save 3 entries: %v\n%s", err, first.stderr)
	}
	info, err := os.Stat(filepath.Join(stateDir, "cache.bin"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("snapshot: %v, mode %v; want a 0600 file", err, info.Mode().Perm())
	}

	second := startTowerd(t, args(up.Addr)...)
	if !regexp.MustCompile(`msg="loaded saved cache" .*entries=3`).MatchString(second.stderr.String()) {
		t.Fatalf("second towerd did not load 3 entries:\n%s", second.stderr)
	}
	expectStale(t, second, staleNames, "after restart")

	// The fresh entry is answered from the cache, without a packet to the
	// black hole, and its TTL went on counting down across the restart.
	// Counted by name: the stale names' refreshes and their retries go on
	// reaching the hole meanwhile.
	before := hole.asked(freshName)
	r := dig(t, second.UDP, freshName, "A")
	if r.Status != "NOERROR" || !slices.Equal(addresses(r.Answer), []string{freshAddr}) || r.hasEDE(edeStaleAnswer) {
		t.Fatalf("%s after restart: status %s, answer %v, EDE %v; want the fresh cached answer", freshName, r.Status, r.Answer, r.EDE)
	}
	if ttl := r.Answer[0].Header().Ttl; ttl >= 3600 || ttl < 3000 {
		t.Errorf("%s after restart: TTL %d, want what is left of 3600 (below it, well above 3000)", freshName, ttl)
	}
	if got := hole.asked(freshName); got != before {
		t.Errorf("a fresh cached name sent %d packets upstream", got-before)
	}
}

// TestRestartAfterCrash: the cache also survives a crash. towerd saves it
// every state_save_interval while serving; it is killed with SIGKILL (no save
// on stop), the upstream goes dark, and the next towerd answers the names
// from the periodic snapshot, stale.
func TestRestartAfterCrash(t *testing.T) {
	t.Parallel()
	names := map[string]string{
		"a.crash.example.": "192.0.2.71",
		"b.crash.example.": "192.0.2.72",
	}
	up := newTestUpstream(t)
	for name, addr := range names {
		up.Add(t, name+" 0 IN A "+addr) // stored already expired: only stale after the restart
	}
	stateDir := t.TempDir()
	args := []string{"-config", "", "-listen", "127.0.0.1:0", "-upstream", up.Addr,
		"-consul-dns", up.Addr, "-state-dir", stateDir}
	first := startTowerd(t, append(args, "-state-save-interval", "200ms")...)
	for name, addr := range names {
		if r := dig(t, first.UDP, name, "A"); r.Status != "NOERROR" || !slices.Equal(addresses(r.Answer), []string{addr}) {
			t.Fatalf("warm-up %s: status %s, answer %v", name, r.Status, r.Answer)
		}
	}
	// The first periodic save that holds both names; earlier ones may hold
	// fewer.
	if _, err := first.stderr.waitFor(regexp.MustCompile(`level=DEBUG msg="saved cache" .*entries=2 `), readyTimeout, first.exited); err != nil {
		t.Fatalf("no periodic save of both names: %v\n%s", err, first.stderr)
	}
	first.kill(t)
	if regexp.MustCompile(`level=INFO msg="saved cache"`).MatchString(first.stderr.String()) {
		t.Fatalf("the killed towerd saved on stop; the test would not show the periodic save:\n%s", first.stderr)
	}

	up.Stop()
	hole := newBlackhole(t, up.Addr)
	second := startTowerd(t, args...)
	if !regexp.MustCompile(`msg="loaded saved cache" .*entries=2`).MatchString(second.stderr.String()) {
		t.Fatalf("second towerd did not load 2 entries:\n%s", second.stderr)
	}
	expectStale(t, second, names, "after the crash")
	if hole.packets.Load() == 0 {
		t.Errorf("no refresh reached the black-holed upstream: the answers above were not given with the upstream dead")
	}
}

// TestCorruptSavedCache: a damaged snapshot is ignored with a warning and
// towerd serves anyway; the next clean stop replaces it with a good one.
func TestCorruptSavedCache(t *testing.T) {
	t.Parallel()
	stateDir := t.TempDir()
	path := filepath.Join(stateDir, "cache.bin")
	// A current header followed by junk: past the magic check, so it is the
	// checksum or the entry decoder that must refuse it.
	if err := os.WriteFile(path, append([]byte("TOWERDC\n\x00\x01\x00\x00"), make([]byte, 64)...), 0o600); err != nil {
		t.Fatal(err)
	}
	up := newTestUpstream(t)
	up.Add(t, "ok.persist.example. 300 IN A 192.0.2.60")
	d := startTowerd(t, "-config", "", "-listen", "127.0.0.1:0", "-upstream", up.Addr,
		"-consul-dns", up.Addr, "-state-dir", stateDir)
	if !regexp.MustCompile(`level=WARN msg="saved cache ignored`).MatchString(d.stderr.String()) {
		t.Errorf("no warning about the damaged snapshot:\n%s", d.stderr)
	}
	reply := mustExchange(t, d.UDP, "udp", query("ok.persist.example.", dns.TypeA, true))
	if reply.Rcode != dns.RcodeSuccess || !slices.Equal(addresses(reply.Answer), []string{"192.0.2.60"}) {
		t.Fatalf("after a damaged snapshot: rcode %s, answer %v", dns.RcodeToString[reply.Rcode], reply.Answer)
	}
	d.signal(t, syscall.SIGTERM)
	if code := d.waitExit(t, stopTimeout); code != 0 {
		t.Fatalf("towerd exited %d, want 0", code)
	}
	if !regexp.MustCompile(`msg="saved cache" .*entries=1`).MatchString(d.stderr.String()) {
		t.Errorf("the damaged snapshot was not replaced:\n%s", d.stderr)
	}
}

// expectStale asks d each name (to its address) and wants the stale answer:
// the address, the stale TTL of a TTL-0 name (staleTTL(0)) and EDE 3.
func expectStale(t *testing.T, d *towerd, names map[string]string, when string) {
	t.Helper()
	for name, addr := range names {
		r := dig(t, d.UDP, name, "A")
		if r.Status != "NOERROR" || !slices.Equal(addresses(r.Answer), []string{addr}) {
			t.Errorf("%s %s: status %s, answer %v; want the stale %s\n%s", name, when, r.Status, r.Answer, addr, r.Output)
			continue
		}
		if ttl := r.Answer[0].Header().Ttl; ttl != staleTTL(0) || !r.hasEDE(edeStaleAnswer) {
			t.Errorf("%s %s: TTL %d, EDE %v; want a stale answer (TTL %d, EDE %d)",
				name, when, ttl, r.EDE, staleTTL(0), edeStaleAnswer)
		}
	}
}
