package state

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Handle is a sandbox owned by this process: it holds the sandbox's lifetime
// lock, whose presence is how everyone else tells a live sandbox from a crashed one.
type Handle struct {
	id      string
	dir     string
	name    string
	sock    string
	created time.Time

	mu      sync.Mutex
	lock    *os.File // nil once released or closed
	removed bool
	// unlisted is the deletion Unlist began, which Remove finishes; nil
	// while the sandbox is listed.
	unlisted chan error
	// store, until Publish, is where a Reserved sandbox will be made.
	store *Store
}

// Create allocates a sandbox: a fresh random id, a 0700 directory holding a
// record (status: creating) and the lifetime lock, taken before the
// directory becomes visible so no observer can mistake it for a crash.
// A non-empty name must match ^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$ and be unused
// by any existing sandbox (ErrNameTaken); a store-wide flock makes the check
// and the creation one atomic step, across processes too.
func (s *Store) Create(name string) (*Handle, error) {
	if name != "" && !ValidName(name) {
		return nil, fmt.Errorf("state: create: invalid name %q: must match %s", name, namePattern)
	}
	unlock, err := s.lockStore()
	if err != nil {
		return nil, err
	}
	defer unlock()

	s.cleanLeftovers()
	if name != "" {
		// The index, not a read of every record: one lookup however many
		// sandboxes the state dir holds.
		if err := s.ensureIndex(true); err != nil {
			return nil, fmt.Errorf("state: create: name index: %w", err)
		}
		if holder := s.nameHolder(name); holder != "" {
			return nil, fmt.Errorf("state: create %q: %w (by %s)", name, ErrNameTaken, holder)
		}
	}

	var id string
	for range 16 {
		c := newID()
		if _, err := os.Lstat(filepath.Join(s.sandboxes(), c)); errors.Is(err, fs.ErrNotExist) {
			id = c
			break
		}
	}
	if id == "" {
		return nil, errors.New("state: create: could not allocate a free id")
	}
	if name != "" {
		// Before the directory appears: a link to an id with no directory
		// is a miss for every reader.
		if err := s.setName(name, id); err != nil {
			return nil, fmt.Errorf("state: create: name index: %w", err)
		}
	}
	h, err := s.build(id, name)
	if err != nil {
		if name != "" && s.nameTarget(name) == id {
			_ = os.Remove(filepath.Join(s.names(), name))
		}
		return nil, fmt.Errorf("state: create: %w", err)
	}
	return h, nil
}

// build assembles the sandbox under a hidden name and renames it into place,
// so it appears complete, already locked, or not at all. Runs under the store lock.
func (s *Store) build(id, name string) (*Handle, error) {
	h := &Handle{id: id, dir: filepath.Join(s.sandboxes(), id), name: name, created: time.Now().UTC()}
	if err := s.buildInto(h, Record{}); err != nil {
		return nil, err
	}
	return h, nil
}

// buildInto is build for a handle made already (Reserve), with rec as its
// record (the handle fills in what rec leaves empty, as WriteRecord does).
func (s *Store) buildInto(h *Handle, rec Record) error {
	id, final := h.id, h.dir
	tmp := filepath.Join(s.sandboxes(), newPrefix+id)
	if !takeSpare(s.sandboxes(), tmp) {
		err := os.Mkdir(tmp, 0o700)
		if errors.Is(err, fs.ErrExist) {
			// Debris of a crashed create (only the store lock's holder
			// makes them), which cleanLeftovers has not looked for yet.
			os.RemoveAll(tmp)
			err = os.Mkdir(tmp, 0o700)
		}
		if err != nil {
			return err
		}
	}
	ok := false
	defer func() {
		if !ok {
			if h.lock != nil {
				_ = h.lock.Close()
				h.lock = nil
			}
			_ = os.RemoveAll(tmp)
		}
	}()

	// os.OpenFile sets O_CLOEXEC, so the lock never leaks into the sandbox's
	// processes; handing it on is explicit (see LockFD).
	f, err := os.OpenFile(filepath.Join(tmp, lockFile), os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("create lock: %w", err)
	}
	h.lock = f
	if err := flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fmt.Errorf("take lock: %w", err)
	}

	if h.sock == "" { // a Reserved handle has its socket path already
		if h.sock, err = s.socketFor(id, final); err != nil {
			return err
		}
	}
	if h.sock != filepath.Join(final, socketFile) {
		if err := os.WriteFile(filepath.Join(tmp, socketRedir), []byte(h.sock), 0o600); err != nil {
			return fmt.Errorf("record socket path: %w", err)
		}
	}

	rec.ID, rec.Name = id, h.name
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = h.created
	}
	if rec.PID == 0 {
		rec.PID = os.Getpid()
	}
	if err := writeJSONAtomic(tmp, recordFile, rec); err != nil {
		return fmt.Errorf("write record: %w", err)
	}
	// No status file yet: readers take its absence for Creating, and the
	// first SetStatus (running) writes it, so a start writes it once.
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	ok = true
	return nil
}

