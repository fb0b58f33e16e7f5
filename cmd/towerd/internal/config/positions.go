package config

import (
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2/unstable"
)

// Where each key of a file sits, so that every error names the line of the
// value at fault and the key's full path (issue 25: errors in the second and
// third [[zone]] were placed at the file's first "servers =", a duplicate
// key was named "size", not "cache.size"). The file is read with go-toml's
// own parser, the one the decoder runs on, so tables, arrays of tables,
// dotted keys, inline tables and arrays over several lines are placed as
// the decoder reads them; nothing here matches text.

// keySpan is where one key, one element of an array or one table header
// sits in a file.
type keySpan struct {
	// path is the key as errors name it: "cache.size", "listen[1]",
	// "zone[2].servers[0]"; a table header is its table, "zone[2]".
	path string
	// line is the 1-based line its value starts on (an element's own
	// line; a key's line for a key whose array runs over several lines).
	line int
	// start and end are the byte offsets of the key through its value,
	// or of a header's key.
	start, end int
	// scalar is the text of a scalar value, "" for other values.
	scalar string
}

// scanKeys lists the keys, elements and table headers of a TOML document in
// its order. At a syntax error it stops with what it found before.
func scanKeys(data []byte) []keySpan {
	s := keyScanner{arrays: map[string]int{}}
	s.p.Reset(data)
	for s.p.NextExpression() {
		e := s.p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			s.header(e)
		case unstable.KeyValue:
			s.keyValue(s.table, e)
		}
	}
	return s.spans
}

// keyScanner walks a document: the current table and, for each array of
// tables (by its path), how many elements it has so far.
type keyScanner struct {
	p      unstable.Parser
	table  string
	arrays map[string]int
	spans  []keySpan
}

// header enters a [table] or [[array]] table. A key part naming an array
// of tables refers to its last element ([zone.x] after [[zone]] is in the
// last zone); the last part of an [[array]] header starts a new element.
func (s *keyScanner) header(e *unstable.Node) {
	path := ""
	var first, last *unstable.Node
	it := e.Key()
	for it.Next() {
		k := it.Node()
		if first == nil {
			first = k
		}
		last = k
		path = joinKey(path, string(k.Data))
		n, isArray := s.arrays[path]
		switch {
		case it.IsLast() && e.Kind == unstable.ArrayTable:
			s.arrays[path] = n + 1
			path += fmt.Sprintf("[%d]", n)
		case isArray && n > 0:
			path += fmt.Sprintf("[%d]", n-1)
		}
	}
	if first == nil {
		return
	}
	s.table = path
	start, end := s.offsets(first.Raw), s.offsets(last.Raw)
	s.spans = append(s.spans, keySpan{path: path, line: s.line(first.Raw), start: start[0], end: end[1]})
}

// keyValue records key = value under table, and inside the value its
// elements and an inline table's keys.
func (s *keyScanner) keyValue(table string, e *unstable.Node) {
	path := table
	it := e.Key()
	for it.Next() {
		path = joinKey(path, string(it.Node().Data))
	}
	r := s.offsets(e.Raw)
	s.spans = append(s.spans, keySpan{path: path, line: s.line(e.Raw), start: r[0], end: r[1], scalar: scalarText(e.Value())})
	s.value(path, e.Value())
}

// value records what is inside a value: an array's elements by index, an
// inline table's keys; an array of inline tables is an array of tables.
func (s *keyScanner) value(path string, v *unstable.Node) {
	switch v.Kind {
	case unstable.Array:
		i := 0
		for it := v.Children(); it.Next(); i++ {
			elem := it.Node()
			p := fmt.Sprintf("%s[%d]", path, i)
			if elem.Kind == unstable.InlineTable || elem.Kind == unstable.Array {
				s.value(p, elem)
				continue
			}
			r := s.offsets(elem.Raw)
			s.spans = append(s.spans, keySpan{path: p, line: s.line(elem.Raw), start: r[0], end: r[1], scalar: scalarText(elem)})
		}
	case unstable.InlineTable:
		for it := v.Children(); it.Next(); {
			if kv := it.Node(); kv.Kind == unstable.KeyValue {
				s.keyValue(path, kv)
			}
		}
	}
}

func (s *keyScanner) offsets(r unstable.Range) [2]int {
	return [2]int{int(r.Offset), int(r.Offset + r.Length)}
}

func (s *keyScanner) line(r unstable.Range) int {
	return s.p.Shape(r).Start.Line
}

// scalarText is a scalar value's text as the file has it, "" for others.
func scalarText(v *unstable.Node) string {
	switch v.Kind {
	case unstable.Array, unstable.InlineTable, unstable.Invalid:
		return ""
	}
	return string(v.Data)
}

func joinKey(prefix, part string) string {
	if prefix == "" {
		return part
	}
	return prefix + "." + part
}

