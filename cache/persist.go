package cache

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/dnswire"
)

// A snapshot is the cache written out so that a restarted towerd still has
// its answers, stale ones above all: a node restarted while its upstream is
// down has nothing else to serve. The format is small and versioned:
//
//	header   magic "TOWERDC\n", version uint16, reserved uint16,
//	         written int64 (Unix ns), count uint32
//	entry    stored int64 (Unix ns), ttl int64 (ns), type uint16,
//	         class uint16, flags uint8 (1 DO, 2 CD), name length uint16,
//	         name, message length uint16, message (DNS wire format)
//	trailer  CRC-32C (Castagnoli) of everything before it
//
// All integers are big-endian. Entries go from least to most recently used,
// so loading them in order rebuilds the LRU order. The checksum is verified
// before any entry is used: a file cut short or damaged is rejected whole,
// never half loaded.

// snapshotMagic starts every snapshot; a file without it is not one of ours.
var snapshotMagic = [8]byte{'T', 'O', 'W', 'E', 'R', 'D', 'C', '\n'}

// SnapshotVersion is the format Dump writes and the only one Load reads. Bump
// it when the layout changes: an old file is then ignored, not misread.
const SnapshotVersion = 1

// ErrBadSnapshot is wrapped by every error Load returns for a file it cannot
// use (wrong magic, other version, truncated, checksum mismatch, an entry
// that does not parse). Callers log it and start with an empty cache.
var ErrBadSnapshot = errors.New("unusable cache snapshot")

const (
	snapshotHeaderLen = 8 + 2 + 2 + 8 + 4
	flagDO            = 1
	flagCD            = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// LoadStats says what Load did with a snapshot.
type LoadStats struct {
	// Loaded counts entries now in the cache.
	Loaded int
	// Skipped counts valid entries left out: past the maximum stale age,
	// already cached, or beyond Capacity (the least recently used go).
	Skipped int
	// Written is when the snapshot was written, by the writer's clock.
	Written time.Time
	// Oldest is the earliest stored time of a loaded entry; zero if none.
	Oldest time.Time
	// Rejected counts entries dropped because they failed a check a
	// snapshot written by Dump always passes (see entryRejection); the rest
	// of the file is still loaded. Rejections counts them by reason.
	Rejected   int
	Rejections map[string]int
	// Clamped counts loaded entries whose TTL was cut to the current
	// MaxTTL: the file is trusted no further than the running config.
	Clamped int
}

// reject counts one dropped entry under reason.
func (s *LoadStats) reject(reason string) {
	if s.Rejections == nil {
		s.Rejections = map[string]int{}
	}
	s.Rejections[reason]++
	s.Rejected++
}

// snapshotEntry is one decoded entry waiting for the checksum to be verified.
type snapshotEntry struct {
	key  Key
	item *item
}

// Dump writes every entry that could still be served (fresh, or stale within
// the maximum stale age) to w and returns how many it wrote. Each entry keeps
// its stored time and TTL, so its age carries over to the cache that loads it.
// The cache keeps serving while Dump runs; only the list of entries is taken
// under the lock.
func (c *Cache) Dump(w io.Writer) (int, error) {
	now := c.clock()
	maxStale := c.policy.Load().maxStaleAge
	// Under the lock only the two walks of the LRU list (same order, least
	// recently used first): every query waits while it is held, once per
	// state_save_interval. 13 ms per 100,000 entries on the bench machine,
	// against 36 ms with a lookup per key. Items are immutable, so the
	// filtering runs after.
	c.mu.Lock()
	keys, items := c.lru.Keys(), c.lru.Values()
	c.mu.Unlock()
	entries := make([]snapshotEntry, 0, len(keys))
	for i, k := range keys {
		if it := items[i]; it.ageAt(now.sinceEpoch).servable(maxStale) {
			entries = append(entries, snapshotEntry{k, it})
		}
	}

	sum := crc32.New(castagnoli)
	bw := bufio.NewWriter(io.MultiWriter(w, sum))
	var hdr [snapshotHeaderLen]byte
	copy(hdr[:8], snapshotMagic[:])
	binary.BigEndian.PutUint16(hdr[8:], SnapshotVersion)
	binary.BigEndian.PutUint64(hdr[12:], uint64(now.UnixNano()))
	binary.BigEndian.PutUint32(hdr[20:], uint32(len(entries)))
	bw.Write(hdr[:]) // bufio keeps the first error; Flush reports it

	var buf []byte
	for _, e := range entries {
		// Items are immutable, so writing runs without the lock; an entry
		// is kept packed already.
		buf = appendEntry(buf[:0], e.key, now.at(e.item.stored), e.item.ttl, e.item.wire())
		bw.Write(buf)
	}
	if err := bw.Flush(); err != nil {
		return 0, err
	}
	var trailer [4]byte
	binary.BigEndian.PutUint32(trailer[:], sum.Sum32())
	if _, err := w.Write(trailer[:]); err != nil {
		return 0, err
	}
	return len(entries), nil
}

func appendEntry(b []byte, k Key, stored time.Time, ttl time.Duration, wire []byte) []byte {
	var flags uint8
	if k.DO {
		flags |= flagDO
	}
	if k.CD {
		flags |= flagCD
	}
	b = binary.BigEndian.AppendUint64(b, uint64(stored.UnixNano()))
	b = binary.BigEndian.AppendUint64(b, uint64(ttl))
	b = binary.BigEndian.AppendUint16(b, k.Type)
	b = binary.BigEndian.AppendUint16(b, k.Class)
	b = append(b, flags)
	b = binary.BigEndian.AppendUint16(b, uint16(len(k.Name)))
	b = append(b, k.Name...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(wire)))
	return append(b, wire...)
}

