package workspace

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// overlayMode is copy-on-write over the host directory: the sandbox's
// writes land in upper/, which the host sees nothing of until apply.
type overlayMode struct{ noHooks }

func (overlayMode) prepare(s *Session, scan scanFunc, _ Progress, rootMode uint32) error {
	for _, d := range []string{upperDir, workDir} {
		if err := os.Mkdir(s.path(d), 0o700); err != nil {
			return fmt.Errorf("workspace: %w", err)
		}
	}
	if err := unix.Chmod(s.path(upperDir), rootMode); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	// The manifest is taken by Background, once the sandbox runs, after a
	// moment (a short command never pays for it) and on half the CPUs (the
	// agent keeps the rest), unless someone waits for it: the sandbox
	// cannot change the lower layer.
	s.base = newBaseScan(walkOf(scan), backgroundDelay, false, s.keepBase, s.loadBase)
	return nil
}

func (overlayMode) compare(s *Session) ([]Change, error) {
	upper, err := Scan(s.UpperDir(), ScanOptions{Exclude: s.ex, Opaque: true})
	if err != nil {
		return nil, fmt.Errorf("workspace: read the sandbox's changes: %w", err)
	}
	if len(upper) == 0 {
		return nil, nil // nothing was written: no need to wait for the manifest
	}
	base, err := s.waitBase()
	if err != nil {
		return nil, err
	}
	merged, touched := MergeUpper(base, upper)
	return Compare(base, merged, touched), nil
}

func (overlayMode) changes(s *Session) ([]Change, error) { return pendingChanges(s) }

func (overlayMode) tree(s *Session) string { return s.UpperDir() }
