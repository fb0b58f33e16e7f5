package install

import (
	"errors"
	"io/fs"
	"path"

	"github.com/towerd/towerd/cmd/towerd/internal/nodefs"
	"github.com/towerd/towerd/systemd"
)

// sweepDirs are the directories install writes into; a temp file left in
// one by a killed install is removed by the next install or uninstall.
var sweepDirs = []string{
	path.Dir(systemd.DefaultBinaryPath), systemd.UnitDir, path.Dir(ConfigPath), path.Dir(ResolvedDropIn), path.Dir(ResolvConfPath),
	// Issue 14's files; nsswitch.conf shares /etc with resolv.conf.
	path.Dir(NMDropIn), path.Dir(DhclientHook), path.Dir(DhclientResolvConf), path.Dir(DockerDaemonJSON),
	path.Dir(DockerSocketDropIn), path.Dir(systemd.ConsulTokenDropIn),
	// The control socket's group (issue 21).
	path.Dir(SysusersPath),
	// Over the package's sample towerd.toml (packaged.go).
	ConfigDropInDir,
}

// sweepTemps removes what an install or uninstall killed midway left behind
// under towerd's temp names (nodefs.TempName): temp files and links, and the
// record's directory made under a temp name (see saveManifest). They are
// towerd's by name, in directories only root may write.
func sweepTemps(fsys fileSystem, r *Report) error {
	for _, dir := range sweepDirs {
		// Temp files are made where writes go, in dir resolved as for a
		// write; a name inside it resolves dir that way, and one that leads
		// out of the root holds nothing of towerd's. Resolved so, dir is the
		// directory ReadDir lists.
		if _, err := fsys.Lstat(path.Join(dir, nodefs.TempMarker)); errors.Is(err, nodefs.ErrEscapesRoot) {
			r.warn("%s: %v", dir, err)
			continue
		}
		entries, err := fsys.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		for _, e := range entries {
			if !nodefs.IsTempName(e.Name()) {
				continue
			}
			p := path.Join(dir, e.Name())
			if info, err := fsys.Lstat(p); err == nil && info.IsDir() {
				for _, inside := range []string{path.Base(manifestPath)} {
					_ = removeUnlessDry(fsys, r, path.Join(p, inside))
				}
				if inner, err := fsys.ReadDir(p); err == nil {
					for _, i := range inner {
						if nodefs.IsTempName(i.Name()) {
							_ = removeUnlessDry(fsys, r, path.Join(p, i.Name()))
						}
					}
				}
			}
			if err := removeUnlessDry(fsys, r, p); err != nil {
				r.warn("could not remove %s, left by an install that did not finish: %v", p, err)
				continue
			}
			r.did("remove", p, "left by an install or uninstall that did not finish")
		}
	}
	return nil
}

func removeUnlessDry(fsys fileSystem, r *Report, p string) error {
	if r.DryRun {
		return nil
	}
	err := fsys.Remove(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
