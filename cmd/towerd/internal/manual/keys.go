package manual

import (
	"encoding"
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// ConfigKey is one key of the configuration file, read off the config
// types' toml tags: the dotted name the manual uses ("cache.size",
// "zone[].servers" for a key of each [[zone]] table), the field's place
// in the struct and its default.
type ConfigKey struct {
	Name string
	// Path leads from the configuration to the field: each step a field
	// index, and Slice when that field is an array of tables whose element
	// the next step reads.
	Path []Step
	Type reflect.Type
	// Default is the field's value in the configuration ConfigKeys was
	// given; invalid for a key inside an array of tables (each table
	// carries its own).
	Default reflect.Value
}

// Step is one field on a ConfigKey's path.
type Step struct {
	Field int
	Slice bool
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// ConfigKeys lists the keys of cfg, a config struct (config.DefaultConfig()),
// in the order of its fields. A struct field is a table and a slice of
// structs an array of tables; a struct that reads itself from text (a
// duration) is a value.
func ConfigKeys(cfg any) []ConfigKey {
	var out []ConfigKey
	walkKeys(reflect.ValueOf(cfg), reflect.TypeOf(cfg), "", nil, &out)
	return out
}

func walkKeys(v reflect.Value, t reflect.Type, prefix string, path []Step, out *[]ConfigKey) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		step := append(path[:len(path):len(path)], Step{Field: i})
		var fv reflect.Value
		if v.IsValid() {
			fv = v.Field(i)
		}
		switch {
		case isTable(f.Type):
			walkKeys(fv, f.Type, prefix+name+".", step, out)
		case f.Type.Kind() == reflect.Slice && isTable(f.Type.Elem()):
			step[len(step)-1].Slice = true
			walkKeys(reflect.Value{}, f.Type.Elem(), prefix+name+"[].", step, out)
		default:
			*out = append(*out, ConfigKey{Name: prefix + name, Path: step, Type: f.Type, Default: fv})
		}
	}
}

func isTable(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(textUnmarshaler)
}

// ParseValue reads a TOML value as the manual writes a default (`"24h"`,
// `10000`, `["/etc/hosts"]`) into a value of type t, through the same
// decoder the configuration is loaded with.
func ParseValue(text string, t reflect.Type) (reflect.Value, error) {
	holder := reflect.New(reflect.StructOf([]reflect.StructField{
		{Name: "V", Type: t, Tag: `toml:"v"`},
	}))
	if err := toml.Unmarshal([]byte("v = "+text), holder.Interface()); err != nil {
		return reflect.Value{}, fmt.Errorf("%s is not a TOML value of type %s: %w", text, t, err)
	}
	return holder.Elem().Field(0), nil
}

// SameValue compares a default with a value read from the manual; an
// empty slice and no slice are the same default.
func SameValue(a, b reflect.Value) bool {
	if a.Kind() == reflect.Slice && b.Kind() == reflect.Slice && a.Len() == 0 && b.Len() == 0 {
		return true
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}

// configKeyName is how a key is written: "listen", "cache.size",
// "zone[].servers".
var configKeyName = regexp.MustCompile(`^[a-z_]+(\[\])?(\.[a-z_]+(\[\])?)*$`)

// KeysIn returns the config keys a table cell names: each code span that
// looks like a key; one starting with "." continues the key before it
// (`local.address[].name`, `.addresses`).
func KeysIn(cell string) []string {
	var out []string
	for _, span := range CodeSpans(cell) {
		switch {
		case strings.HasPrefix(span, ".") && len(out) > 0:
			prev := out[len(out)-1]
			out = append(out, prev[:strings.LastIndex(prev, ".")]+span)
		case configKeyName.MatchString(span):
			out = append(out, span)
		}
	}
	return out
}

var (
	sampleTable = regexp.MustCompile(`^(\[\[?)([a-z_.]+)\]\]?`)
	sampleKey   = regexp.MustCompile(`^([a-z_]+) *=`)
)

// SampleKeys returns the keys docs/towerd.toml shows, commented out or
// not, as ConfigKey names: "#size = 10000" under "[cache]" is cache.size,
// "#name" under "#[[zone]]" zone[].name. Comment lines ("# text") are
// skipped: a key is commented out by one "#" with nothing after it.
func SampleKeys(sample string) []string {
	var out []string
	table := ""
	for _, line := range strings.Split(sample, "\n") {
		line = strings.TrimPrefix(line, "#")
		if m := sampleTable.FindStringSubmatch(line); m != nil {
			table = m[2] + "."
			if m[1] == "[[" {
				table = m[2] + "[]."
			}
		} else if m := sampleKey.FindStringSubmatch(line); m != nil {
			out = append(out, table+m[1])
		}
	}
	return out
}
