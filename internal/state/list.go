package state

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// List returns all sandboxes, newest first. Status is corrected for crashes:
// "running" or "creating" with nobody holding the lock means the supervisor
// died, and it is reported as crashed. Corrupt or partial directories are
// reported as crashed with an Error rather than failing the whole listing.
func (s *Store) List() ([]Entry, error) {
	ents, err := os.ReadDir(s.sandboxes())
	if err != nil {
		return nil, fmt.Errorf("state: list: %w", err)
	}
	var ids []string
	for _, de := range ents {
		// Only real directories with well-formed ids; this also skips
		// .new-/.trash- debris and anything planted via symlink.
		if validID(de.Name()) && de.Type() == fs.ModeDir {
			ids = append(ids, de.Name())
		}
	}
	// Reading a sandbox is a few small reads: spread over the CPUs, a
	// thousand of them take a fraction of the time.
	loaded := make([]Entry, len(ids))
	found := make([]bool, len(ids))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), 8, max(1, len(ids)/64)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(ids); i = int(next.Add(1) - 1) {
				loaded[i], found[i] = s.load(ids[i])
			}
		}()
	}
	wg.Wait()
	var out []Entry
	for i, e := range loaded {
		if found[i] {
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i].Record.CreatedAt, out[j].Record.CreatedAt
		if !a.Equal(b) {
			return a.After(b)
		}
		return out[i].Record.ID < out[j].Record.ID
	})
	return out, nil
}

// load reads one sandbox; ok is false only if it vanished meanwhile.
func (s *Store) load(id string) (e Entry, ok bool) {
	dir := filepath.Join(s.sandboxes(), id)
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() {
		return Entry{}, false
	}
	e.Dir = dir
	age := time.Since(fi.ModTime())

	var problem string
	rerr := readJSON(filepath.Join(dir, recordFile), &e.Record)
	switch {
	case errors.Is(rerr, fs.ErrNotExist):
		if age > leftoverAge {
			problem = "incomplete sandbox directory (no record)"
		}
	case rerr != nil:
		problem = fmt.Sprintf("unreadable record: %v", rerr)
	}
	// The directory name is the id; never trust a path-ish id from the file.
	e.Record.ID = id
	if e.Record.CreatedAt.IsZero() {
		e.Record.CreatedAt = fi.ModTime().UTC()
	}

	serr := readJSON(filepath.Join(dir, statusFile), &e.Status)
	switch {
	case errors.Is(serr, fs.ErrNotExist):
		e.Status = Status{State: Creating}
	case serr != nil:
		e.Status = Status{}
		if problem == "" {
			problem = fmt.Sprintf("unreadable status: %v", serr)
		}
	}
	if problem != "" {
		e.Status = Status{State: Crashed, Error: problem}
		return e, true
	}

	switch e.Status.State {
	case Exited, Crashed:
		return e, true
	case Running, Creating:
	default:
		e.Status = Status{State: Crashed, Error: fmt.Sprintf("unknown state %q", e.Status.State)}
		return e, true
	}
	held, err := lockHeld(filepath.Join(dir, lockFile))
	switch {
	case err != nil:
		// Cannot tell (e.g. another user's sandbox); report what it says.
	case held:
	case rerr != nil && age <= leftoverAge:
		// A directory this young without a record is a create in progress.
	default:
		e.Status.State = Crashed
		if e.Status.Error == "" {
			e.Status.Error = "supervisor exited without recording a final status"
		}
	}
	return e, true
}

// Resolve finds one sandbox by exact id, exact name, or unique id prefix of
// at least 3 characters, in that order of precedence. It reads only the
// sandboxes it may return: an id is one directory, a name one lookup in the
// name index, a prefix the directory's names and then the matches — never
// every record, so it costs the same with ten sandboxes or ten thousand.
func (s *Store) Resolve(ref string) (Entry, error) {
	if ref == "" {
		return Entry{}, fmt.Errorf("state: resolve: empty reference: %w", ErrNotFound)
	}
	if validID(ref) {
		if e, ok := s.load(ref); ok {
			return e, nil
		}
	}
	if ValidName(ref) {
		if s.ensureIndex(false) == nil {
			if e, ok := s.byName(ref); ok {
				return e, nil
			}
		} else if e, ok := s.scanName(ref); ok {
			// No index and none can be made (a state dir this user may
			// only read): every record, as before there was one.
			return e, nil
		}
	}
	var m []Entry
	if len(ref) >= 3 && len(ref) < 12 {
		ents, err := os.ReadDir(s.sandboxes())
		if err != nil {
			return Entry{}, fmt.Errorf("state: resolve: %w", err)
		}
		for _, de := range ents {
			if !validID(de.Name()) || de.Type() != fs.ModeDir || !strings.HasPrefix(de.Name(), ref) {
				continue
			}
			if e, ok := s.load(de.Name()); ok {
				m = append(m, e)
			}
		}
	}
	switch {
	case len(m) == 0:
		return Entry{}, fmt.Errorf("state: resolve %q: %w", ref, ErrNotFound)
	case len(m) > 1:
		sort.Slice(m, func(i, j int) bool { return m[i].Record.ID < m[j].Record.ID })
		c := make([]string, len(m))
		for i, e := range m {
			c[i] = e.Record.ID
			if e.Record.Name != "" {
				c[i] += " (" + e.Record.Name + ")"
			}
		}
		return Entry{}, fmt.Errorf("state: resolve %q: %w: matches %s", ref, ErrAmbiguous, strings.Join(c, ", "))
	}
	return m[0], nil
}

// Delete removes a stopped sandbox's directory. It refuses with ErrRunning
// while the lock is held, and keeps the lock itself during removal so a
// supervisor cannot come back to life halfway.
func (s *Store) Delete(id string) error {
	if !validID(id) {
		return fmt.Errorf("state: delete %q: invalid id: %w", id, ErrNotFound)
	}
	dir := filepath.Join(s.sandboxes(), id)
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("state: delete %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("state: delete %s: %w", id, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("state: delete %s: not a directory", id)
	}
	held, fd, err := probeLock(filepath.Join(dir, lockFile))
	if err != nil {
		return fmt.Errorf("state: delete %s: check lock: %w", id, err)
	}
	if held {
		return fmt.Errorf("state: delete %s: %w", id, ErrRunning)
	}
	if fd >= 0 {
		defer syscall.Close(fd)
	}
	sock := socketPathOf(dir)
	var r Record
	_ = readJSON(filepath.Join(dir, recordFile), &r)
	if err := removeDir(dir, nil); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("state: delete %s: %w", id, ErrNotFound)
		}
		return fmt.Errorf("state: delete %s: %w", id, err)
	}
	removeFallbackSocket(dir, sock)
	s.dropName(r.Name, id)
	return nil
}
