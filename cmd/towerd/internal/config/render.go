package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// File is a towerd.toml about to be written: comment lines on top, keys
// grouped by table, then the zones. It is the one place that writes towerd's
// TOML, so `towerd install` and `towerd import-dnsmasq` cannot drift from
// the keys Load reads (issue 16).
type File struct {
	// Header are comment lines at the top, without the leading "# "; ""
	// writes a bare "#".
	Header []string
	// Keys are written in order within their table; tables follow the
	// order of Config's fields.
	Keys []Key
	// Zones become [[zone]] tables after the keys.
	Zones []Zone
	// Addresses become [[local.address]] tables after the zones.
	Addresses []Address
}

// Address is one [[local.address]] table.
type Address struct {
	Name      string
	Addresses []string
	// Comment, when set, follows "[[local.address]]" on its line.
	Comment string
}

// Key is one "name = value" line.
type Key struct {
	// Table is "" for a top-level key, else "cache", "serve_stale", ...
	Table string
	// Name is the key inside its table, e.g. "size".
	Name string
	// Value is a string, int, bool, []string or time.Duration.
	Value any
	// Comment, when set, follows the value on its line: where it came from.
	Comment string
}

// Zone is one [[zone]] table.
type Zone struct {
	// Name is the zone, e.g. "." or "consul.".
	Name string
	// Servers are host:port addresses, written in order.
	Servers []string
	// Lead are comment lines written before the table.
	Lead []string
	// Comment, when set, follows "[[zone]]" on its line.
	Comment string
}

// tableOrder is the order tables appear in, that of Config's fields, so a
// rendered file reads like docs/towerd.toml and the manual's key reference.
var tableOrder = []string{"", "cache", "serve_stale", "upstream", "tcp", "search", "local", "admin", "control", "consul"}

// Render writes f as TOML that Load reads back. It panics on a value of a
// type it cannot write: that is a programming error, not input.
func (f File) Render() []byte {
	var b strings.Builder
	for _, line := range f.Header {
		writeComment(&b, line)
	}
	tables := slices.Clone(tableOrder)
	for _, k := range f.Keys {
		if !slices.Contains(tables, k.Table) {
			tables = append(tables, k.Table)
		}
	}
	for _, table := range tables {
		var keys []Key
		width := 0
		for _, k := range f.Keys {
			if k.Table == table {
				keys = append(keys, k)
				width = max(width, len(k.Name))
			}
		}
		if len(keys) == 0 {
			continue
		}
		b.WriteString("\n")
		if table != "" {
			fmt.Fprintf(&b, "[%s]\n", table)
		}
		for _, k := range keys {
			fmt.Fprintf(&b, "%-*s = %s", width, k.Name, tomlValue(k.Value))
			if k.Comment != "" {
				b.WriteString("  # " + k.Comment)
			}
			b.WriteString("\n")
		}
	}
	for _, z := range f.Zones {
		b.WriteString("\n")
		for _, line := range z.Lead {
			writeComment(&b, line)
		}
		b.WriteString("[[zone]]")
		if z.Comment != "" {
			b.WriteString("  # " + z.Comment)
		}
		fmt.Fprintf(&b, "\nname    = %s\nservers = %s\n", tomlString(z.Name), tomlValue(z.Servers))
	}
	for _, a := range f.Addresses {
		b.WriteString("\n[[local.address]]")
		if a.Comment != "" {
			b.WriteString("  # " + a.Comment)
		}
		fmt.Fprintf(&b, "\nname      = %s\naddresses = %s\n", tomlString(a.Name), tomlValue(a.Addresses))
	}
	return []byte(b.String())
}

func writeComment(b *strings.Builder, line string) {
	if line == "" {
		b.WriteString("#\n")
		return
	}
	b.WriteString("# " + line + "\n")
}

// tomlValue writes one value in TOML syntax; durations as Go duration
// strings, which Duration.UnmarshalText reads.
func tomlValue(v any) string {
	switch v := v.(type) {
	case string:
		return tomlString(v)
	case int:
		return strconv.Itoa(v)
	case bool:
		return strconv.FormatBool(v)
	case time.Duration:
		return tomlString(v.String())
	case Duration:
		return tomlString(v.String())
	case []string:
		quoted := make([]string, len(v))
		for i, s := range v {
			quoted[i] = tomlString(s)
		}
		return "[" + strings.Join(quoted, ", ") + "]"
	}
	panic(fmt.Sprintf("config: cannot render %T as TOML", v))
}

