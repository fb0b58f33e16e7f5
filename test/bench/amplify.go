package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// Scenario 16, amplify (issue 35): what a client's question costs
// upstream under a search list, for each server forwarding to the
// upstream of scenario 14 (127.0.0.42, which answers NXDOMAIN for every
// name whose first label begins "nx"). The node's resolv.conf has a
// Kubernetes-style list of five domains, ndots:5; towerd reads it
// ([search] resolv_conf) and asks a lookup's later names ahead (issue 28);
// the peers have no such rule. Measured, in upstream queries per client
// question (counted at the upstream, once its count has settled):
//
//   - first tries: an attacker asking only the first name of a lookup,
//     nx<i>.<first domain>, for random names, one at a time;
//   - whole lookups: a client asking as glibc does, every domain of the
//     list in turn and then the name itself, each answered NXDOMAIN.

const (
	amplifyDomains = "ns1.svc.cluster.local svc.cluster.local cluster.local corp.example ec2.internal"
	amplifyTries   = 200
	amplifyLookups = 40
)

func (b *bench) amplify(round int, s string) error {
	resolv := filepath.Join(b.dir, "amplify-resolv.conf")
	if err := os.WriteFile(resolv, []byte("search "+amplifyDomains+"\noptions ndots:5\n"), 0o644); err != nil {
		return err
	}
	p, err := b.startServer(s, round, serverSetup{phase: "amplify", upstream: abuseDirectAddr, cacheSize: b.cacheSize,
		searchResolvConf: resolv})
	if err != nil {
		return err
	}
	defer b.procs.stop(p)
	addr := serverAddr(s)
	domains := strings.Fields(amplifyDomains)
	tag := rand.Uint32()
	up := b.abuseServers.counts

	before, notA := up.Load(), b.abuseServers.notA.Load()
	for i := range amplifyTries {
		udpAsk(addr, fmt.Sprintf("nx%d-%x.%s.", i, tag, domains[0]))
	}
	first := float64(settle(up.Load)-before) / amplifyTries
	firstNotA := float64(b.abuseServers.notA.Load()-notA) / amplifyTries

	before = up.Load()
	asked := 0
	for i := range amplifyLookups {
		bare := fmt.Sprintf("nxw%d-%x", i, tag)
		for _, d := range domains {
			udpAsk(addr, bare+"."+d+".")
			asked++
		}
		udpAsk(addr, bare+".")
		asked++
	}
	whole := float64(settle(up.Load)-before) / float64(asked)

	r := b.res[s]
	r.add("amplify.first", first)
	r.add("amplify.firstNotA", firstNotA)
	r.add("amplify.whole", whole)
	fmt.Printf("  round %d %-8s amplify: %.2f upstream queries (%.2f of other types than A) per first try (A) of a random name under a %d-domain search list; %.2f per question of whole lookups\n",
		round, s, first, firstNotA, len(domains), whole)
	return nil
}

// udpAsk asks name (A) at addr and waits up to 2 s for the reply.
func udpAsk(addr, name string) {
	c := &dns.Client{Timeout: 2 * time.Second}
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	_, _, _ = c.Exchange(m, addr)
}

// settle reads count until it has not moved for 300 ms (the names asked
// ahead are still on their way when the client's answer comes), at most
// 5 s, and returns it.
func settle(count func() uint64) uint64 {
	last, still := count(), 0
	for deadline := time.Now().Add(5 * time.Second); still < 3 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond) // polling a counter of a load
		if n := count(); n != last {
			last, still = n, 0
		} else {
			still++
		}
	}
	return last
}

func (b *bench) amplifyRows() []row {
	return []row{
		{measure: "upstream queries per first try (A) of a random name (5-domain search list)", key: "amplify.first", format: "%.2f"},
		{measure: "… of which of other types than A", key: "amplify.firstNotA", format: "%.2f"},
		{measure: "upstream queries per question of whole lookups (glibc's order)", key: "amplify.whole", format: "%.2f"},
	}
}
