package vm

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/vfs"
)

// shares is the host tree a VM sees through its one FUSE mount: a Router
// whose paths are the paths inside (the workspace, the kept home, binds and
// --ro/--rw paths), each a real directory resolved beneath its root, with
// the hidden places inside them shown empty. tops are the paths the guest
// binds from the mount (the others lie inside them).
func shares(spec *backend.Spec, env func(string) string) (_ *vfs.Router, tops []string, closers []func() error, err error) {
	defer func() {
		if err != nil {
			for _, c := range closers {
				c()
			}
			closers = nil
		}
	}()
	var mounts []vfs.Mount
	hidden := backend.Hidden(spec, env)
	isHidden := func(p string) bool {
		for _, h := range hidden {
			if backend.Within(p, h) {
				return true
			}
		}
		return false
	}
	add := func(inside, host string, readOnly bool) error {
		rd, err := vfs.NewRealDir(host)
		if err != nil {
			return fmt.Errorf("vm: share %s: %w", host, err)
		}
		closers = append(closers, rd.Close)
		var p vfs.Provider = rd
		if readOnly {
			p = vfs.ReadOnly(rd)
		}
		mounts = append(mounts, vfs.Mount{Path: inside, Provider: p})
		return nil
	}
	src := spec.Workspace
	if spec.WorkspaceSource != "" {
		src = spec.WorkspaceSource
	}
	if err := add(spec.Workspace, src, spec.Overlay != nil); err != nil {
		return nil, nil, nil, err
	}
	if spec.Overlay != nil {
		// Copy-on-write on the host: writes land in the upper layer, laid
		// out as overlayfs would, which the workspace review reads.
		lower := mounts[len(mounts)-1].Provider
		o, err := vfs.NewOverlay(lower, spec.Overlay.Upper)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("vm: overlay workspace: %w", err)
		}
		closers = append(closers, o.Close)
		mounts[len(mounts)-1].Provider = o
	}
	if spec.Home != "" {
		if err := add(backend.SandboxHome(spec.HostHome), spec.Home, false); err != nil {
			return nil, nil, nil, err
		}
	}
	for _, b := range spec.Binds {
		if err := add(b.Target, b.Source, b.ReadOnly); err != nil {
			return nil, nil, nil, err
		}
	}
	seen := map[string]bool{}
	for _, m := range mounts {
		seen[filepath.Clean(m.Path)] = true
	}
	for _, p := range spec.RW {
		if !seen[p] && !isHidden(p) { // --rw of a hidden place shows nothing, as on every backend
			if err := add(p, p, false); err != nil {
				return nil, nil, nil, err
			}
			seen[p] = true
		}
	}
	var roFiles []string
	for _, p := range spec.RO {
		if st, err := os.Lstat(p); err == nil && st.Mode().IsRegular() && !isHidden(p) {
			roFiles = append(roFiles, p) // a file kept read-only (--protect-git's): inside a share, protected below
			continue
		}
		if st, err := os.Stat(p); err != nil || !st.IsDir() || isHidden(p) {
			continue
		}
		if err := add(p, p, true); err != nil {
			return nil, nil, nil, err
		}
		seen[p] = true
	}
	// What is hidden stays hidden inside a share: an empty read-only directory.
	for _, h := range hidden {
		for _, m := range mounts {
			if h != m.Path && backend.Within(h, m.Path) && !seen[h] {
				mounts = append(mounts, vfs.Mount{Path: h, Provider: vfs.ReadOnly(vfs.NewMemory(0, 1))})
				seen[h] = true
				break
			}
		}
	}
	// A read-only file inside a share: the share refuses every change to
	// it (write, truncate, remove, rename over or away, a hard link).
	for _, f := range roFiles {
		best := -1
		for i, m := range mounts {
			if f != m.Path && backend.Within(f, m.Path) && (best < 0 || len(m.Path) > len(mounts[best].Path)) {
				best = i
			}
		}
		if best < 0 {
			continue
		}
		rel := vfs.Clean(strings.TrimPrefix(f, filepath.Clean(mounts[best].Path)))
		mounts[best].Provider = vfs.WithHook(mounts[best].Provider, func(e vfs.Event) error {
			if e.Op != vfs.OpOpen && (e.Path == rel || e.To == rel) {
				return fmt.Errorf("%s is read-only", f)
			}
			return nil
		})
	}
	r, err := vfs.NewRouter(mounts...)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("vm: shares: %w", err)
	}
	paths := make([]string, 0, len(mounts))
	for _, m := range mounts {
		paths = append(paths, filepath.Clean(m.Path))
	}
	sort.Strings(paths)
	for _, p := range paths {
		if len(tops) == 0 || !backend.Within(p, tops[len(tops)-1]) {
			tops = append(tops, p)
		}
	}
	return r, tops, closers, nil
}
