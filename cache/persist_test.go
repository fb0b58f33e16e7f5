package cache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// persistConfig keeps expired entries for a day, like towerd's defaults.
var persistConfig = Config{Capacity: 10, MaxStaleAge: 24 * time.Hour}

// dump writes c's snapshot and fails the test on error.
func dump(t *testing.T, c *Cache) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := c.Dump(&buf); err != nil {
		t.Fatalf("Dump: %v", err)
	}
	return buf.Bytes()
}

// TestDumpLoadKeepsAges stores entries, lets time pass, and checks that a
// cache loaded from the snapshot at a later instant shows the TTLs and stale
// ages the first cache would show at that instant: ages survive a restart.
func TestDumpLoadKeepsAges(t *testing.T) {
	src, clock := newTestCache(t, persistConfig)
	mustSet(t, src, keyA("fresh.example."), aReply(t, "fresh.example.", 300, "192.0.2.1"))
	mustSet(t, src, keyA("stale.example."), aReply(t, "stale.example.", 0, "192.0.2.2"))
	nodata := reply(t, dns.RcodeSuccess, sections{ns: []string{soa(120, 60)}})
	nodataKey := NewKey("nodata.example.", dns.TypeAAAA, dns.ClassINET, true, true)
	mustSet(t, src, nodataKey, nodata)
	clock.Advance(100 * time.Second)
	snapshot := dump(t, src)

	// The "restarted" cache's clock is another 50 s on: the downtime.
	dst, dstClock := newTestCache(t, persistConfig)
	dstClock.Advance(150 * time.Second)
	stats, err := dst.Load(bytes.NewReader(snapshot))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if stats.Loaded != 3 || stats.Skipped != 0 {
		t.Errorf("stats %+v, want 3 loaded, 0 skipped", stats)
	}
	if !stats.Written.Equal(clock.Now()) || !stats.Oldest.Equal(clockStart) {
		t.Errorf("written %v, oldest %v; want %v and %v", stats.Written, stats.Oldest, clock.Now(), clockStart)
	}

	r, ok := dst.Get(keyA("fresh.example."))
	if !ok || !r.Fresh || r.Remaining != 150*time.Second || r.Msg.Answer[0].Header().Ttl != 150 {
		t.Errorf("fresh entry: ok %v fresh %v remaining %v TTL shown %d; want 150 s left", ok, r.Fresh, r.Remaining, r.Msg.Answer[0].Header().Ttl)
	}
	r, ok = dst.Get(keyA("stale.example."))
	if !ok || r.Fresh || r.Expired != 150*time.Second {
		t.Errorf("stale entry: ok %v fresh %v expired %v; want stale, expired 150 s ago", ok, r.Fresh, r.Expired)
	}
	r, ok = dst.Get(nodataKey)
	if !ok || r.Kind != NoData || r.TTL != 60*time.Second || r.Fresh {
		t.Errorf("NODATA entry (DO, CD): ok %v kind %v TTL %v fresh %v; want NODATA, TTL 60 s, expired", ok, r.Kind, r.TTL, r.Fresh)
	}
}

// TestDumpLoadSkipsTooOld: entries past the maximum stale age are neither
// written nor loaded.
func TestDumpLoadSkipsTooOld(t *testing.T) {
	src, clock := newTestCache(t, persistConfig)
	mustSet(t, src, keyA("old.example."), aReply(t, "old.example.", 60, "192.0.2.1"))
	clock.Advance(23 * time.Hour)
	mustSet(t, src, keyA("young.example."), aReply(t, "young.example.", 60, "192.0.2.2"))
	clock.Advance(2 * time.Hour) // old: 25 h − 60 s past expiry, beyond a day
	if n, err := src.Dump(new(bytes.Buffer)); err != nil || n != 1 {
		t.Errorf("Dump wrote %d entries (%v), want 1: the old one is past the stale age", n, err)
	}

	// Written while still young enough, loaded after its stale window closed.
	snapshot := dump(t, src)
	dst, dstClock := newTestCache(t, persistConfig)
	dstClock.Advance(25*time.Hour + 23*time.Hour)
	stats, err := dst.Load(bytes.NewReader(snapshot))
	if err != nil || stats.Loaded != 0 || stats.Skipped != 1 || dst.Len() != 0 {
		t.Errorf("Load = %+v, %v, len %d; want nothing loaded, 1 skipped", stats, err, dst.Len())
	}
}

