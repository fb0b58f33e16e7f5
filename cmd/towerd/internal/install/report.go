package install

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
)

// Change is one decision install or uninstall made about one path.
type Change struct {
	// Action is what happened: "wrote", "created", "backed up", "restored",
	// "removed"; in a dry run "would write" and so on; "unchanged", "kept"
	// and "skipped" when nothing was (or would be) done; "found" for what
	// install detected (Path then names the program, e.g. "dnsmasq").
	Action string
	Path   string
	// Detail says why, or what the content is.
	Detail string
}

// Report is everything install or uninstall decided, in order.
type Report struct {
	DryRun  bool
	Changes []Change
	// Warnings are things left alone that an operator should look at.
	Warnings []string
	// Next are the commands the operator runs next (install never runs
	// systemctl itself: it only edits files, so it works on a root
	// directory and on a machine whose PID 1 is not systemd).
	Next []string
	// Outage says how lookups on the node fare between install and the
	// last of Next; "" when install changed nothing they use.
	Outage string
	// Undo are the commands that take the node back to what it was
	// before install.
	Undo []string
}

// Changed reports whether anything was (or, in a dry run, would be) changed.
func (r *Report) Changed() bool {
	for _, c := range r.Changes {
		switch c.Action {
		case "unchanged", "kept", "skipped", "found":
		default:
			return true
		}
	}
	return false
}

// Print writes the report for people: one line per decision on out,
// warnings on errOut. failed says install or uninstall stopped with an
// error, which the caller prints: "nothing to change" is then not said.
func (r *Report) Print(out, errOut io.Writer, failed bool) {
	for _, c := range r.Changes {
		line := fmt.Sprintf("%-15s %s", c.Action, c.Path)
		if c.Detail != "" {
			line += ": " + c.Detail
		}
		fmt.Fprintln(out, line)
	}
	if !r.Changed() && !failed {
		fmt.Fprintln(out, "nothing to change")
	}
	for _, w := range r.Warnings {
		fmt.Fprintln(errOut, "warning:", w)
	}
	for _, list := range []struct {
		title string
		lines []string
	}{{"next:", r.Next}, {"undo:", r.Undo}} {
		if len(list.lines) > 0 {
			fmt.Fprintln(out, list.title)
			for _, n := range list.lines {
				fmt.Fprintln(out, "  "+n)
			}
		}
	}
	if r.Outage != "" {
		fmt.Fprintln(out, "meanwhile: "+r.Outage)
	}
}

// change is the last decision about name, or nil.
func (r *Report) change(name string) *Change {
	for i := len(r.Changes) - 1; i >= 0; i-- {
		if r.Changes[i].Path == name {
			return &r.Changes[i]
		}
	}
	return nil
}

// pastTense of the verbs a change uses; a dry run says "would <verb>".
var pastTense = map[string]string{
	"write":   "wrote",
	"create":  "created",
	"back up": "backed up",
	"restore": "restored",
	"remove":  "removed",
}

func (r *Report) did(verb, name, detail string) {
	action := "would " + verb
	if !r.DryRun {
		action = pastTense[verb]
	}
	r.Changes = append(r.Changes, Change{Action: action, Path: name, Detail: detail})
}

func (r *Report) same(action, name, detail string) {
	r.Changes = append(r.Changes, Change{Action: action, Path: name, Detail: detail})
}

func (r *Report) warn(format string, args ...any) {
	r.Warnings = append(r.Warnings, fmt.Sprintf(format, args...))
}

// manifestPath records what install did, so uninstall undoes exactly that
// and nothing else: directories it created, files it wrote (with a hash,
// so a file changed since is recognised and left alone) and where it kept
// the files it replaced.
const manifestPath = "/etc/towerd/install-state.json"

type manifest struct {
	Files []fileRecord `json:"files"`
	// Dirs were created by install, parents first.
	Dirs []string `json:"dirs"`
}

type fileRecord struct {
	Path string `json:"path"`
	// Sum is snapshot.sum of what install wrote.
	Sum string `json:"sum"`
	// Backup holds the file install replaced; empty when there was none.
	Backup string `json:"backup,omitempty"`
	// Pending is set while install is about to change the file: recorded
	// before the backup and the write, cleared after. An install killed in
	// between leaves it set, and the next install or uninstall knows that
	// a file that is not Sum was never replaced, rather than changed since.
	Pending bool `json:"pending,omitempty"`
	// Seed: a starting copy of a file towerd's own hook keeps current
	// (PlannedFile.Seed). Uninstall removes it whatever it holds by then:
	// the name is towerd's, and only the hook rewrites it.
	Seed bool `json:"seed,omitempty"`
	// Config is what install rendered into towerd.toml (or its drop-in),
	// so a later install can render it again and lose nothing.
	Config *configRecord `json:"config,omitempty"`
}

// configRecord is what install put into towerd.toml: its own settings
// and, with --from-dnsmasq, the import they complete (issue 25 item 1).
type configRecord struct {
	Settings config.InstallSettings `json:"settings"`
	Import   *Import                `json:"import,omitempty"`
}

func (m *manifest) file(name string) *fileRecord {
	for i := range m.Files {
		if m.Files[i].Path == name {
			return &m.Files[i]
		}
	}
	return nil
}

func (m *manifest) setFile(rec fileRecord) {
	if old := m.file(rec.Path); old != nil {
		*old = rec
		return
	}
	m.Files = append(m.Files, rec)
}

func (m *manifest) encode() []byte {
	b, _ := json.MarshalIndent(m, "", "  ") // plain strings: cannot fail
	return append(b, '\n')
}

// removeFile drops name's record.
func (m *manifest) removeFile(name string) {
	m.Files = slices.DeleteFunc(m.Files, func(f fileRecord) bool { return f.Path == name })
}

// loadManifest returns the recorded install, or nil when there is none. A
// symlink at the record's name is refused: the record decides what
// uninstall removes, and nobody but install writes it.
func loadManifest(fsys fileSystem) (*manifest, error) {
	cur, err := look(fsys, manifestPath)
	if err != nil {
		return nil, err
	}
	if !cur.exists {
		return nil, nil
	}
	if cur.isLink() {
		return nil, fmt.Errorf("%s is a symlink (to %s), not the record install writes: refusing it; remove it", manifestPath, cur.link)
	}
	m := &manifest{}
	if err := json.Unmarshal(cur.data, m); err != nil {
		return nil, fmt.Errorf("%s is damaged (%v): fix or remove it by hand", manifestPath, err)
	}
	return m, nil
}

// ensureDir creates dir and any missing parents with mode 0755, recording
// each one (and saving the record with save, when given) before it is
// made, so uninstall removes exactly those. In a dry run it only reports.
func ensureDir(fsys fileSystem, m *manifest, r *Report, planned map[string]bool, dir string, save func() error) error {
	var missing []string
	for d := dir; d != "/" && d != "."; d = path.Dir(d) {
		if _, err := fsys.Lstat(d); err == nil || planned[d] {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
	}
	slices.Reverse(missing)
	for _, d := range missing {
		if !slices.Contains(m.Dirs, d) {
			m.Dirs = append(m.Dirs, d)
		}
		if r.DryRun {
			planned[d] = true
		} else {
			if save != nil {
				if err := save(); err != nil {
					return err
				}
			}
			if err := fsys.Mkdir(d, 0o755); err != nil {
				return fmt.Errorf("creating %s: %w", d, err)
			}
		}
		r.did("create", d+"/", "")
	}
	return nil
}
