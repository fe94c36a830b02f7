package workspace

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// copyMode is a copy made at start, shown at the workspace path; its
// changes are copied back after review.
type copyMode struct{ noHooks }

// prepare takes the manifest now: it copies what it lists.
func (copyMode) prepare(s *Session, scan scanFunc, progress Progress, rootMode uint32) error {
	w, err := scan(progress, 0, nil, func() bool { return true })
	if err != nil {
		return err
	}
	s.base = taken(w.Manifest, s.loadBase)
	if err := os.Mkdir(s.path(copyDir), 0o700); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	var cp func(done, total, bytes int64)
	if progress != nil {
		cp = func(d, t, b int64) { progress("copying", d, t, b) }
	}
	seen, err := CopyIn(s.m.Root, s.path(copyDir), w.Manifest, cp)
	if err != nil {
		return fmt.Errorf("workspace: copy: %w", err)
	}
	if err := unix.Chmod(s.path(copyDir), rootMode); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	if err := SaveManifest(s.path(baseFile), w.Manifest); err != nil {
		return fmt.Errorf("workspace: save manifest: %w", err)
	}
	if err := SaveManifest(s.path(seenFile), seen); err != nil {
		return fmt.Errorf("workspace: save manifest: %w", err)
	}
	return nil
}

func (copyMode) compare(s *Session) ([]Change, error) {
	base, err := s.waitBase()
	if err != nil {
		return nil, err
	}
	seen, err := LoadManifest(s.path(seenFile))
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	now, err := Scan(s.CopyDir(), ScanOptions{Exclude: s.ex, Cache: CacheFrom(seen)})
	if err != nil {
		return nil, fmt.Errorf("workspace: read the sandbox's copy: %w", err)
	}
	touched := map[string]bool{}
	for p, e := range now {
		if c, ok := seen[p]; !ok || c.Ino != e.Ino || c.Mtime != e.Mtime || c.Ctime != e.Ctime {
			touched[p] = true
		}
	}
	return Compare(base, now, touched), nil
}

func (copyMode) changes(s *Session) ([]Change, error) { return pendingChanges(s) }

func (copyMode) tree(s *Session) string { return s.CopyDir() }