// TestLoadStoredTimesFarAway: items keep their stored time as a Duration
// since the cache's epoch, which cannot hold every time a file may carry. An
// entry stored at the far past of Unix nanoseconds (1677), kept by a stale
// age of "forever", must stay very old as the clock moves on, not wrap
// around into fresh; one stored in 2262 is in the future and refused (issue
// 13: an age in the future is no age at all).
func TestLoadStoredTimesFarAway(t *testing.T) {
	m := aReply(t, "past.example.", 300, "192.0.2.1")
	past, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	m = aReply(t, "future.example.", 300, "192.0.2.2")
	future, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	farFuture := time.Unix(0, math.MaxInt64)
	body := appendEntry(nil, keyA("past.example."), time.Unix(0, math.MinInt64), 300*time.Second, past)
	body = appendEntry(body, keyA("future.example."), farFuture, 300*time.Second, future)

	dst, clock := newTestCache(t, Config{Capacity: 10, MaxStaleAge: math.MaxInt64})
	stats, err := dst.Load(bytes.NewReader(sealSnapshot(2, body)))
	if err != nil || stats.Loaded != 1 || stats.Rejected != 1 || stats.Rejections[rejectFuture] != 1 {
		t.Fatalf("Load = %+v, %v; want the past entry loaded, the future one rejected", stats, err)
	}
	clock.Advance(time.Second)
	const centuries = 200 * 365 * 24 * time.Hour
	r, ok := dst.Get(keyA("past.example."))
	if !ok || r.Fresh || r.Expired < centuries {
		t.Errorf("entry stored in 1677: ok %v fresh %v expired %v; want stale for centuries", ok, r.Fresh, r.Expired)
	}
	if _, ok := dst.Get(keyA("future.example.")); ok {
		t.Errorf("the entry stored in 2262 is served")
	}
}

// TestLoadKeepsRecencyAndCapacity: a snapshot bigger than the cache keeps
// the most recently used entries, in LRU order, and never evicts what the
// cache already holds in favour of the file.
func TestLoadKeepsRecencyAndCapacity(t *testing.T) {
	src, _ := newTestCache(t, persistConfig)
	names := []string{"a.example.", "b.example.", "c.example.", "d.example."}
	for _, n := range names {
		mustSet(t, src, keyA(n), aReply(t, n, 300, "192.0.2.1"))
	}
	src.Get(keyA("a.example.")) // a is now the most recently used
	snapshot := dump(t, src)

	dst, _ := newTestCache(t, Config{Capacity: 2, MaxStaleAge: time.Hour})
	stats, err := dst.Load(bytes.NewReader(snapshot))
	if err != nil || stats.Loaded != 2 || stats.Skipped != 2 {
		t.Fatalf("Load = %+v, %v; want 2 loaded, 2 skipped", stats, err)
	}
	for n, want := range map[string]bool{"a.example.": true, "d.example.": true, "b.example.": false, "c.example.": false} {
		if _, ok := dst.Get(keyA(n)); ok != want {
			t.Errorf("%s cached %v, want %v", n, ok, want)
		}
	}

	// Loading again: both keys are cached already and stay as they are.
	stats, err = dst.Load(bytes.NewReader(snapshot))
	if err != nil || stats.Loaded != 0 || dst.Len() != 2 {
		t.Errorf("second Load = %+v, %v, len %d; want nothing loaded over existing entries", stats, err, dst.Len())
	}
}

// TestLoadRejectsBadSnapshots: whatever is wrong with the file, Load returns
// ErrBadSnapshot and the cache is untouched.
func TestLoadRejectsBadSnapshots(t *testing.T) {
	src, _ := newTestCache(t, persistConfig)
	mustSet(t, src, keyA("x.example."), aReply(t, "x.example.", 300, "192.0.2.1"))
	good := dump(t, src)
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x40
		return b
	}
	oldVersion := bytes.Clone(good)
	binary.BigEndian.PutUint16(oldVersion[8:], SnapshotVersion+1)

	tests := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"not ours", []byte("# some other file\n")},
		{"other version", oldVersion},
		{"truncated header", good[:10]},
		{"truncated entry", good[:len(good)-20]},
		{"no checksum", good[:len(good)-4]},
		{"bad checksum", flip(len(good) - 1)},
		{"flipped bit in a message", flip(len(good) - 10)},
		{"trailing data", append(bytes.Clone(good), 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst, _ := newTestCache(t, persistConfig)
			stats, err := dst.Load(bytes.NewReader(tt.data))
			if !errors.Is(err, ErrBadSnapshot) {
				t.Errorf("Load = %+v, %v; want ErrBadSnapshot", stats, err)
			}
			if dst.Len() != 0 {
				t.Errorf("cache holds %d entries after a rejected snapshot", dst.Len())
			}
		})
	}
}

