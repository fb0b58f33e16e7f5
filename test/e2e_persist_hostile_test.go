package test

import (
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// snapshotEntry is one entry of a hand-made cache snapshot, in the layout
// cache/persist.go documents: a test that planted files through the cache
// package could only write what Dump writes.
type snapshotEntry struct {
	key      dns.Question // the entry's key (name, type, class)
	question string       // the stored message's question name
	stored   time.Time
	ttl      time.Duration
	addr     string
}

// snapshotFile seals entries into a snapshot with a valid checksum.
func snapshotFile(t *testing.T, entries ...snapshotEntry) []byte {
	t.Helper()
	b := append([]byte("TOWERDC\n"), 0, 1, 0, 0) // magic, version 1, reserved
	b = binary.BigEndian.AppendUint64(b, uint64(time.Now().UnixNano()))
	b = binary.BigEndian.AppendUint32(b, uint32(len(entries)))
	for _, e := range entries {
		m := new(dns.Msg)
		m.SetQuestion(e.question, e.key.Qtype)
		m.Response = true
		rr, err := dns.NewRR(e.key.Name + " 2144448000 IN A " + e.addr) // 68 years, as in issue 13
		if err != nil {
			t.Fatal(err)
		}
		m.Answer = []dns.RR{rr}
		wire, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		b = binary.BigEndian.AppendUint64(b, uint64(e.stored.UnixNano()))
		b = binary.BigEndian.AppendUint64(b, uint64(e.ttl))
		b = binary.BigEndian.AppendUint16(b, e.key.Qtype)
		b = binary.BigEndian.AppendUint16(b, e.key.Qclass)
		b = append(b, 0) // neither DO nor CD
		b = binary.BigEndian.AppendUint16(b, uint16(len(e.key.Name)))
		b = append(b, e.key.Name...)
		b = binary.BigEndian.AppendUint16(b, uint16(len(wire)))
		b = append(b, wire...)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

// TestPersistRefusesHostileFiles: issue 13 item 4, against the built binary. A
// state file planted by someone else, or one whose entries Dump could not
// have written, must not keep towerd from starting, must not answer a
// single query, and must be explained in the log. The victim name is
// asked after start: the answer must be the upstream's, and the upstream
// must have been asked.
func TestPersistRefusesHostileFiles(t *testing.T) {
	t.Parallel()
	const victim, upstreamAddr, forgedAddr = "victim.test.", "192.0.2.80", "6.6.6.6"
	const years68 = 68 * 365 * 24 * time.Hour
	key := dns.Question{Name: victim, Qtype: dns.TypeA, Qclass: dns.ClassINET}
	forged := snapshotEntry{key: key, question: victim, stored: time.Now(), ttl: years68, addr: forgedAddr}

	plantFile := func(data []byte, perm os.FileMode, uid int) func(t *testing.T, path string) {
		return func(t *testing.T, path string) {
			if err := os.WriteFile(path, data, perm); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, perm); err != nil {
				t.Fatal(err)
			}
			if uid >= 0 {
				if err := os.Chown(path, uid, uid); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	mismatched := forged
	mismatched.question = "other.test."
	future := forged
	future.stored = time.Now().Add(time.Hour)
	overLong := forged
	overLong.stored = time.Now().Add(-49 * time.Hour) // past 24h max_ttl + 24h max stale age once clamped

	tests := []struct {
		name  string
		plant func(t *testing.T, path string)
		log   string // what the log must say
		// setAside: the whole file is refused and renamed to cache.bin.rejected.
		setAside bool
		root     bool
	}{
		{"FIFO", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}, `level=WARN msg="saved cache ignored.*FIFO, not a regular file`, true, false},
		{"forged by another user", plantFile(snapshotFile(t, forged), 0o644, 65534),
			`level=WARN msg="saved cache ignored.*owned by uid 65534`, true, true},
		{"world-writable", plantFile(snapshotFile(t, forged), 0o666, -1),
			`level=WARN msg="saved cache ignored.*writable by group or others \(mode 0666\)`, true, false},
		{"group-writable", plantFile(snapshotFile(t, forged), 0o660, -1),
			`level=WARN msg="saved cache ignored.*writable by group or others \(mode 0660\)`, true, false},
		{"symlink", func(t *testing.T, path string) {
			target := filepath.Join(t.TempDir(), "forged.bin")
			plantFile(snapshotFile(t, forged), 0o600, -1)(t, target)
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}, `level=WARN msg="saved cache ignored.*it is a symlink`, true, false},
		{"mismatched key", plantFile(snapshotFile(t, mismatched), 0o600, -1),
			`level=WARN msg="saved cache entries dropped" .*rejected=1 why="map\[message answers another question than its key:1\]"`, false, false},
		{"future-dated", plantFile(snapshotFile(t, future), 0o600, -1),
			`level=WARN msg="saved cache entries dropped" .*rejected=1 why="map\[stored in the future:1\]"`, false, false},
		{"over-long TTL", plantFile(snapshotFile(t, overLong), 0o600, -1),
			`msg="loaded saved cache" .*entries=0 skipped=1`, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.root && os.Geteuid() != 0 {
				t.Skip("planting a file of another user needs root")
			}
			stateDir := t.TempDir()
			path := filepath.Join(stateDir, "cache.bin")
			tt.plant(t, path)
			up := newTestUpstream(t)
			up.Add(t, victim+" 300 IN A "+upstreamAddr)

			d := startTowerd(t, "-config", "", "-listen", "127.0.0.1:0", "-upstream", up.Addr,
				"-consul-dns", up.Addr, "-state-dir", stateDir)
			if !regexp.MustCompile(tt.log).MatchString(d.stderr.String()) {
				t.Errorf("the log does not say %q:\n%s", tt.log, d.stderr)
			}
			r := dig(t, d.UDP, victim, "A")
			if r.Status != "NOERROR" || !slices.Equal(addresses(r.Answer), []string{upstreamAddr}) {
				t.Errorf("%s: status %s, answer %v; want the upstream's %s\n%s", victim, r.Status, r.Answer, upstreamAddr, r.Output)
			}
			if got := up.Count(victim, dns.TypeA); got != 1 {
				t.Errorf("the upstream was asked %d times for %s, want 1: the answer came from the planted file", got, victim)
			}
			if tt.setAside {
				if _, err := os.Lstat(path + ".rejected"); err != nil {
					t.Errorf("the refused file was not set aside: %v", err)
				}
			}
		})
	}
}
