package config

import (
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/towerd/towerd/resolver/boundedfile"
)

// The control subcommands must find a running towerd on the day its config
// file is broken (issue 25): an edit that does not validate must not keep
// `towerd reload` from reporting what is wrong with it, nor stats, flush or
// lookup from working. Locate reads only the two keys they need, from every
// file, never validates, and reads a file that is not TOML line by line.

// Located is where the control subcommands find a running towerd.
type Located struct {
	// AdminListen is [admin] listen ("" when the admin server is off).
	AdminListen string
	// ControlSocket is [control] socket ("" when the channel is off).
	ControlSocket string
	// Notes say which files could not be read and so did not count, one
	// line each; empty when every file was read.
	Notes []string
}

// Locate reads [admin] listen and [control] socket from path and its
// drop-ins, in the order Load reads them, over the defaults. A file that
// is missing (at an optional path), unreadable or not TOML is skipped with
// a note; values of the wrong type, and every other key, are ignored.
// Files are opened without blocking and must be regular files, so a FIFO
// put in the config's place cannot hang a control command.
func Locate(path string, optional bool) Located {
	d := DefaultConfig()
	loc := Located{AdminListen: d.Admin.Listen, ControlSocket: d.Control.Socket}
	if path == "" {
		return loc
	}
	files := []string{path}
	dropIns, err := DropIns(path)
	if err != nil {
		loc.Notes = append(loc.Notes, err.Error())
	}
	files = append(files, dropIns...)
	for i, p := range files {
		// The config files' own rule (fileRule); a file it refuses is not
		// read, its note says why, and the defaults stand.
		data, err := boundedfile.ReadFile(p, fileRule)
		if errors.Is(err, fs.ErrNotExist) && (optional || i > 0) {
			continue
		}
		if err != nil {
			loc.Notes = append(loc.Notes, err.Error())
			continue
		}
		var keys struct {
			Admin struct {
				Listen any `toml:"listen"`
			} `toml:"admin"`
			Control struct {
				Socket any `toml:"socket"`
			} `toml:"control"`
		}
		if err := toml.Unmarshal(data, &keys); err != nil {
			// An edit broke the file's syntax, most often on another line
			// than these two: scan for them line by line.
			admin, control := scanLenient(data)
			if admin != nil {
				loc.AdminListen = *admin
			}
			if control != nil {
				loc.ControlSocket = *control
			}
			loc.Notes = append(loc.Notes, fmt.Sprintf("%s is not valid TOML (%v); its [admin] listen and [control] socket lines were read one by one", p, oneLine(err)))
			continue
		}
		if s, ok := keys.Admin.Listen.(string); ok {
			loc.AdminListen = s
		}
		if s, ok := keys.Control.Socket.(string); ok {
			loc.ControlSocket = s
		}
	}
	return loc
}

// lenientLine is `key = "value"` with an optional comment after it.
var lenientLine = regexp.MustCompile(`^([A-Za-z_]+)\s*=\s*"([^"\\]*)"\s*(?:#.*)?$`)

// scanLenient finds [admin] listen and [control] socket in a file that is
// not valid TOML: a table header line sets the table, a plain
// `key = "string"` line under it the key. nil: not found.
func scanLenient(data []byte) (adminListen, controlSocket *string) {
	table := ""
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") {
			table = strings.TrimSpace(strings.Trim(line, "[]"))
			continue
		}
		m := lenientLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		switch v := m[2]; {
		case table == "admin" && m[1] == "listen":
			adminListen = &v
		case table == "control" && m[1] == "socket":
			controlSocket = &v
		}
	}
	return adminListen, controlSocket
}

// oneLine is err's text up to its first line break: go-toml's errors can
// quote the file.
func oneLine(err error) string {
	s := err.Error()
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			return s[:i]
		}
	}
	return s
}
