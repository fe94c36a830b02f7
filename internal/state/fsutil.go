package state

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// writeJSONAtomic replaces dir/name so readers see either the old or the new
// content, never a torn write: temp file in the same dir, then rename. No
// fsync: this is runtime state of live processes, meaningless after a power
// loss, and fsync would cost milliseconds on every sandbox start.
func writeJSONAtomic(dir, name string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	f, err := os.CreateTemp(dir, "."+name+".tmp-*") // created 0600
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	ok = true
	return nil
}

// readFile reads a state file; a var so tests count the records a lookup reads.
var readFile = readStateFile

// maxStateFile bounds a record or status read (they are a few KB).
const maxStateFile = 16 << 20

// readStateFile is os.ReadFile with raw system calls: os.Open would also
// try to register each file with the poller (fcntl, epoll_ctl, fstat), and
// ls reads two files per sandbox.
func readStateFile(path string) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	for err == syscall.EINTR {
		fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	buf := make([]byte, 0, 4096)
	for {
		if len(buf) == cap(buf) {
			if len(buf) >= maxStateFile {
				return nil, &fs.PathError{Op: "read", Path: path, Err: errors.New("file too large")}
			}
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := syscall.Read(fd, buf[len(buf):cap(buf)])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

func readJSON(path string, v any) error {
	b, err := readFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func flock(fd int, how int) error {
	for {
		err := syscall.Flock(fd, how)
		if err != syscall.EINTR {
			return err
		}
	}
}

// probeLock reports whether someone holds path's lock, by trying to take it
// on a fresh open file description (flock locks belong to those, so even our
// own Handle in this process counts as "someone"). A missing lock file means
// nobody holds it. If it was free, the returned fd holds it now; the caller
// must close it (-1 when not held by us).
func probeLock(path string) (held bool, fd int, err error) {
	fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, -1, nil
		}
		return false, -1, err
	}
	if err := flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = syscall.Close(fd)
		if err == syscall.EWOULDBLOCK {
			return true, -1, nil
		}
		return false, -1, err
	}
	return false, fd, nil
}

// lockHeld is probeLock that lets go at once.
func lockHeld(path string) (bool, error) {
	held, fd, err := probeLock(path)
	if fd >= 0 {
		_ = syscall.Close(fd)
	}
	return held, err
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		// crypto/rand does not fail on Linux >= 3.17; a panic beats a weak id.
		panic(fmt.Sprintf("state: crypto/rand: %v", err))
	}
	return hex.EncodeToString(b)
}

func newID() string { return randHex(6) }

// removeDir moves dir aside before deleting it so List never sees a
// half-deleted sandbox, then retires it.
func removeDir(dir string, reuse []string) error {
	trash, err := moveAside(dir)
	if err != nil {
		return err
	}
	return retire(trash, reuse)
}

// A sandbox's directory, once emptied, waits under a spare name for the
// next sandbox's, instead of being removed: where the file system discards
// freed blocks at once (ext4 mounted with discard and no journal, as on
// this machine kind), removing a directory waits for the disk, 0.3 ms,
// twice at the end of every run (the sandbox's directory and its
// workspace's); a rename costs microseconds. At most spareSlots wait, each
// empty but for the empty directories its sandbox named for reuse (made
// with MkdirAll, so the next sandbox's code takes them as it finds them).
// Nothing of a sandbox stays in them: List and Create see them as neither
// sandboxes nor debris.
const spareSlots = 4

func spareName(sandboxes string, i int) string {
	return filepath.Join(sandboxes, sparePrefix+strconv.Itoa(i))
}

// retire empties dir, but for the directories named reuse, which it
// empties instead, and keeps it as a spare; or removes it when no slot is
// free (or it cannot be emptied, or renamed without replacing).
func retire(dir string, reuse []string) error {
	if emptyKeeping(dir, reuse) == nil {
		for i := range spareSlots {
			err := renameNoReplace(dir, spareName(filepath.Dir(dir), i))
			if err == nil {
				return nil
			}
			if !errors.Is(err, unix.EEXIST) && !errors.Is(err, unix.ENOTEMPTY) {
				break // no RENAME_NOREPLACE here (EINVAL): remove it
			}
		}
	}
	return os.RemoveAll(dir)
}

// emptyKeeping deletes what dir holds, but for the directories named keep,
// which it empties.
func emptyKeeping(dir string, keep []string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if e.Type() == fs.ModeDir && slices.Contains(keep, e.Name()) {
			err = removeEntries(p, nil)
		} else {
			err = os.RemoveAll(p)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// takeSpare makes dir from a spare directory, if one waits: it reports
// whether it did. What it takes is checked to be as retire left it, a
// private directory; anything else is removed.
func takeSpare(sandboxes, dir string) bool {
	for i := range spareSlots {
		if renameNoReplace(spareName(sandboxes, i), dir) != nil {
			continue
		}
		if fi, err := os.Lstat(dir); err == nil && fi.IsDir() && fi.Mode().Perm() == 0o700 {
			return true
		}
		os.RemoveAll(dir)
		return false
	}
	return false
}

// moveAside renames dir to a trash name beside it, which List skips and
// the next Create removes once old (the debris of a crash).
func moveAside(dir string) (string, error) {
	trash := filepath.Join(filepath.Dir(dir), trashPrefix+filepath.Base(dir)+"-"+randHex(4))
	return trash, os.Rename(dir, trash)
}

// removeEntries deletes what dir holds, but for the entries named keep.
func removeEntries(dir string, keep []string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if !slices.Contains(keep, e.Name()) {
			errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// removeFallbackSocket deletes a socket living outside the sandbox dir,
// which removing the dir would not catch.
func removeFallbackSocket(dir, sock string) {
	if filepath.Dir(sock) != dir {
		_ = os.Remove(sock)
	}
}

// Leftovers lists what the state dir under root holds of sandboxes: every
// entry of its sandboxes directory but the spares, and any spare that holds
// more than empty directories. Once every sandbox is removed, nothing.
func Leftovers(root string) []string {
	dir := filepath.Join(root, sandboxesDir)
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), sparePrefix) || e.Type() != fs.ModeDir || !holdsOnlyEmptyDirs(filepath.Join(dir, e.Name())) {
			out = append(out, e.Name())
		}
	}
	return out
}

func holdsOnlyEmptyDirs(dir string) bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if e.Type() != fs.ModeDir {
			return false
		}
		if sub, err := os.ReadDir(filepath.Join(dir, e.Name())); err != nil || len(sub) != 0 {
			return false
		}
	}
	return true
}