// forgedEntry is issue 13's planted entry: victim.test A 6.6.6.6 with a
// 68-year TTL, stored at stored, its message asking question.
func forgedEntry(t *testing.T, k Key, question string, stored time.Time) []byte {
	t.Helper()
	const years68 = 68 * 365 * 24 * time.Hour
	m := aReply(t, question, int(years68/time.Second), "6.6.6.6")
	wire, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return appendEntry(nil, k, stored, years68, wire)
}

// TestLoadChecksEveryEntry: a file with a correct checksum is trusted no
// further than its entries' own consistency and today's config. Each bad
// entry is dropped and counted by reason; the good ones beside it load.
func TestLoadChecksEveryEntry(t *testing.T) {
	now := clockStart
	victim := keyA("victim.test.")
	nx := aReply(t, "nx.example.", 300, "192.0.2.1")
	nx.Rcode = dns.RcodeNameError
	nxWire, err := nx.Pack()
	if err != nil {
		t.Fatal(err)
	}
	good := aReply(t, "good.example.", 300, "192.0.2.7")
	goodWire, err := good.Pack()
	if err != nil {
		t.Fatal(err)
	}
	aaaa := NewKey("victim.test.", dns.TypeAAAA, dns.ClassINET, false, false)
	chaos := NewKey("victim.test.", dns.TypeA, dns.ClassCHAOS, false, false)

	tests := []struct {
		name   string
		entry  []byte
		reason string
	}{
		{"another name", forgedEntry(t, victim, "other.test.", now), rejectOtherQuestion},
		{"another type", forgedEntry(t, aaaa, "victim.test.", now), rejectOtherQuestion},
		{"another class", forgedEntry(t, chaos, "victim.test.", now), rejectOtherQuestion},
		{"stored a minute ahead", forgedEntry(t, victim, "victim.test.", now.Add(time.Minute)), rejectFuture},
		{"refused by the store policy", appendEntry(nil, keyA("nx.example."), now, time.Minute, nxWire), rejectPolicy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := append(appendEntry(nil, keyA("good.example."), now, 300*time.Second, goodWire), tt.entry...)
			dst, _ := newTestCache(t, persistConfig)
			stats, err := dst.Load(bytes.NewReader(sealSnapshot(2, body)))
			if err != nil || stats.Loaded != 1 || stats.Rejected != 1 || stats.Rejections[tt.reason] != 1 {
				t.Fatalf("Load = %+v, %v; want 1 loaded, 1 rejected for %q", stats, err, tt.reason)
			}
			if _, ok := dst.Get(keyA("good.example.")); !ok {
				t.Error("the good entry beside the bad one was not loaded")
			}
			for _, k := range []Key{victim, aaaa, chaos, keyA("other.test."), keyA("nx.example.")} {
				if r, ok := dst.Get(k); ok {
					t.Errorf("%s is served: %v", k, r.Msg.Answer)
				}
			}
		})
	}
}

// TestLoadClampsToTodaysMaxTTL: the forged entry whose message does answer
// its key is held to the running MaxTTL, whatever TTL the file claims: it
// lives at most a day, and one stored a day and a minute ago is expired.
func TestLoadClampsToTodaysMaxTTL(t *testing.T) {
	cfg := Config{Capacity: 10, MaxTTL: 24 * time.Hour, MaxStaleAge: 24 * time.Hour}
	now := clockStart
	victim := keyA("victim.test.")
	body := forgedEntry(t, victim, "victim.test.", now.Add(-time.Hour))
	other := keyA("old.test.")
	old := forgedEntry(t, other, "old.test.", now.Add(-24*time.Hour-time.Minute))
	dst, _ := newTestCache(t, cfg)
	stats, err := dst.Load(bytes.NewReader(sealSnapshot(2, append(body, old...))))
	if err != nil || stats.Loaded != 2 || stats.Clamped != 2 {
		t.Fatalf("Load = %+v, %v; want 2 loaded, both clamped", stats, err)
	}
	r, ok := dst.Get(victim)
	if !ok || !r.Fresh || r.TTL != 24*time.Hour || r.Remaining != 23*time.Hour || r.Msg.Answer[0].Header().Ttl != 23*3600 {
		t.Errorf("victim.test: ok %v fresh %v TTL %v remaining %v; want the TTL cut to 24h, 23h left", ok, r.Fresh, r.TTL, r.Remaining)
	}
	if r, ok := dst.Get(other); !ok || r.Fresh || r.Expired != time.Minute {
		t.Errorf("old.test: ok %v fresh %v expired %v; want expired a minute ago", ok, r.Fresh, r.Expired)
	}
}

