package workspace

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Mode is how the workspace appears inside the sandbox.
type Mode string

const (
	Bind    Mode = "bind"    // the host directory, live
	Overlay Mode = "overlay" // copy-on-write over it; the host sees nothing until apply
	Copy    Mode = "copy"    // a copy made at start; copied back after review
)

// ParseMode reads a --workspace-mode value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Bind, Overlay, Copy:
		return m, nil
	case "":
		return Bind, nil
	}
	return "", fmt.Errorf("--workspace-mode %q: use bind, overlay or copy", s)
}

// Config is a sandbox's workspace, as the user asked for it.
type Config struct {
	Mode    Mode     `json:"mode"`
	Root    string   `json:"root"` // the host workspace: absolute, symlinks resolved
	Exclude []string `json:"exclude,omitempty"`
	// Skip are absolute paths inside Root left out of manifests, copies and
	// applies (airlock's state dir, credentials the sandbox never sees).
	Skip []string `json:"skip,omitempty"`
	// Hide are patterns (see Hider) of what the sandbox never sees: never
	// copied in, shown in a diff nor applied, whenever it was made.
	Hide       []string `json:"hide,omitempty"`
	ProtectGit bool     `json:"protect_git,omitempty"`
	CacheFile  string   `json:"cache_file,omitempty"` // where hashes are remembered between runs
	// Undo (bind mode): the store keeping what the run overwrote and
	// deleted (see undo.go), its bound, and the run's ID there.
	UndoDir      string `json:"undo_dir,omitempty"`
	UndoMaxBytes int64  `json:"undo_max_bytes,omitempty"`
	UndoID       string `json:"undo_id,omitempty"`
}

// Status of a session's changes.
const (
	StatusRunning = "running" // the sandbox may still change things
	StatusPending = "pending" // changes wait for apply or discard
	StatusDone    = "done"    // nothing left to review
)

type meta struct {
	Config
	Started time.Time `json:"started"`
	Status  string    `json:"status"`
	Counts  Counts    `json:"counts"`
}

// Session is one sandbox's workspace: its files live in a directory of the
// sandbox's state dir (base.manifest, upper/, copy/, ...).
type Session struct {
	dir string
	m   meta
	ex  *Excluder

	impl    modeImpl   // what the mode does of its own
	base    *baseScan  // the start manifest
	gitDone chan error // --protect-git's snapshot, taken while the sandbox starts

	mu sync.Mutex // held while the session's directory moves (Move)

	finished []Change // bind: the change set FinishUnsaved found

	keeper    *keeper // bind with an undo store: the old content's copy
	undoReady bool    // Ready has waited for it
}

// Files in a session directory.
const (
	metaFile    = "session.json"
	baseFile    = "base.manifest"
	seenFile    = "copy.manifest"
	appliedFile = "applied.manifest"
	changesFile = "changes.json"
	upperDir    = "upper"
	workDir     = "work"
	copyDir     = "copy"
	gitDir      = "git"
	gitManifest = "git.manifest"
	gitNames    = "git.names"
)

// Progress reports copy-in progress: a phase, entries done and total (0 when
// unknown), bytes.
type Progress func(phase string, done, total, bytes int64)

