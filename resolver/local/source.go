// Package local answers questions from data on this node, before the cache
// and the upstreams: hosts(5) files, static records, dnsmasq-style address
// and local domains, and the domain_needed and bogus_priv rules that keep
// dotless names and private reverse lookups from leaking upstream (issue 15).
// A Source is a resolver.RecordSource; its answers are never cached (they
// cost nothing to give again) and an NXDOMAIN it gives is an answer.
//
// The semantics are dnsmasq 2.86+'s, checked against the real dnsmasq by
// test/e2e_dnsmasq_test.go:
//
//   - A name with records (hosts files, static records) is answered from
//     them; a type it has no records of goes on to the rules below, and is
//     forwarded when none applies (dnsmasq forwards AAAA for a name its
//     hosts file gives only an IPv4 address).
//   - An address domain answers A (or AAAA) for itself and every name below
//     it with its addresses; the other types are forwarded, unless the domain
//     is also local.
//   - A local domain is answered only from local data: NODATA for a name
//     that exists there (or has names below it), NXDOMAIN otherwise.
//   - A forwarded zone longer than an address or local domain wins, as
//     dnsmasq's server= and address= match by the longest domain.
//   - domain_needed: A and AAAA for a name of one label get NODATA if the
//     name is known, NXDOMAIN otherwise.
//   - bogus_priv: PTR for a complete reverse name of a private address
//     (reverse.go) gets NXDOMAIN unless local data has it, or a forwarded
//     zone contains it (dnsmasq's rev-server=).
package local

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/boundedfile"
)

// Options configure a Source.
type Options struct {
	// HostsFiles are hosts(5) files, or directories whose files are all
	// read in name order (dnsmasq's addn-hosts), read in order. A missing
	// file holds no names; it is read once it appears.
	HostsFiles []string
	// Records are static records; owner names may be in any case. Their
	// TTLs are replaced by TTL. A and AAAA records also give the PTR record
	// of their address, as dnsmasq's host-record does.
	Records []dns.RR
	// Addresses are address domains: the domain and every name below it
	// answer A and AAAA with these addresses.
	Addresses []Address
	// Domains are local domains, answered only from local data.
	Domains []string
	// DomainNeeded keeps A and AAAA questions for dotless names local.
	DomainNeeded bool
	// BogusPriv keeps PTR questions for private addresses local.
	BogusPriv bool
	// TTL is the TTL of every local answer, whole seconds; 0 (dnsmasq's
	// local-ttl default) means clients do not cache them.
	TTL time.Duration
	// Forwarded are the zones with servers of their own; "." is ignored.
	Forwarded []string
	// Log receives a line for each reload and each unreadable file or line;
	// nil discards them.
	Log *slog.Logger
	// Replaces is the source this one takes over from (a configuration
	// reload), or nil: a hosts file the new source cannot read keeps the
	// entries Replaces last read from it.
	Replaces *Source
}

// Address is one address domain (dnsmasq's address=/DOMAIN/IP).
type Address struct {
	Domain string
	Addrs  []netip.Addr
}

// Source is the local data of a node. Lookup and Covers read the current
// generation without locking; Reload and Poll build the next one.
type Source struct {
	opts Options
	log  *slog.Logger
	t    atomic.Pointer[table]

	mu   sync.Mutex // serializes Reload and Poll
	seen []fileStamp
	// good is each hosts file's entries from its last read that passed:
	// a file refused or unreadable later keeps them (issue 21).
	good map[string][]hostsEntry
}

// MaxHostsFileSize is the most bytes a hosts file may have (issue 21:
// /dev/urandom as a hosts file grew towerd ~23 MB/s and it never served).
// A node's /etc/hosts is a few lines; the largest lists people load with
// addn-hosts (ad-block hosts files) are a few MiB.
const MaxHostsFileSize = 16 << 20

// hostsRule is how hosts files are read: regular files up to
// MaxHostsFileSize, opened without blocking. Symlinks are followed
// (/etc/hosts is one on some systems, and addn-hosts directories hold
// them); the file at the end must pass.
var hostsRule = boundedfile.Rule{MaxSize: MaxHostsFileSize}

// maxBadLinesLogged is how many skipped lines of one file are logged one
// by one at each read; the rest are counted in one more line.
const maxBadLinesLogged = 10

// fileStamp is what Poll compares to tell that a hosts file changed.
type fileStamp struct {
	path  string
	size  int64
	mtime time.Time
}

// New validates o and reads the hosts files.
func New(o Options) (*Source, error) {
	if o.TTL < 0 {
		return nil, errors.New("local TTL cannot be negative")
	}
	for _, rr := range o.Records {
		if rr.Header().Class != dns.ClassINET {
			return nil, fmt.Errorf("record %q: only class IN is served", rr.String())
		}
	}
	for _, a := range o.Addresses {
		if len(a.Addrs) == 0 {
			return nil, fmt.Errorf("address domain %q has no address (a local domain answers NXDOMAIN)", a.Domain)
		}
	}
	s := &Source{opts: o, log: o.Log}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if old := o.Replaces; old != nil {
		old.mu.Lock()
		s.good = old.good // never changed, only replaced
		old.mu.Unlock()
	}
	s.opts.Replaces = nil // not kept alive by its successor
	s.Reload()
	return s, nil
}

