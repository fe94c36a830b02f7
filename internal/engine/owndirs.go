package engine

import (
	"fmt"
	"path/filepath"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/ca"
	"github.com/airlock-dev/airlock/internal/config"
)

// ownDirsOutOfReach refuses a spec whose sandbox could write, in place, a
// directory holding airlock's own config or state. Hidden inside, such a
// dir is still the sandbox's to take over: it renames a parent away (the
// mask over the dir moves with it) or, where the dir does not exist yet,
// makes it, and writes a config that later runs obey (policy, secrets and
// where they go) or state records they trust. A workspace in bind mode,
// the kept home and --rw paths are written in place; overlay and copy
// workspaces are not (what is hidden is never applied).
func ownDirsOutOfReach(b *backend.Spec, mode string) error {
	var own []string
	if d, err := ca.Dir(); err == nil { // $AIRLOCK_CONFIG_DIR, else the config dir
		own = append(own, d)
	}
	if d, err := config.Dir(); err == nil {
		own = append(own, d)
	}
	own = append(own, b.StateRoot)
	type place struct{ what, path string }
	var writable []place
	if mode == config.WorkspaceBind {
		src := b.Workspace
		if b.WorkspaceSource != "" {
			src = b.WorkspaceSource
		}
		writable = append(writable, place{"the workspace", src})
	}
	if b.Home != "" {
		writable = append(writable, place{"--home", b.Home})
	}
	for _, p := range b.RW {
		writable = append(writable, place{"--rw", p})
	}
	for _, w := range writable {
		dir := resolved(w.path)
		for _, o := range own {
			if o == "" || !filepath.IsAbs(o) {
				continue
			}
			if backend.Within(resolved(o), dir) {
				hint := "use a directory that does not hold it"
				if w.what == "the workspace" {
					hint += ", or --workspace-mode overlay (the sandbox's changes are reviewed, and what is hidden is never applied)"
				}
				return fmt.Errorf("%s %s holds airlock's own %s: the sandbox could replace it there and change what later sandboxes are allowed; %s", w.what, w.path, o, hint)
			}
		}
	}
	return nil
}

// resolved is p with the symlinks of its longest existing prefix resolved,
// so that a dir and a link to it compare equal whether or not p exists yet.
func resolved(p string) string {
	p = filepath.Clean(p)
	rest := ""
	for {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return filepath.Join(p, rest)
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}