// Prepare readies a workspace before the sandbox starts, in dir (created
// 0700). Copy takes the manifest now (it copies what it lists); bind and
// overlay take it in the background once the sandbox runs (Background), so
// their start does not depend on the tree's size.
func Prepare(dir string, cfg Config, progress Progress) (*Session, error) {
	s := &Session{dir: dir, m: meta{Config: cfg, Started: time.Now().UTC(), Status: StatusRunning}}
	var err error
	if s.ex, err = s.excluder(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	rootInfo, err := os.Lstat(cfg.Root)
	if err != nil || !rootInfo.IsDir() {
		return nil, fmt.Errorf("workspace %s is not a directory", cfg.Root)
	}
	// An overlay's root, or a copy's, shows its own mode: give it the workspace's.
	rootMode := uint32(rootInfo.Mode().Perm())
	// scan takes the start manifest; stop (bind mode) cuts it short once
	// the sandbox has stopped (see Partial).
	scan := func(p Progress, workers int, stop <-chan struct{}, begin func() bool) (Partial, error) {
		// One scan of a tree at a time, across processes: N sandboxes
		// started on one tree take turns, and each reads the hash cache
		// only once it has its turn, so the tree is hashed once and the
		// others only stat it.
		if cfg.CacheFile != "" {
			defer lockScan(cfg.CacheFile+".lock", scanWait, stop)()
		}
		cache := LoadCache(cfg.CacheFile)
		opt := ScanOptions{Exclude: s.ex, Cache: cache, Workers: workers}
		if p != nil {
			opt.Progress = func(n, b int64) { p("scanning", n, 0, b) }
		}
		if !begin() {
			return Partial{}, errAbandoned
		}
		w, err := ScanUntil(cfg.Root, opt, stop)
		if err != nil && err != ErrStopped {
			return Partial{}, fmt.Errorf("workspace: manifest of %s: %w", cfg.Root, err)
		}
		if err == nil && cfg.CacheFile != "" {
			cache.Save(cfg.CacheFile) // an optimisation: failing to save costs time, not correctness
		}
		return w, err
	}
	if s.impl, err = modeOf(cfg.Mode); err != nil {
		return nil, err
	}
	if err := s.impl.prepare(s, scan, progress, rootMode); err != nil {
		return nil, err
	}
	if err := s.save(); err != nil {
		return nil, err
	}
	return s, nil
}

// Ready waits for what Prepare left running beside the sandbox's start (the
// --protect-git snapshot). Call it before the sandbox runs anything.
func (s *Session) Ready() error {
	if s.keeper != nil && !s.undoReady {
		// The old content is copied before the sandbox may change it,
		// for as long as undoWait; the rest goes on beside it.
		s.undoReady = true
		s.base.start()
		select {
		case <-s.keeper.done:
		case <-time.After(undoWait):
		}
	}
	if s.gitDone == nil {
		return nil
	}
	err := <-s.gitDone
	s.gitDone = nil
	return err
}

// keepBase saves a start manifest taken while the sandbox runs, where the
// session's directory is (see Move).
func (s *Session) keepBase(m Manifest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return SaveManifest(s.path(baseFile), m)
}

// loadBase reads the kept start manifest.
func (s *Session) loadBase() (Manifest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return LoadManifest(s.path(baseFile))
}

// Background starts what Prepare left for after the start (overlay's
// manifest: the sandbox cannot change the lower layer, so taking it while
// the sandbox runs costs its start nothing). Call it once the sandbox runs.
func (s *Session) Background() { s.base.start() }

// Open loads the session kept in dir.
func Open(dir string) (*Session, error) {
	s := &Session{dir: dir}
	s.base = taken(nil, s.loadBase)
	b, err := os.ReadFile(s.path(metaFile))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &s.m); err != nil {
		return nil, fmt.Errorf("workspace: read %s: %w", s.path(metaFile), err)
	}
	if s.impl, err = modeOf(s.m.Mode); err != nil {
		return nil, err
	}
	if s.ex, err = s.excluder(); err != nil {
		return nil, err
	}
	return s, nil
}

// Exists reports whether dir holds a session.
func Exists(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, metaFile))
	return err == nil
}

func (s *Session) excluder() (*Excluder, error) {
	ex, err := NewExcluder(s.m.Exclude)
	if err != nil {
		return nil, err
	}
	if len(s.m.Hide) > 0 {
		if ex.hide, err = NewHider(s.m.Hide); err != nil {
			return nil, err
		}
	}
	for _, p := range s.m.Skip {
		if rel, ok := relTo(s.m.Root, p); ok && rel != "" {
			ex.AddPath(rel)
		}
	}
	return ex, nil
}