// Reload reads the hosts files again and swaps in the new data.
func (s *Source) Reload() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reload(s.stamps())
}

// Poll reloads when a hosts file changed (size or modification time, or a
// file appeared or went away) since the last read, and reports whether it
// did. It costs one stat per file (and a listing per directory); the
// daemon calls it every DefaultPollInterval.
func (s *Source) Poll() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.stamps()
	if slices.Equal(now, s.seen) {
		return false
	}
	s.reload(now)
	return true
}

// DefaultPollInterval is how often the daemon checks the hosts files: edits
// show within two seconds for the cost of a stat per file.
const DefaultPollInterval = 2 * time.Second

// files lists the hosts files to read: each configured path, a directory's
// regular files in name order.
func (s *Source) files() []string {
	var out []string
	for _, p := range s.opts.HostsFiles {
		info, err := os.Stat(p)
		if err != nil || !info.IsDir() {
			out = append(out, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			out = append(out, p)
			continue
		}
		for _, e := range entries {
			if e.Type().IsRegular() || e.Type()&fs.ModeSymlink != 0 {
				out = append(out, filepath.Join(p, e.Name()))
			}
		}
	}
	return out
}

func (s *Source) stamps() []fileStamp {
	files := s.files()
	out := make([]fileStamp, len(files))
	for i, f := range files {
		out[i].path = f
		if info, err := os.Stat(f); err == nil {
			out[i].size, out[i].mtime = info.Size(), info.ModTime()
		} else {
			out[i].size = -1
		}
	}
	return out
}

func (s *Source) reload(stamps []fileStamp) {
	t := newTable(&s.opts)
	for _, rr := range s.opts.Records {
		rr = dns.Copy(rr)
		t.add(rr, fromRecords)
		switch rr := rr.(type) {
		case *dns.A:
			if a, ok := netip.AddrFromSlice(rr.A.To4()); ok {
				t.addPTR(a, rr.Hdr.Name, fromRecords)
			}
		case *dns.AAAA:
			if a, ok := netip.AddrFromSlice(rr.AAAA); ok {
				t.addPTR(a, rr.Hdr.Name, fromRecords)
			}
		}
	}
	hosts := 0
	good := make(map[string][]hostsEntry, len(stamps))
	for _, st := range stamps {
		if st.size < 0 {
			s.log.Debug("hosts file not read", "file", st.path) // gone: its names go
			continue
		}
		entries, err := s.readHosts(st.path)
		if err != nil {
			// A FIFO, a device or a huge file in its place, or a read that
			// failed: what the file said last time stays.
			last, ok := s.good[st.path]
			s.log.Warn("hosts file not read; its last good entries stay", "file", st.path, "err", err, "entries", len(last))
			if !ok {
				continue
			}
			entries = last
		}
		good[st.path] = entries
		from := t.hostsFile(st.path)
		for _, e := range entries {
			t.addHost(e, from)
		}
		hosts += len(entries)
	}
	s.good = good
	s.seen = stamps
	s.t.Store(t)
	s.log.Info("local data loaded", "names", len(t.names), "hosts_entries", hosts, "files", len(stamps))
}

// readHosts reads one hosts file under hostsRule. Neither the open nor the
// reads can block: Reload runs in the daemon's reload path.
func (s *Source) readHosts(path string) ([]hostsEntry, error) {
	f, err := boundedfile.Open(path, hostsRule)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, bad, badCount, err := parseHosts(f)
	if err != nil {
		return nil, err
	}
	for _, b := range bad {
		s.log.Warn("hosts file line skipped", "file", path, "why", b)
	}
	if more := badCount - len(bad); more > 0 {
		s.log.Warn("hosts file lines skipped", "file", path, "more", more)
	}
	return entries, nil
}

// Covers implements resolver.RecordSource: whether Lookup might answer for
// name (canonical). It does not allocate.
func (s *Source) Covers(name []byte) bool {
	t := s.t.Load()
	return t != nil && t.covers(name)
}

// Answer implements resolver.RecordSource. Local answers are never stale.
// why names the rule that answered (issue 25, `towerd lookup`): "hosts
// FILE" or "record" (RuleHosts, RuleRecord) for a name with records, where
// the answer's first record came from; "address DOMAIN" or "local DOMAIN"
// (RuleAddress, RuleLocal) for the longest address or local domain
// (canonical; "address ." is dnsmasq's address=/#/); RuleDomainNeeded;
// RuleBogusPriv. A question that is not local gets ok=false and no why:
// the name is none of local data's business.
func (s *Source) Answer(q dns.Question) (m *dns.Msg, stale bool, why string, ok bool) {
	if q.Qclass != dns.ClassINET {
		return nil, false, "", false
	}
	t := s.t.Load()
	if t == nil {
		return nil, false, "", false
	}
	name := canonical(q.Name)
	rcode, answer, why, ok := t.lookup(q.Name, name, q.Qtype)
	if !ok {
		return nil, false, "", false
	}
	m = new(dns.Msg)
	m.Response = true
	m.Rcode = rcode
	m.Answer = answer
	return m, false, why, true
}

// Lookup is Answer without the why.
func (s *Source) Lookup(q dns.Question) (m *dns.Msg, stale, ok bool) {
	m, stale, _, ok = s.Answer(q)
	return m, stale, ok
}