// Reserve is Create in two steps, for an unnamed sandbox whose start has
// better things to do first: it only picks a fresh id (and the socket
// path), and the directory, lock and record are made by Publish. Until
// then nothing of the sandbox is in the state dir and nobody can find it;
// Remove works on an unpublished handle too.
func (s *Store) Reserve() (*Handle, error) {
	id := newID()
	h := &Handle{id: id, dir: filepath.Join(s.sandboxes(), id), created: time.Now().UTC(), store: s}
	sock, err := s.socketFor(id, h.dir)
	if err != nil {
		return nil, fmt.Errorf("state: reserve: %w", err)
	}
	h.sock = sock
	return h, nil
}

// Published says whether the handle's directory exists (see Reserve).
func (h *Handle) Published() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.store == nil
}

// Publish makes a Reserved sandbox's directory as Create does: complete,
// locked, or not at all (an id some other sandbox took meanwhile is an
// error), with rec as its record if not nil (its ID and Name are the
// handle's; other empty fields are filled as WriteRecord does). Calling it
// again, or on a handle from Create, is a no-op.
func (h *Handle) Publish(rec *Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.store
	if s == nil {
		return nil
	}
	if h.removed {
		return errors.New("state: publish: sandbox removed")
	}
	unlock, err := s.lockStore()
	if err != nil {
		return err
	}
	defer unlock()
	s.cleanLeftovers()
	if _, err := os.Lstat(h.dir); !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("state: publish %s: the id is taken", h.id)
	}
	var r Record
	if rec != nil {
		if rec.ID != "" && rec.ID != h.id || rec.Name != "" && rec.Name != h.name {
			return fmt.Errorf("state: publish: record of %q (%q) for sandbox %s (%q)", rec.ID, rec.Name, h.id, h.name)
		}
		r = *rec
	}
	if err := s.buildInto(h, r); err != nil {
		return fmt.Errorf("state: create: %w", err)
	}
	h.store = nil
	return nil
}

// socketFor is where the control socket of sandbox id, whose directory is
// dir, goes: in dir, or in the fallback where that path is too long.
func (s *Store) socketFor(id, dir string) (string, error) {
	if sock := filepath.Join(dir, socketFile); len(sock) <= maxSocketPath {
		return sock, nil
	}
	return s.fallbackSocket(id)
}

// fallbackSocket returns <tmp>/airlock-<uid>/s/<id>.sock for state roots too
// deep for sun_path, making sure both directories are private and ours.
func (s *Store) fallbackSocket(id string) (string, error) {
	base := filepath.Join(s.tmp, fmt.Sprintf("airlock-%d", os.Geteuid()))
	dir := filepath.Join(base, "s")
	if err := secureDir(base); err != nil {
		return "", fmt.Errorf("socket fallback: %w", err)
	}
	if err := secureDir(dir); err != nil {
		return "", fmt.Errorf("socket fallback: %w", err)
	}
	sock := filepath.Join(dir, id+".sock")
	if len(sock) > maxSocketPath {
		return "", fmt.Errorf("socket fallback %s is still longer than %d bytes", sock, maxSocketPath)
	}
	return sock, nil
}

// lockStore serialises Create across goroutines and processes. Each call
// opens its own fd because flock belongs to the open file description.
func (s *Store) lockStore() (func(), error) {
	fd, err := syscall.Open(filepath.Join(s.root, storeLock), syscall.O_RDWR|syscall.O_CREAT|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state: open store lock: %w", err)
	}
	if err := flock(fd, syscall.LOCK_EX); err != nil {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("state: take store lock: %w", err)
	}
	return func() { _ = syscall.Close(fd) }, nil
}