// relTo returns p relative to root when p lies inside it.
func relTo(root, p string) (string, bool) {
	rel, err := filepath.Rel(root, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	if rel == "." {
		return "", true
	}
	return filepath.ToSlash(rel), true
}

func (s *Session) path(name string) string { return filepath.Join(s.dir, name) }

// Move runs move, which renames the session's directory and returns where
// it now is, while nothing of the session is written (the background
// manifest waits), and goes on there. Call it from the goroutine that
// uses the session.
func (s *Session) Move(move func() (string, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	dir, err := move()
	if err != nil {
		return err
	}
	s.dir = dir
	return nil
}

func (s *Session) save() error {
	b, err := json.MarshalIndent(s.m, "", "  ")
	if err != nil {
		return err
	}
	tmp := s.path(metaFile + ".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("workspace: save session: %w", err)
	}
	return os.Rename(tmp, s.path(metaFile))
}

// Mode is the session's workspace mode.
func (s *Session) Mode() Mode { return s.m.Mode }

// Root is the host workspace.
func (s *Session) Root() string { return s.m.Root }

// Status is running, pending or done.
func (s *Session) Status() string { return s.m.Status }

// Counts are the changes found when the session was last looked at.
func (s *Session) Counts() Counts { return s.m.Counts }

// UpperDir and WorkDir are the overlay's writable layer and its scratch dir.
func (s *Session) UpperDir() string { return s.path(upperDir) }
func (s *Session) WorkDir() string  { return s.path(workDir) }

// CopyDir is what copy mode mounts at the workspace path.
func (s *Session) CopyDir() string { return s.path(copyDir) }

// ReadOnlyPaths are the paths a bind session of cfg needs read-only inside
// (--protect-git: see GitGuard), known before the session is prepared.
func ReadOnlyPaths(cfg Config) []string {
	ro, _ := GitGuard(cfg)
	return ro
}

// waitBase returns the manifest taken at start.
func (s *Session) waitBase() (Manifest, error) { return s.base.wait() }

// Report is what Finish found.
type Report struct {
	Changes  []Change  `json:"changes"`
	Restored []Change  `json:"restored,omitempty"` // --protect-git: changes undone, with why they were risky
	Defused  []Defused `json:"defused,omitempty"`  // --protect-git: git files the run made or changed, made harmless
	Notes    []string  `json:"notes,omitempty"`    // for the user: undo's warnings
}

// Finish runs after the sandbox has exited: in bind mode it restores
// protected git files; in every mode it computes and records the change set
// and its audit.
func (s *Session) Finish() (*Report, error) { return s.finish(true) }

// FinishUnsaved is Finish for a bind session whose directory is removed
// right after (a foreground run that leaves nothing behind): the same
// restore, report and audit, with nothing written to the session
// directory; Changes returns what it found.
func (s *Session) FinishUnsaved() (*Report, error) { return s.finish(s.impl.pends()) }

func (s *Session) finish(save bool) (*Report, error) {
	if err := s.Ready(); err != nil {
		return nil, err
	}
	r := &Report{}
	// overlayfs' scratch dir is of no use once the sandbox is gone, and it
	// holds a mode-0 directory that a plain recursive delete cannot enter.
	if err := removeTree(s.WorkDir()); err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	if err := s.impl.stop(s, r); err != nil {
		return nil, err
	}
	cs, err := s.compute()
	if err != nil {
		return nil, err
	}
	s.impl.reviewed(s, r, cs)
	r.Notes = append(r.Notes, s.recordUndo(cs)...)
	r.Changes = cs
	s.m.Counts = Count(cs)
	s.m.Status = StatusDone
	if s.impl.pends() && s.m.Counts.Applicable() > 0 {
		s.m.Status = StatusPending
	}
	if !save {
		s.finished = cs
		if s.finished == nil {
			s.finished = []Change{}
		}
		return r, nil
	}
	if err := s.impl.record(s, cs); err != nil {
		return nil, err
	}
	return r, s.save()
}

func writeJSONFile(p string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// Changes returns the sandbox's changes still to review, audited.
func (s *Session) Changes() ([]Change, error) { return s.impl.changes(s) }

func (s *Session) hasTree() bool {
	for _, d := range []string{upperDir, copyDir} {
		if _, err := os.Lstat(s.path(d)); err == nil {
			return true
		}
	}
	return false
}

// compute scans the sandbox's side and compares it with the start.
func (s *Session) compute() ([]Change, error) {
	cs, err := s.impl.compare(s)
	if err != nil {
		return nil, err
	}
	applied, _ := LoadManifest(s.path(appliedFile))
	kept := cs[:0]
	for _, c := range cs {
		if a, ok := applied[c.Path]; ok && matchesApplied(a, c.After) {
			continue
		}
		kept = append(kept, c)
	}
	cs = kept
	Audit(cs, s.m.Root, s.reader())
	FlagGitReferenced(s.m.Root, cs)
	return cs, nil
}

// completeBase returns the start manifest as it would be had its walk, cut
// short when the sandbox stopped, gone on over the tree the sandbox left:
// part, plus now's entry for each path the walk did not settle. Those the
// sandbox did not touch (no ctime since start) are no change, and were not
// hashed: they leave now too.
func completeBase(part Partial, now Manifest, start int64) Manifest {
	base := maps.Clone(part.Manifest)
	for p, e := range now {
		if part.Knows(p) {
			continue
		}
		if e.Type == TypeDir || e.Ctime < start {
			delete(now, p)
			continue
		}
		base[p] = e // first seen after the run: what it held before is unknown
	}
	return base
}

// deletedMark stands for "applied as a deletion" in applied.manifest.
const deletedMark = "deleted"

func matchesApplied(a Entry, after *Entry) bool {
	if after == nil {
		return a.Other == deletedMark
	}
	return a.Other != deletedMark && sameContent(a, *after) && a.Mode == after.Mode
}

// expect is the host state a change must find: what a previous apply
// wrote, else what was there at start.
func (s *Session) expect(applied Manifest) func(Change) *Entry {
	return func(c Change) *Entry {
		if a, ok := applied[c.Path]; ok {
			if a.Other == deletedMark {
				return nil
			}
			return &a
		}
		return c.Before
	}
}

// Apply carries changes into the host workspace (overlay and copy modes).
func (s *Session) Apply(changes []Change) (ApplyResult, error) {
	if !s.impl.pends() {
		return ApplyResult{}, errors.New("a bind-mode workspace is the host directory itself: its changes are already there")
	}
	src := s.impl.tree(s)
	applied, err := LoadManifest(s.path(appliedFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return ApplyResult{}, err
	}
	if applied == nil {
		applied = Manifest{}
	}
	res, aerr := Apply(s.m.Root, src, changes, s.expect(applied))
	for _, c := range res.Applied {
		if c.After == nil {
			applied[c.Path] = Entry{Path: c.Path, Other: deletedMark}
		} else {
			applied[c.Path] = *c.After
		}
	}
	if len(res.Applied) > 0 {
		if err := SaveManifest(s.path(appliedFile), applied); err != nil {
			return res, errors.Join(aerr, fmt.Errorf("workspace: record what was applied: %w", err))
		}
	}
	if err := s.Refresh(); err != nil {
		return res, errors.Join(aerr, err)
	}
	return res, aerr
}

// Refresh recounts what is left to review and records it.
func (s *Session) Refresh() error {
	cs, err := s.Changes()
	if err != nil {
		return err
	}
	s.m.Counts = Count(cs)
	if s.m.Status != StatusRunning {
		s.m.Status = StatusDone
		if s.m.Counts.Applicable() > 0 {
			s.m.Status = StatusPending
		}
	}
	return s.save()
}

// Discard throws the sandbox's changes away.
func (s *Session) Discard() error {
	for _, d := range []string{upperDir, workDir, copyDir} {
		if err := removeTree(s.path(d)); err != nil {
			return fmt.Errorf("workspace: discard: %w", err)
		}
	}
	s.m.Status = StatusDone
	s.m.Counts = Counts{}
	return s.save()
}

// removeTree deletes a tree the sandbox wrote, making read-only (or
// overlay's mode-0) directories writable on the way; it never follows links.
func removeTree(p string) error {
	err := os.RemoveAll(p)
	if err == nil {
		return nil
	}
	filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			unix.Fchmodat(unix.AT_FDCWD, q, 0o700, 0)
		} else if err != nil {
			unix.Fchmodat(unix.AT_FDCWD, q, 0o700, 0)
		}
		return nil
	})
	return os.RemoveAll(p)
}

// Release makes a session's directory removable by a plain recursive
// delete (a crashed supervisor leaves overlayfs' scratch dir behind).
func Release(dir string) error {
	return removeTree(filepath.Join(dir, workDir))
}

// PendingIn reports whether the sandbox state dir sdir holds changes still to
// review, and how many.
func PendingIn(dir string) (Counts, bool) {
	s, err := Open(dir)
	if err != nil || s.m.Status != StatusPending {
		return Counts{}, false
	}
	return s.m.Counts, true
}

// reader gives the audit and diff both sides of a change, bounded.
func (s *Session) reader() *treeReader { return &treeReader{s: s} }

type treeReader struct{ s *Session }

func (t *treeReader) Before(c Change) ([]byte, error) {
	if c.Before == nil {
		return nil, nil
	}
	return t.s.impl.before(t.s, c)
}

func (t *treeReader) After(c Change) ([]byte, error) {
	if c.After == nil {
		return nil, nil
	}
	return readBounded(t.s.impl.tree(t.s), c.Path, MaxDiffBytes)
}

// readBounded reads a regular file beneath root without following links;
// larger than limit is an error.
func readBounded(root, rel string, limit int64) ([]byte, error) {
	rfd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(rfd)
	fd, err := openBeneath(rfd, rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, errors.New("not a regular file")
	}
	if st.Size > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return b, nil
}