// Load reads a snapshot written by Dump and adds its entries to the cache,
// keeping each entry's stored time and TTL, the TTL cut to the current
// MaxTTL. Entries past the maximum stale age by the cache's clock are
// skipped, and so are keys already cached (what the cache holds is newer).
// An entry Dump could not have written (one the store policy refuses, whose
// message answers another question than its key, or stored in the future)
// is dropped and counted in LoadStats.Rejected; a checksum proves only that
// the file is whole, not who wrote it (issue 13). A snapshot that is not
// whole and valid is rejected with an error wrapping ErrBadSnapshot and
// leaves the cache unchanged; when r is a *SnapshotFile, the file is then
// also set aside (see OpenSnapshot).
//
// Loaded entries are marked OriginRestored (Info.Origin).
func (c *Cache) Load(r io.Reader) (LoadStats, error) {
	return c.LoadWith(r, LoadOptions{})
}

// LoadOptions are what LoadWith adds to Load's checks.
type LoadOptions struct {
	// Imported marks the entries OriginImported: the snapshot is not the
	// daemon's own, and a *SnapshotFile that fails is not set aside (the
	// file is someone else's to keep).
	Imported bool
	// Check, when set, is asked about every entry that passed Load's own
	// checks, with its key and its message (unpacked for the call: the
	// check may change it, nothing else reads it). A non-empty reason drops
	// the entry, counted in LoadStats.Rejections under that reason.
	Check func(k Key, m *dns.Msg) (reason string)
}

// LoadWith is Load with opts: a snapshot from elsewhere, with the caller's
// checks of each entry besides the cache's own.
func (c *Cache) LoadWith(r io.Reader, opts LoadOptions) (LoadStats, error) {
	stats, err := c.load(r, opts)
	if f, ok := r.(*SnapshotFile); ok && err != nil && !opts.Imported {
		err = f.setAside(err)
	}
	return stats, err
}