// tomlString quotes s as a TOML basic string. Go's strconv.Quote is close
// but not the same syntax: TOML has no \x or \a escapes.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			b.WriteString(`\uFFFD`) // invalid UTF-8: TOML files are UTF-8
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// InstallFile is the towerd.toml `towerd install` writes where there is
// none: towerd on listen, zone "." forwarding to servers, which install
// found in source.
func InstallFile(listen string, servers []string, source string) File {
	return InstallSettings{Listen: []string{listen}, Servers: servers, Source: source}.File()
}

// InstallSettings are what `towerd install` decided for towerd.toml.
type InstallSettings struct {
	// Listen: towerd's addresses, the first the one resolv.conf names.
	Listen []string
	// Allow: the allow list; nil keeps the default.
	Allow []string
	// ResolvConf: the file zone "." follows (resolv_conf); Servers is then
	// empty.
	ResolvConf string
	// Servers: zone "."'s servers, copied or pinned; Source says from where.
	Servers []string
	Source  string
	// DropIn: the file is towerd.d/00-install.toml, read over a
	// towerd.toml that sets nothing (the package's sample).
	DropIn bool
}

// File renders the settings as install's towerd.toml.
func (s InstallSettings) File() File {
	f := File{
		Header: []string{
			"Written by `towerd install`; edit freely. `towerd uninstall` removes this",
			"file only while it is unchanged. Every key and its default: towerd.toml(5),",
			`docs/configuration.md. Zone "consul." keeps its default, 127.0.0.1:8600.`,
			"Under towerd.socket the sockets come from systemd; listen still tells",
			"towerd which addresses are its own, so it never forwards to itself.",
		},
	}
	if s.DropIn {
		f.Header = []string{
			"Written by `towerd install`: what it found on this node. It is read over",
			DefaultPath + ", the package's sample, which sets nothing and",
			"stays dpkg's (no question at upgrades). Edit freely, or override a key in a",
			"later file of this directory; `towerd uninstall` removes this file only",
			"while it is unchanged. Every key and its default: towerd.toml(5).",
			"Under towerd.socket the sockets come from systemd; listen still tells",
			"towerd which addresses are its own, so it never forwards to itself.",
		}
	}
	f.Keys, f.Zones = s.keysAndZones()
	return f
}

// keysAndZones are the keys and zones of the settings, for install's own
// file and for an imported one that install completes (Complete).
func (s InstallSettings) keysAndZones() ([]Key, []Zone) {
	keys := []Key{{Name: "listen", Value: s.Listen}}
	if s.Allow != nil {
		keys = append(keys, Key{Name: "allow", Value: s.Allow})
	}
	if s.ResolvConf != "" {
		keys = append(keys, Key{Name: "resolv_conf", Value: s.ResolvConf,
			Comment: "zone \".\" follows the servers written here, kept current by the node's DHCP client"})
		return keys, nil
	}
	z := Zone{Name: ".", Servers: s.Servers}
	if s.Source != "" {
		z.Lead = []string{"The servers " + s.Source + " named at install time."}
	}
	return keys, []Zone{z}
}

// Complete adds to an imported file what install decided and the import
// does not say: zone "."'s source when the import names no servers for it,
// and towerd's own listen addresses and allow list when install sets them
// (Docker's bridge). An imported listen or allow key is kept, with install's
// addresses added.
func (s InstallSettings) Complete(f File) File {
	hasRoot := slices.ContainsFunc(f.Zones, func(z Zone) bool { return z.Name == "." && len(z.Servers) > 0 })
	keys, zones := s.keysAndZones()
	for _, k := range keys {
		switch {
		case k.Name == "resolv_conf" && hasRoot:
			continue
		case k.Name == "listen" || k.Name == "allow":
			i := slices.IndexFunc(f.Keys, func(x Key) bool { return x.Table == "" && x.Name == k.Name })
			if i < 0 {
				f.Keys = append(f.Keys, k)
				continue
			}
			merged := slices.Clone(f.Keys[i].Value.([]string))
			for _, v := range k.Value.([]string) {
				if !slices.Contains(merged, v) {
					merged = append(merged, v)
				}
			}
			f.Keys[i].Value = merged
			continue
		}
		f.Keys = append(f.Keys, k)
	}
	if !hasRoot {
		f.Zones = append(zones, f.Zones...)
	}
	return f
}