// lineOf is the line of the first definition of key in spans, 0 when the
// file does not set it.
func lineOf(spans []keySpan, key string) int {
	for _, s := range spans {
		if s.path == key {
			return s.line
		}
	}
	return 0
}

// enclosing is the key that holds key: "zone[2].servers" for
// "zone[2].servers[0]", "zone[2]" for "zone[2].servers", "" at the top.
// An error about a key the file does not set (servers missing from a
// [[zone]]) is placed at what holds it.
func enclosing(key string) string {
	if i := strings.LastIndexAny(key, ".["); i > 0 {
		return key[:i]
	}
	return ""
}

// indices matches an array index in a key path.
var indices = regexp.MustCompile(`\[\d+\]`)

// withoutIndices is a key as the decoder names it: "zone.servers" for
// "zone[2].servers[1]".
func withoutIndices(key string) string { return indices.ReplaceAllString(key, "") }

// fullKey is the full path of the key the decoder reports as partial
// (without indices, or only its last part for a duplicate) at line and
// col (1-based, bytes) of data: the innermost key, element or header there
// whose path ends with partial. partial is returned when none does.
func fullKey(data []byte, line, col int, partial string) string {
	offset, ok := offsetOf(data, line, col)
	if !ok {
		return partial
	}
	best := partial
	bestLen := -1
	for _, s := range scanKeys(data) {
		if offset < s.start || offset > s.end || !endsWithKey(withoutIndices(s.path), partial) {
			continue
		}
		if n := len(s.path); n > bestLen { // the innermost: the longest path
			best, bestLen = s.path, n
		}
	}
	return best
}

// endsWithKey says path ends with the whole key parts of suffix.
func endsWithKey(path, suffix string) bool {
	return path == suffix || strings.HasSuffix(path, "."+suffix)
}

// offsetOf is the byte offset of line and col (1-based).
func offsetOf(data []byte, line, col int) (int, bool) {
	off := 0
	for l := 1; l < line; l++ {
		i := strings.IndexByte(string(data[off:]), '\n')
		if i < 0 {
			return 0, false
		}
		off += i + 1
	}
	off += col - 1
	return off, off >= 0 && off <= len(data)
}

// durationKeys are the keys (without indices) whose values are durations.
var durationKeys = func() map[string]bool {
	keys := map[string]bool{}
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if name == "" || name == "-" {
				continue
			}
			ft := f.Type
			if ft.Kind() == reflect.Slice {
				ft = ft.Elem()
			}
			switch {
			case ft == reflect.TypeFor[Duration]():
				keys[prefix+name] = true
			case ft.Kind() == reflect.Struct:
				walk(ft, prefix+name+".")
			}
		}
	}
	walk(reflect.TypeFor[Config](), "")
	return keys
}()

// locateBareDuration finds the duration key whose value is the unquoted
// number tok, with its line: the decoder reports such a value without a
// key or a place.
func locateBareDuration(data []byte, tok string) (key string, line int) {
	for _, s := range scanKeys(data) {
		if s.scalar == tok && durationKeys[withoutIndices(s.path)] {
			return s.path, s.line
		}
	}
	return "", 0
}

// zoneKey matches a key of the merged zones: "zone[3].servers[0]".
var zoneKey = regexp.MustCompile(`^zone\[(\d+)\](.*)$`)

// zoneOrigin is where a zone of the merged configuration came from: the
// file (an index into Load's files) and its place among that file's zones.
type zoneOrigin struct{ file, index int }

// zoneOrigins replays the merge of the files' zones (decodeOver) to say
// where each merged zone came from.
func zoneOrigins(files []Source) []zoneOrigin {
	var zones []ZoneConfig
	var from []zoneOrigin
	for fi, f := range files {
		var c Config
		if Decode(f.Data, f.Path, &c) != nil {
			return nil // Parse took every file: unreachable
		}
		var at []int
		zones, at = mergeZones(zones, c.Zones)
		for k, i := range at {
			if i < len(from) {
				from[i] = zoneOrigin{fi, k}
			} else {
				from = append(from, zoneOrigin{fi, k})
			}
		}
	}
	return from
}

// placeZoneError places an error about merged zone key: in the file that
// set that zone, with the zone's index in that file. ok is false for a
// key that is not a zone's.
func placeZoneError(ce *Error, files []Source) bool {
	m := zoneKey.FindStringSubmatch(ce.Key)
	if m == nil {
		return false
	}
	i, _ := strconv.Atoi(m[1])
	origins := zoneOrigins(files)
	if i >= len(origins) {
		return false
	}
	o := origins[i]
	ce.File, ce.Key = files[o.file].Path, fmt.Sprintf("zone[%d]%s", o.index, m[2])
	spans := scanKeys(files[o.file].Data)
	for key := ce.Key; key != "" && ce.Line == 0; key = enclosing(key) {
		ce.Line = lineOf(spans, key)
	}
	return true
}