func (c *Cache) load(r io.Reader, opts LoadOptions) (LoadStats, error) {
	now := c.clock()
	sum := crc32.New(castagnoli)
	br := bufio.NewReader(r)
	dec := snapshotDecoder{r: io.TeeReader(br, sum), now: now, check: opts.Check, origin: OriginRestored}
	if opts.Imported {
		dec.origin = OriginImported
	}

	var hdr [snapshotHeaderLen]byte
	if err := dec.full(hdr[:]); err != nil {
		return LoadStats{}, err
	}
	if !bytes.Equal(hdr[:8], snapshotMagic[:]) {
		return LoadStats{}, fmt.Errorf("%w: not a towerd cache snapshot", ErrBadSnapshot)
	}
	if v := binary.BigEndian.Uint16(hdr[8:]); v != SnapshotVersion {
		return LoadStats{}, fmt.Errorf("%w: format version %d, this towerd reads %d", ErrBadSnapshot, v, SnapshotVersion)
	}
	stats := LoadStats{Written: time.Unix(0, int64(binary.BigEndian.Uint64(hdr[12:])))}
	count := binary.BigEndian.Uint32(hdr[20:])

	policy := c.policy.Load()
	maxStale := policy.maxStaleAge
	maxBytes := c.MaxBytes()
	// Only the last Capacity entries, and the last MaxBytes of them, can
	// stay (they are the most recently used), so memory stays bounded by
	// the cache's bounds whatever the file's count claims.
	kept := make([]snapshotEntry, 0, min(int(count), c.capacity))
	var keptBytes int64
	for i := uint32(0); i < count; i++ {
		e, rejection, err := dec.entry()
		if err != nil {
			return LoadStats{}, fmt.Errorf("entry %d of %d: %w", i+1, count, err)
		}
		if rejection != "" {
			stats.reject(rejection)
			continue
		}
		if policy.bounds.max > 0 && e.item.ttl > policy.bounds.max {
			e.item.ttl = policy.bounds.max
			stats.Clamped++
		}
		if !e.item.ageAt(now.sinceEpoch).servable(maxStale) {
			stats.Skipped++
			continue
		}
		size := entrySize(e.key, e.item)
		if size > maxBytes {
			stats.reject(reasonOverMaxBytes)
			continue
		}
		for len(kept) == c.capacity || (len(kept) > 0 && keptBytes+size > maxBytes) {
			keptBytes -= entrySize(kept[0].key, kept[0].item)
			kept[0] = snapshotEntry{} // the array must not keep what was dropped
			kept = kept[1:]
			stats.Skipped++
		}
		kept = append(kept, e)
		keptBytes += size
	}
	if err := verifyTrailer(br, sum); err != nil {
		return LoadStats{}, err
	}

	var oldest time.Duration
	c.mu.Lock()
	for _, e := range kept {
		if c.lru.Contains(e.key) {
			stats.Skipped++
			continue
		}
		if _, ok := c.addLocked(e.key, e.item); !ok {
			continue // MaxBytes was lowered meanwhile
		}
		stats.Loaded++
		if stats.Loaded == 1 || e.item.stored < oldest {
			oldest = e.item.stored
		}
	}
	c.mu.Unlock()
	if stats.Loaded > 0 {
		stats.Oldest = now.at(oldest)
	}
	return stats, nil
}

// verifyTrailer checks the checksum and that nothing follows it: a file
// with trailing bytes was not written by Dump in one piece.
func verifyTrailer(br *bufio.Reader, sum hash.Hash32) error {
	var trailer [4]byte
	if _, err := io.ReadFull(br, trailer[:]); err != nil {
		return fmt.Errorf("%w: truncated before the checksum", ErrBadSnapshot)
	}
	if got, want := binary.BigEndian.Uint32(trailer[:]), sum.Sum32(); got != want {
		return fmt.Errorf("%w: checksum %08x, computed %08x", ErrBadSnapshot, got, want)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return fmt.Errorf("%w: data after the checksum", ErrBadSnapshot)
	}
	return nil
}

// snapshotDecoder reads entries; every error it returns wraps ErrBadSnapshot.
type snapshotDecoder struct {
	r   io.Reader
	buf []byte
	// now converts the stored times in the file, Unix ns by the writer's
	// wall clock, to the loading cache's time since its epoch.
	now instant
	// check and origin are LoadOptions': the caller's verdict on each
	// entry, and the mark every loaded entry gets.
	check  func(Key, *dns.Msg) string
	origin Origin
}

// full fills b, turning a short read into "truncated".
func (d *snapshotDecoder) full(b []byte) error {
	if _, err := io.ReadFull(d.r, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w: truncated", ErrBadSnapshot)
		}
		return fmt.Errorf("%w: %w", ErrBadSnapshot, err)
	}
	return nil
}

// bytes reads a uint16 length and that many bytes into the decoder's buffer.
func (d *snapshotDecoder) bytes() ([]byte, error) {
	var n [2]byte
	if err := d.full(n[:]); err != nil {
		return nil, err
	}
	size := int(binary.BigEndian.Uint16(n[:]))
	if cap(d.buf) < size {
		d.buf = make([]byte, size)
	}
	d.buf = d.buf[:size]
	if err := d.full(d.buf); err != nil {
		return nil, err
	}
	return d.buf, nil
}