// cleanLeftovers removes debris of crashed Creates and Deletes. Any .new-
// dir is debris, since only the store-lock holder (us) makes them; .trash-
// dirs may be mid-delete by a concurrent Delete, so only old ones go. It
// looks at most once per leftoverAge (cleanedMark's time says when it
// last did): it reads the whole sandboxes dir, which grows with the
// sandboxes kept, and a thousand of them made every start 0.5 ms slower.
// Debris waits meanwhile, which nobody sees (List skips it).
func (s *Store) cleanLeftovers() {
	mark := filepath.Join(s.root, cleanedMark)
	if fi, err := os.Stat(mark); err == nil && time.Since(fi.ModTime()) < leftoverAge {
		return
	}
	if f, err := os.OpenFile(mark, os.O_WRONLY|os.O_CREATE|syscall.O_NOFOLLOW, 0o600); err == nil {
		f.Close()
		now := time.Now()
		os.Chtimes(mark, now, now)
	}
	ents, err := os.ReadDir(s.sandboxes())
	if err != nil {
		return
	}
	for _, de := range ents {
		n := de.Name()
		p := filepath.Join(s.sandboxes(), n)
		switch {
		case strings.HasPrefix(n, newPrefix):
			_ = os.RemoveAll(p)
		case strings.HasPrefix(n, trashPrefix):
			if fi, err := de.Info(); err == nil && time.Since(fi.ModTime()) > leftoverAge {
				_ = os.RemoveAll(p)
			}
		}
	}
}

// Adopt takes over a sandbox whose lock fd this process inherited, as a
// supervisor re-exec'd into the background does. It checks that lockFD
// really is dir's lock and that it holds it, and marks it close-on-exec again
// (passing it through exec cleared that).
func Adopt(dir string, lockFD int) (*Handle, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("state: adopt: %w", err)
	}
	id := filepath.Base(dir)
	if !validID(id) {
		return nil, fmt.Errorf("state: adopt %s: not a sandbox directory", dir)
	}
	lp := filepath.Join(dir, lockFile)
	// Check with raw syscalls before wrapping in an *os.File: on failure the
	// fd stays the caller's, untouched.
	var got, want syscall.Stat_t
	if err := syscall.Fstat(lockFD, &got); err != nil {
		return nil, fmt.Errorf("state: adopt: stat fd %d: %w", lockFD, err)
	}
	if err := syscall.Lstat(lp, &want); err != nil {
		return nil, fmt.Errorf("state: adopt: stat lock: %w", err)
	}
	if got.Dev != want.Dev || got.Ino != want.Ino {
		return nil, fmt.Errorf("state: adopt: fd %d is not %s", lockFD, lp)
	}
	// On the inherited open file description this is a no-op if the lock is
	// already ours, and fails only if someone else has it.
	if err := flock(lockFD, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if err == syscall.EWOULDBLOCK {
			return nil, fmt.Errorf("state: adopt %s: lock held by another process: %w", id, ErrRunning)
		}
		return nil, fmt.Errorf("state: adopt: take lock: %w", err)
	}
	syscall.CloseOnExec(lockFD)

	h := &Handle{id: id, dir: dir, sock: socketPathOf(dir), lock: os.NewFile(uintptr(lockFD), lp)}
	var r Record
	if err := readJSON(filepath.Join(dir, recordFile), &r); err == nil {
		h.name, h.created = r.Name, r.CreatedAt
	}
	if h.created.IsZero() {
		h.created = time.Now().UTC()
	}
	return h, nil
}

// ID returns the sandbox id (12 lowercase hex chars).
func (h *Handle) ID() string { return h.id }

// Dir returns the sandbox's directory.
func (h *Handle) Dir() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dir
}

// Name returns the sandbox's name, or "" if it has none.
func (h *Handle) Name() string { return h.name }

// SocketPath returns where the supervisor should bind its control socket:
// <dir>/ctl.sock, or, when that would not fit in sun_path (107 bytes), a path
// under a private /tmp/airlock-<uid>/s that Entry.SocketPath also finds.
func (h *Handle) SocketPath() string { return h.sock }

// LogPath returns where a detached sandbox's output goes.
func (h *Handle) LogPath() string { return filepath.Join(h.dir, logsFile) }

// WriteRecord atomically replaces sandbox.json (mode 0600). Empty ID, Name,
// CreatedAt and PID are filled from the handle (PID with this process); ID
// and Name cannot be changed, as name uniqueness was checked at Create.
func (h *Handle) WriteRecord(r Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.removed || h.unlisted != nil {
		return errors.New("state: write record: sandbox removed")
	}
	if r.ID == "" {
		r.ID = h.id
	} else if r.ID != h.id {
		return fmt.Errorf("state: write record: id %q does not match sandbox %s", r.ID, h.id)
	}
	if r.Name == "" {
		r.Name = h.name
	} else if r.Name != h.name {
		return fmt.Errorf("state: write record: cannot rename sandbox %s from %q to %q", h.id, h.name, r.Name)
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = h.created
	}
	if r.PID == 0 {
		r.PID = os.Getpid()
	}
	if err := writeJSONAtomic(h.dir, recordFile, r); err != nil {
		return fmt.Errorf("state: write record: %w", err)
	}
	return nil
}

