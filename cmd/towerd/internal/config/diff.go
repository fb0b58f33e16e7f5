package config

import (
	"encoding"
	"reflect"
	"strings"
)

// Changed lists the keys whose values differ between a and b, in the
// file's order, as dotted TOML keys ("upstream.timeout"); a table of
// tables such as [[zone]] is one key ("zone"). A reload reports them
// (issue 15: `towerd reload` says what changed).
func Changed(a, b Config) []string {
	var keys []string
	changed(reflect.ValueOf(a), reflect.ValueOf(b), "", &keys)
	return keys
}

func changed(a, b reflect.Value, prefix string, keys *[]string) {
	t := a.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "" || name == "-" {
			continue
		}
		key := prefix + name
		fa, fb := a.Field(i), b.Field(i)
		// A table recurses; a struct that reads itself from text (a
		// Duration, an OptionalDuration) and every other value compare
		// whole.
		if f.Type.Kind() == reflect.Struct && !reflect.PointerTo(f.Type).Implements(reflect.TypeFor[encoding.TextUnmarshaler]()) {
			changed(fa, fb, key+".", keys)
			continue
		}
		if !reflect.DeepEqual(fa.Interface(), fb.Interface()) {
			*keys = append(*keys, key)
		}
	}
}