// Why entryRejection drops an entry; stable words, as they are logged and
// counted by reason.
const (
	rejectOtherQuestion = "message answers another question than its key"
	rejectFuture        = "stored in the future"
	rejectPolicy        = "store policy refuses it"
)

// entry decodes one entry. What does not decode (a damaged file, or one
// not written by Dump) is an error wrapping ErrBadSnapshot; an entry that
// decodes but fails entryRejection comes back with the reason instead, so
// the caller drops it alone.
func (d *snapshotDecoder) entry() (snapshotEntry, string, error) {
	var fixed [8 + 8 + 2 + 2 + 1]byte
	if err := d.full(fixed[:]); err != nil {
		return snapshotEntry{}, "", err
	}
	stored := time.Unix(0, int64(binary.BigEndian.Uint64(fixed[0:])))
	ttl := time.Duration(binary.BigEndian.Uint64(fixed[8:]))
	flags := fixed[20]
	if ttl < 0 || ttl > maxRRTTL*time.Second {
		return snapshotEntry{}, "", fmt.Errorf("%w: TTL %d out of range", ErrBadSnapshot, ttl)
	}
	if flags&^(flagDO|flagCD) != 0 {
		return snapshotEntry{}, "", fmt.Errorf("%w: unknown key flags %#x", ErrBadSnapshot, flags)
	}
	name, err := d.bytes()
	if err != nil {
		return snapshotEntry{}, "", err
	}
	k := NewKey(string(name), binary.BigEndian.Uint16(fixed[16:]), binary.BigEndian.Uint16(fixed[18:]),
		flags&flagDO != 0, flags&flagCD != 0)
	if _, ok := dns.IsDomainName(k.Name); !ok || k.Name != string(name) {
		return snapshotEntry{}, "", fmt.Errorf("%w: bad key name %q", ErrBadSnapshot, name)
	}
	wire, err := d.bytes()
	if err != nil {
		return snapshotEntry{}, "", err
	}
	var m dnswire.Msg
	if err := m.Parse(wire); err != nil {
		return snapshotEntry{}, "", fmt.Errorf("%w: message of %s: %w", ErrBadSnapshot, k, err)
	}
	if reason := entryRejection(k, &m, stored, d.now.Time); reason != "" {
		return snapshotEntry{}, reason, nil
	}
	// The entry is made again by the entry builder, as if the message had
	// come from an upstream: the policy's verdict and the kind are taken
	// from it, not its TTL: the TTL in the file is the one the entry was
	// stored with (clamps of that time included); Load clamps it to today's
	// MaxTTL.
	a, reason := prepareAnswer(k, wire, ttlBounds{})
	if reason == "" {
		reason = a.storable()
	}
	if reason != "" {
		return snapshotEntry{}, rejectPolicy, nil
	}
	a.ttl = ttl
	if d.check != nil {
		// The caller's check reads a dns.Msg of its own: the entry's
		// bytes, unpacked for it alone (only cache load asks; the state
		// file at start has no check).
		msg := new(dns.Msg)
		if err := msg.Unpack(wire); err != nil {
			return snapshotEntry{}, "", fmt.Errorf("%w: message of %s: %w", ErrBadSnapshot, k, err)
		}
		if reason := d.check(k, msg); reason != "" {
			return snapshotEntry{}, reason, nil
		}
	}
	return snapshotEntry{key: k, item: &item{prepared: a.prepared, stored: d.now.fromTime(stored), origin: d.origin}}, "", nil
}

// entryRejection says why an entry that decodes must not be served, or "".
// Dump writes every message behind its key's question (entry.go), so a
// message asking anything else was put there by someone else: loaded, it
// would answer k with records about another name or type. A stored time
// after now is not an age at all; it would keep the entry fresh for as long
// as the writer liked (a clock stepped back since the save loses those
// entries, which is the safe side).
func entryRejection(k Key, m *dnswire.Msg, stored, now time.Time) string {
	var name [dnswire.MaxNameLen]byte
	var text [4 * dnswire.MaxNameLen]byte
	if m.QDCount != 1 || m.QType != k.Type || m.QClass != k.Class ||
		string(dnswire.AppendText(text[:0], m.Question(name[:0]), true)) != k.Name {
		return rejectOtherQuestion
	}
	if stored.After(now) {
		return rejectFuture
	}
	return ""
}
