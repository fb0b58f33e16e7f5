package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// Error is a configuration problem tied to a key and, when known, a line.
type Error struct {
	File string
	Line int
	Key  string
	Msg  string
}

// Error formats "file:line: key \"k\": msg", leaving out what is unknown.
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	}
	if e.Key != "" {
		fmt.Fprintf(&b, "key %q: ", e.Key)
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Load reads path over the defaults. A missing file is fine when
// optional (the default path): towerd then runs on built-in defaults.
func Load(path string, optional bool) (Config, error) {
	cfg := DefaultConfig()
	if path == "" {
		return cfg, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && optional {
		return cfg, nil
	}
	if err != nil {
		return cfg, fmt.Errorf("reading config: %w", err)
	}
	if err := Decode(data, path, &cfg); err != nil {
		return cfg, err
	}
	if err := cfg.Validate(); err != nil {
		var ce *Error
		if errors.As(err, &ce) {
			ce.File = path
			ce.Line = lineOfKey(data, ce.Key)
		}
		return cfg, err
	}
	return cfg, nil
}

// Decode reads TOML data over cfg, rejecting unknown keys; path only names
// the source in errors. It does not validate: callers run Validate.
func Decode(data []byte, path string, cfg *Config) error {
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(cfg)
	if err == nil {
		return nil
	}
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) && len(strict.Errors) > 0 {
		e := strict.Errors[0]
		line, _ := e.Position()
		return &Error{File: path, Line: line, Key: strings.Join(e.Key(), "."),
			Msg: "unknown key (see the README's configuration table)"}
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		line, _ := de.Position()
		return &Error{File: path, Line: line, Key: strings.Join(de.Key(), "."),
			Msg: strings.TrimPrefix(de.Error(), "toml: ")}
	}
	return &Error{File: path, Msg: err.Error()}
}

// lineOfKey finds the line of "leaf =" for a dotted key, best effort, so
// validation errors point at the line like parse errors do. Only lines of
// the key's own table count: "admin.listen" must not point at the top-level
// "listen".
func lineOfKey(data []byte, key string) int {
	if key == "" {
		return 0
	}
	parts := strings.Split(key, ".")
	leaf := regexp.QuoteMeta(strings.TrimSuffix(parts[len(parts)-1], "]"))
	if i := strings.Index(leaf, `\[`); i >= 0 {
		leaf = leaf[:i]
	}
	table := ""
	if len(parts) > 1 {
		table, _, _ = strings.Cut(parts[0], "[")
	}
	re := regexp.MustCompile(`^\s*` + leaf + `\s*=`)
	current := ""
	for i, line := range strings.Split(string(data), "\n") {
		if m := tableHeader.FindStringSubmatch(line); m != nil {
			current = m[1]
			continue
		}
		if current == table && re.MatchString(line) {
			return i + 1
		}
	}
	return 0
}

// tableHeader matches "[cache]" and "[[zone]]" lines.
var tableHeader = regexp.MustCompile(`^\s*\[\[?\s*([A-Za-z0-9_-]+)\s*\]\]?`)

func keyErr(key, format string, args ...any) error {
	return &Error{Key: key, Msg: fmt.Sprintf(format, args...)}
}
