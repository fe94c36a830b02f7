package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Bounds on what --protect-git snapshots.
const (
	maxGitEntries = 2000
	maxGitBytes   = 32 << 20
)

// gitSubset is the manifest of what --protect-git guards: .git/config and
// .git/hooks (with the .git directory itself, so a copy can be made).
func gitSubset(root string) (Manifest, error) {
	m := Manifest{}
	gitPath := filepath.Join(root, ".git")
	st, err := os.Lstat(gitPath)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && !st.IsDir()) {
		return m, nil // no repository here, or a worktree whose config lives elsewhere
	}
	if err != nil {
		return nil, err
	}
	top, err := Scan(root, ScanOptions{Exclude: onlyGitTop()})
	if err != nil {
		return nil, err
	}
	for _, p := range []string{".git", ".git/config", ".git/hooks"} {
		if e, ok := top[p]; ok {
			m[p] = e
		}
	}
	if h, ok := m[".git/hooks"]; ok && h.Type == TypeDir {
		hooks, err := Scan(filepath.Join(root, ".git/hooks"), ScanOptions{MaxEntries: maxGitEntries})
		if err != nil {
			return nil, err
		}
		var total int64
		for p, e := range hooks {
			e.Path = ".git/hooks/" + p
			m[e.Path] = e
			total += e.Size
		}
		if total > maxGitBytes {
			return nil, fmt.Errorf(".git/hooks holds more than %d MiB", maxGitBytes>>20)
		}
	}
	if c, ok := m[".git/config"]; ok && c.Size > maxGitBytes {
		return nil, fmt.Errorf(".git/config is larger than %d MiB", maxGitBytes>>20)
	}
	return m, nil
}

// onlyGitTop excludes everything but .git and its config and hooks, so the
// subset scan reads no more than that.
func onlyGitTop() *Excluder {
	return &Excluder{filter: func(rel string) bool {
		switch rel {
		case ".git", ".git/config", ".git/hooks":
			return false
		}
		return true
	}}
}

// snapshotGit keeps a copy of .git/config and .git/hooks in the session.
func (s *Session) snapshotGit() error {
	m, err := gitSubset(s.m.Root)
	if err != nil {
		return fmt.Errorf("workspace: --protect-git: %w (pass --protect-git=false to go without)", err)
	}
	if len(m) == 0 {
		return nil // no repository: restoreGit removes whatever .git the run made
	}
	if err := os.Mkdir(s.path(gitDir), 0o700); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	if _, err := CopyIn(s.m.Root, s.path(gitDir), m, nil); err != nil {
		return fmt.Errorf("workspace: --protect-git: snapshot: %w", err)
	}
	return SaveManifest(s.path(gitManifest), m)
}

// restoreGit puts .git/config and .git/hooks back as they were at start and
// returns what the sandbox had changed there, audited.
func (s *Session) restoreGit() ([]Change, error) {
	cur, err := gitSubset(s.m.Root)
	if err != nil {
		return nil, fmt.Errorf("workspace: --protect-git: read .git after the run: %w", err)
	}
	var snap Manifest
	if _, err := os.Lstat(s.path(gitManifest)); err == nil {
		if snap, err = LoadManifest(s.path(gitManifest)); err != nil {
			return nil, fmt.Errorf("workspace: --protect-git: %w", err)
		}
	} else if len(cur) == 0 {
		return nil, nil
	} else if snap, err = s.freshGit(); err != nil {
		// No repository at start: the run made one (git init). It is kept —
		// it may hold the run's commits — with the config and hooks of a
		// fresh repository, so nothing it set up runs on the host.
		return nil, fmt.Errorf("workspace: --protect-git: %w", err)
	}
	forward := Compare(snap, cur, nil)
	if len(forward) == 0 {
		return nil, nil
	}
	Audit(forward, s.m.Root, &gitReader{s})
	back := Compare(cur, snap, nil)
	if _, err := Apply(s.m.Root, s.path(gitDir), back, func(c Change) *Entry { return c.Before }); err != nil {
		return forward, fmt.Errorf("workspace: --protect-git: restore .git: %w", err)
	}
	return forward, nil
}

// freshConfig is what git init writes on Linux.
const freshConfig = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n"

// freshGit puts a fresh repository's config and (empty) hooks in the
// session's git snapshot dir and returns its manifest: what a .git the run
// created is restored to.
func (s *Session) freshGit() (Manifest, error) {
	dir := filepath.Join(s.path(gitDir), ".git")
	if err := os.MkdirAll(filepath.Join(dir, "hooks"), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "config"), []byte(freshConfig), 0o644); err != nil {
		return nil, err
	}
	return gitSubset(s.path(gitDir))
}

type gitReader struct{ s *Session }

func (g *gitReader) Before(c Change) ([]byte, error) {
	return readBounded(g.s.path(gitDir), c.Path, MaxDiffBytes)
}

func (g *gitReader) After(c Change) ([]byte, error) {
	return readBounded(g.s.m.Root, c.Path, MaxDiffBytes)
}
