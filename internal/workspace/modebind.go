package workspace

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// bindMode is the host directory itself, live: the review reports what
// the sandbox changed there (and, with --protect-git, restores and defuses
// the repository); nothing waits for apply.
type bindMode struct{}

func (bindMode) prepare(s *Session, scan scanFunc, _ Progress, _ uint32) error {
	if s.m.ProtectGit {
		// .git/config and .git/hooks are read-only inside, so the copy
		// can be made while the sandbox starts; Ready waits for it
		// before anything runs inside.
		s.gitDone = make(chan error, 1)
		go func() { s.gitDone <- s.snapshotGit() }()
	}
	// The manifest is taken while the sandbox runs, so start-up does not
	// grow with the tree. The sandbox may change a file before the scan
	// reaches it; compare catches that by ctime, which nothing inside can
	// set back. (A file deleted before the scan reaches it is missed.)
	s.base = newBaseScan(walkOf(scan), 0, true, s.keepBase, s.loadBase)
	if s.m.ProtectGit {
		if err := s.snapshotWorktree(); err != nil {
			return err
		}
	}
	if s.m.UndoDir != "" && s.m.UndoID != "" {
		max := s.m.UndoMaxBytes
		if max <= 0 {
			max = DefaultUndoBytes
		}
		k := newKeeper(UndoStore{Dir: s.m.UndoDir, MaxBytes: max}, s.m.Root)
		s.keeper = k
		b := s.base
		go func() {
			select {
			case <-b.done:
			case <-k.stop:
				close(k.done)
				return
			}
			b.mu.Lock()
			m, part, err := b.base, b.partial, b.err
			b.mu.Unlock()
			if part != nil || err != nil || m == nil {
				close(k.done) // cut short: the sandbox has stopped already
				return
			}
			k.run(m)
		}()
	}
	return nil
}

func (bindMode) compare(s *Session) ([]Change, error) {
	base, err := s.waitBase()
	if err != nil {
		return nil, err
	}
	start := s.m.Started.UnixNano()
	part := s.base.cutShort()
	opt := ScanOptions{Exclude: s.ex, Cache: CacheFrom(base)}
	if part != nil {
		// What the start manifest never reached needs a hash only if
		// the sandbox touched it.
		opt.HashIf = func(e *Entry) bool { return e.Ctime >= start || part.Knows(e.Path) }
	}
	now, err := Scan(s.m.Root, opt)
	if err != nil {
		return nil, fmt.Errorf("workspace: scan %s: %w", s.m.Root, err)
	}
	if part != nil {
		base = completeBase(*part, now, start)
	}
	touched := map[string]bool{}
	for p, e := range now {
		if b, ok := base[p]; ok && e.Type == TypeFile && (b.Mtime != e.Mtime || b.Ctime != e.Ctime || b.Ino != e.Ino) {
			touched[p] = true
		}
		if e.Type != TypeDir && e.Ctime >= start { // changed during the run
			touched[p] = true
		}
	}
	cs := Compare(base, now, touched)
	for i, c := range cs {
		// The background manifest saw this file after the sandbox had
		// changed it: what it held before is unknown, so it counts as
		// modified (and is audited as such), not as reverted.
		if c.Kind == Reverted && c.Before != nil && c.Before.Ctime >= start {
			cs[i].Kind = Modified
		}
	}
	return cs, nil
}

// stop restores the protected git files, then ends the start manifest's
// walk where it is (git is as it was: what the walk has not reached is as
// the sandbox left it).
func (bindMode) stop(s *Session, r *Report) error {
	if s.m.ProtectGit {
		restored, defused, err := s.restoreGit()
		if err != nil {
			return err
		}
		r.Restored, r.Defused = restored, defused
		r.Defused = append(r.Defused, s.reviewWorktree()...)
	}
	if s.keeper != nil {
		s.keeper.once.Do(func() { close(s.keeper.stop) })
	}
	s.base.stop()
	return nil
}

func (bindMode) reviewed(s *Session, r *Report, cs []Change) {
	if s.m.ProtectGit {
		// Git dirs and gitdir: files the run made or changed anywhere:
		// nested and bare repositories, submodules, a .git file.
		r.Defused = append(r.Defused, DefuseGit(s.m.Root, cs)...)
	}
}

func (bindMode) record(s *Session, cs []Change) error {
	return writeJSONFile(s.path(changesFile), cs)
}

// changes are the review's: kept in memory (FinishUnsaved) or in the
// session's directory, else computed now.
func (bindMode) changes(s *Session) ([]Change, error) {
	if s.finished != nil {
		return s.finished, nil
	}
	var cs []Change
	b, err := os.ReadFile(s.path(changesFile))
	if err == nil {
		err = json.Unmarshal(b, &cs)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return s.compute()
	}
	return cs, err
}

func (bindMode) pends() bool { return false }

func (bindMode) tree(s *Session) string { return s.m.Root }

// before is kept only for the git files --protect-git copied at start.
func (bindMode) before(s *Session, c Change) ([]byte, error) {
	if strings.HasPrefix(c.Path, ".git/") {
		if b, err := readBounded(s.path(gitDir), c.Path, MaxDiffBytes); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("the old content was not kept (bind mode)")
}

// walkOf is scan as a background walk: no progress to show.
func walkOf(scan scanFunc) walkFunc {
	return func(workers int, stop <-chan struct{}, begin func() bool) (Partial, error) {
		return scan(nil, workers, stop, begin)
	}
}