// SetStatus atomically replaces status.json.
func (h *Handle) SetStatus(st Status) error {
	switch st.State {
	case Creating, Running, Exited, Crashed:
	default:
		return fmt.Errorf("state: set status: unknown state %q", st.State)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.removed || h.unlisted != nil {
		return errors.New("state: set status: sandbox removed")
	}
	if err := writeJSONAtomic(h.dir, statusFile, st); err != nil {
		return fmt.Errorf("state: set status: %w", err)
	}
	return nil
}

// LockFD returns the fd holding the lifetime lock, or -1 once released.
// It is O_CLOEXEC, so sandbox processes never inherit it by accident.
//
// To hand the sandbox to a supervisor re-exec'd into the background, put
// LockFile() in exec.Cmd.ExtraFiles (the child sees it as fd 3+index), have
// the child call Adopt(dir, fd), and then call Close — not Release or Remove —
// in the parent: flock belongs to the open file description the two
// processes now share, so unlocking it in the parent would unlock the child too.
func (h *Handle) LockFD() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lock == nil {
		return -1
	}
	return int(h.lock.Fd())
}

// LockFile returns the lock as an *os.File for exec.Cmd.ExtraFiles (see
// LockFD), or nil once released.
func (h *Handle) LockFile() *os.File {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lock
}

// Close closes this process's copy of the lock fd without unlocking, for the
// parent after a handoff (see LockFD). Without a handoff it amounts to Release.
func (h *Handle) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lock == nil {
		return nil
	}
	err := h.lock.Close()
	h.lock = nil
	if err != nil {
		return fmt.Errorf("state: close lock: %w", err)
	}
	return nil
}

// Release drops the lifetime lock; from then on the sandbox counts as
// stopped, so its status must already be final. Calling it again is a no-op.
func (h *Handle) Release() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.releaseLocked()
}

func (h *Handle) releaseLocked() error {
	if h.lock == nil {
		return nil
	}
	// Explicit LOCK_UN, not just close: should the fd have been shared,
	// close alone would leave the sandbox looking alive.
	uerr := flock(int(h.lock.Fd()), syscall.LOCK_UN)
	cerr := h.lock.Close()
	h.lock = nil
	if err := errors.Join(uerr, cerr); err != nil {
		return fmt.Errorf("state: release lock: %w", err)
	}
	return nil
}

// Remove deletes the sandbox directory (and a fallback socket) and then
// releases the lock; for when start fails and nothing may be left behind.
// The lock is held until the directory is gone so nobody sees a crash.
// The directories named reuse, which the sandbox's code makes with
// MkdirAll (never an exclusive Mkdir), may stay, emptied, for the next
// sandbox (see retire).
func (h *Handle) Remove(reuse ...string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var rerr error
	if !h.removed {
		remove := removeDir
		if h.unlisted != nil {
			<-h.unlisted // its error: what it left, retire retries
			remove = retire
		}
		if err := remove(h.dir, reuse); err != nil && !errors.Is(err, fs.ErrNotExist) {
			rerr = fmt.Errorf("state: remove %s: %w", h.id, err)
		} else {
			h.removed = true
			removeFallbackSocket(h.dir, h.sock)
			if h.name != "" {
				(&Store{root: filepath.Dir(filepath.Dir(h.dir))}).dropName(h.name, h.id)
			}
		}
	}
	return errors.Join(rerr, h.releaseLocked())
}

// Unlist is the start of a Remove that overlaps the host's last work: the
// sandbox's directory is renamed aside at once, so that no reader finds it
// any more (as Remove's first step does), and what it holds is deleted in
// the background, but for the entries named keep, which stay usable under
// the new Dir until Remove. The lock stays held until Remove. A crash in
// between leaves a trash dir, which the next Create removes once old.
func (h *Handle) Unlist(keep ...string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.removed || h.unlisted != nil {
		return nil
	}
	trash, err := moveAside(h.dir)
	if err != nil {
		return fmt.Errorf("state: unlist %s: %w", h.id, err)
	}
	h.dir = trash // the socket path stays: it names nothing now, as after Remove
	done := make(chan error, 1)
	h.unlisted = done
	keep = append(keep, lockFile)
	go func() { done <- removeEntries(trash, keep) }()
	return nil
}

// ReadRecord reads sandbox.json back (the background supervisor's spec lives there).
func (h *Handle) ReadRecord() (Record, error) {
	var r Record
	if err := readJSON(filepath.Join(h.dir, recordFile), &r); err != nil {
		return r, fmt.Errorf("state: read record: %w", err)
	}
	return r, nil
}
