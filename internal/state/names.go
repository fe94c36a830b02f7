package state

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// The name index: ROOT/names/NAME is a symlink to the id of the sandbox
// that has that name, so that finding a sandbox by name (airlock exec NAME)
// and checking a name is free (Create) read one sandbox, not all of them
// however many the state dir holds. The record stays the truth: a link is
// trusted only when the sandbox it names exists and its record carries that
// name, so a link left by a crash is harmless and is replaced.
//
// The index is complete once ROOT/names/.indexed exists; state dirs made
// before there was an index get one built from their records, once, under
// the store lock.
const (
	namesDir      = "names"
	indexedMarker = ".indexed" // never a valid name (names start alphanumeric)
)

func (s *Store) names() string { return filepath.Join(s.root, namesDir) }

// nameTarget returns the id the index gives for name ("" if none).
func (s *Store) nameTarget(name string) string {
	id, err := os.Readlink(filepath.Join(s.names(), name))
	if err != nil || !validID(id) {
		return ""
	}
	return id
}

// byName finds the sandbox the index gives for name, checked against its record.
func (s *Store) byName(name string) (Entry, bool) {
	id := s.nameTarget(name)
	if id == "" {
		return Entry{}, false
	}
	e, ok := s.load(id)
	if !ok || e.Record.Name != name {
		return Entry{}, false
	}
	return e, true
}

// scanName finds the sandbox named name by reading every record.
func (s *Store) scanName(name string) (Entry, bool) {
	all, err := s.List()
	if err != nil {
		return Entry{}, false
	}
	for _, e := range all {
		if e.Record.Name == name {
			return e, true
		}
	}
	return Entry{}, false
}

// nameHolder returns the id of the sandbox that has name, or "": one
// directory and one record read. Runs under the store lock.
func (s *Store) nameHolder(name string) string {
	id := s.nameTarget(name)
	if id == "" {
		return ""
	}
	var r Record
	if readJSON(filepath.Join(s.sandboxes(), id, recordFile), &r) != nil || r.Name != name {
		return ""
	}
	return id
}

// setName points name at id, replacing a stale link atomically. Runs under
// the store lock.
func (s *Store) setName(name, id string) error {
	if err := os.MkdirAll(s.names(), 0o700); err != nil {
		return err
	}
	tmp := filepath.Join(s.names(), ".tmp-"+randHex(6))
	if err := os.Symlink(id, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(s.names(), name)); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// dropName removes name's link if it still points at id; a Create that
// reused the name meanwhile keeps its own. Takes the store lock.
func (s *Store) dropName(name, id string) {
	if name == "" || !ValidName(name) {
		return
	}
	unlock, err := s.lockStore()
	if err != nil {
		return
	}
	defer unlock()
	if s.nameTarget(name) == id {
		_ = os.Remove(filepath.Join(s.names(), name))
	}
}

// indexed reports whether the name index is complete.
func (s *Store) indexed() bool {
	_, err := os.Lstat(filepath.Join(s.names(), indexedMarker))
	return err == nil
}

// ensureIndex builds the name index from the records if it was never
// built. lockHeld says the caller holds the store lock already.
func (s *Store) ensureIndex(lockHeld bool) error {
	if s.indexed() {
		return nil
	}
	if !lockHeld {
		unlock, err := s.lockStore()
		if err != nil {
			return err
		}
		defer unlock()
		if s.indexed() {
			return nil
		}
	}
	ents, err := os.ReadDir(s.sandboxes())
	if err != nil {
		return err
	}
	for _, de := range ents {
		if !validID(de.Name()) || de.Type() != fs.ModeDir {
			continue
		}
		var r Record
		if readJSON(filepath.Join(s.sandboxes(), de.Name(), recordFile), &r) != nil || !ValidName(r.Name) {
			continue
		}
		if err := s.setName(r.Name, de.Name()); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(s.names(), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(s.names(), indexedMarker), os.O_CREATE|os.O_WRONLY|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}