// sealSnapshot wraps entry bytes in a current header and a valid checksum, so
// tests (and the fuzzer) reach the entry decoder past the checksum.
func sealSnapshot(count uint32, body []byte) []byte {
	var hdr [snapshotHeaderLen]byte
	copy(hdr[:], snapshotMagic[:])
	binary.BigEndian.PutUint16(hdr[8:], SnapshotVersion)
	binary.BigEndian.PutUint32(hdr[20:], count)
	out := append(hdr[:], body...)
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], crc32.Checksum(out, castagnoli))
	return append(out, sum[:]...)
}

// LoadWith marks what it loads as imported, drops the entries the caller's
// check refuses (counted under the check's reason), and never sets aside a
// file that is not the cache's own; Load marks entries restored, and an
// upstream's reply stored over either is stored again (issue 21).
func TestLoadWithChecksAndMarksOrigin(t *testing.T) {
	src, _ := newTestCache(t, persistConfig)
	mustSet(t, src, keyA("kept.example."), aReply(t, "kept.example.", 300, "192.0.2.1"))
	mustSet(t, src, keyA("refused.example."), aReply(t, "refused.example.", 300, "192.0.2.2"))
	snapshot := dump(t, src)

	dst, _ := newTestCache(t, persistConfig)
	var asked []string
	stats, err := dst.LoadWith(bytes.NewReader(snapshot), LoadOptions{Imported: true, Check: func(k Key, m *dns.Msg) string {
		asked = append(asked, k.Name)
		if len(m.Answer) != 1 {
			return "BUG: no message"
		}
		m.Answer = nil // the check may change its copy
		if k.Name == "refused.example." {
			return "not in a forwarded zone"
		}
		return ""
	}})
	if err != nil || stats.Loaded != 1 || stats.Rejected != 1 || stats.Rejections["not in a forwarded zone"] != 1 || len(asked) != 2 {
		t.Fatalf("LoadWith: %+v %v, asked %v; want 1 loaded, 1 rejected by the check", stats, err, asked)
	}
	infos := dst.Inspect("kept.example.")
	if len(infos) != 1 || infos[0].Origin != OriginImported || len(infos[0].Answer) != 1 {
		t.Fatalf("kept.example.: %+v, want one imported entry with its answer intact", infos)
	}
	if got := dst.Inspect("refused.example."); len(got) != 0 {
		t.Errorf("refused.example. loaded: %+v", got)
	}

	restored, _ := newTestCache(t, persistConfig)
	if _, err := restored.Load(bytes.NewReader(snapshot)); err != nil {
		t.Fatal(err)
	}
	if infos := restored.Inspect("kept.example."); len(infos) != 1 || infos[0].Origin != OriginRestored {
		t.Errorf("Load: %+v, want a restored entry", infos)
	}
	mustSet(t, restored, keyA("kept.example."), aReply(t, "kept.example.", 300, "192.0.2.9"))
	if infos := restored.Inspect("kept.example."); len(infos) != 1 || infos[0].Origin != OriginStored {
		t.Errorf("after Set: %+v, want a stored entry", infos)
	}
}

// A file LoadWith refuses stays where it is: it is the operator's.
func TestLoadWithImportedKeepsTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mine.bin")
	plantFile(t, path, []byte("not a snapshot"), 0o600)
	f, err := OpenSnapshot(path)
	mustOK(t, err)
	defer f.Close()
	dst, _ := newTestCache(t, persistConfig)
	if _, err := dst.LoadWith(f, LoadOptions{Imported: true}); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("LoadWith: %v, want ErrBadSnapshot", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the refused file moved: %v", err)
	}
}
