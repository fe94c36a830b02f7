// Package workspace keeps what a sandbox did to its workspace reviewable: a
// manifest of the tree before start, the change set after exit, the audit of
// risky changes, and the safe apply of the changes a user keeps.
//
// Everything read from a sandbox's side (an overlay upper dir, a copy) is
// hostile: it is walked through descriptors with openat2(RESOLVE_BENEATH|
// RESOLVE_NO_SYMLINKS), never by following a path, and sizes are bounded.
//
// The repository is no way out (--protect-git, gitprotect.go): a bind
// run's .git is pinned with mounts and what git reads to run or read
// elsewhere is read-only while the sandbox runs (a host user may run git
// meanwhile), with placeholders where a name did not exist, rather than a
// copy of .git shown in its place, whose HEAD and index would lag the
// run's commits; at exit what the mounts could not hold (git dirs and
// gitdir: files made or changed anywhere in the tree) is defused and
// reported, and in overlay and copy modes the same paths are risky.
package workspace

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Type is what kind of file an entry is.
type Type uint8

const (
	TypeFile Type = iota + 1
	TypeDir
	TypeSymlink
	TypeOther // device, fifo, socket: never applied
)

func (t Type) String() string {
	switch t {
	case TypeFile:
		return "file"
	case TypeDir:
		return "dir"
	case TypeSymlink:
		return "symlink"
	case TypeOther:
		return "other"
	}
	return "unknown"
}

// MarshalText names the type in JSON.
func (t Type) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText reads a name MarshalText wrote.
func (t *Type) UnmarshalText(b []byte) error {
	for _, c := range []Type{TypeFile, TypeDir, TypeSymlink, TypeOther} {
		if c.String() == string(b) {
			*t = c
			return nil
		}
	}
	return fmt.Errorf("unknown file type %q", b)
}

// Entry is one path of a tree. Path is relative, slash-separated, and may hold
// any byte but '/' and NUL in its names (newlines, invalid UTF-8).
type Entry struct {
	Path   string `json:"path"`
	Type   Type   `json:"type"`
	Mode   uint32 `json:"mode"` // permission bits, with setuid, setgid and sticky (07777)
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"` // hex, regular files
	Link   string `json:"link,omitempty"`   // symlink target
	// Other says what a TypeOther entry is ("fifo", "char device 0:0").
	Other string `json:"other,omitempty"`
	// Unreadable holds why a file could not be hashed.
	Unreadable string `json:"unreadable,omitempty"`

	// Identity, for the hash cache and to tell a file that was written
	// (then reverted) from one never touched.
	Dev   uint64 `json:"-"`
	Ino   uint64 `json:"-"`
	Mtime int64  `json:"-"`
	Ctime int64  `json:"-"`
	Rdev  uint64 `json:"-"`
	// Stamp is when the file was last seen as hashed (ns since the epoch).
	Stamp int64 `json:"-"`
	// Opaque marks an overlay upper dir that hides its lower contents.
	Opaque bool `json:"-"`
}

// Whiteout reports whether e is an overlayfs whiteout (char device 0:0).
func (e Entry) Whiteout() bool { return e.Type == TypeOther && e.Other == "char device 0:0" }

// sameContent reports whether a and b hold the same thing, mode aside.
func sameContent(a, b Entry) bool {
	if a.Type != b.Type {
		return false
	}
	switch a.Type {
	case TypeFile:
		return a.Size == b.Size && a.SHA256 == b.SHA256 && a.SHA256 != ""
	case TypeSymlink:
		return a.Link == b.Link
	case TypeOther:
		return a.Other == b.Other
	}
	return true
}

// Manifest maps relative paths to entries. The root itself is not in it.
type Manifest map[string]Entry

// Sorted returns the entries in path order.
func (m Manifest) Sorted() []Entry {
	out := make([]Entry, 0, len(m))
	for _, e := range m {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// DefaultMaxEntries bounds a tree's size: a hostile sandbox could otherwise
// create files until the host's memory runs out.
const DefaultMaxEntries = 2_000_000

// ErrTooMany is returned when a tree holds more entries than allowed.
var ErrTooMany = errors.New("too many files")

// ScanOptions tune Scan.
type ScanOptions struct {
	Exclude *Excluder
	// Cache, if set, supplies hashes of files unchanged since it was filled
	// (same device, inode, size, mtime and ctime) and learns the others.
	Cache *Cache
	// Workers walking and hashing in parallel; default GOMAXPROCS (at least 2).
	Workers int
	// MaxEntries bounds the tree; default DefaultMaxEntries.
	MaxEntries int
	// Opaque reads overlayfs' opaque-directory xattrs (upper dirs only).
	Opaque bool
	// NoHash skips hashing (upper-dir whiteout scans use it for speed).
	NoHash bool
	// HashIf, if set, picks which files missing from the cache are
	// hashed; the others keep an empty SHA256.
	HashIf func(*Entry) bool
	// Progress, if set, is called now and then with entries and bytes seen.
	Progress func(entries, bytes int64)
}

// Scan walks root without following any symlink (the root itself must be a
// real directory) and returns its manifest. Directories and files matching
// opt.Exclude are skipped. A file that cannot be read is kept with
// Unreadable set; a directory that cannot be read is an error.
func Scan(root string, opt ScanOptions) (Manifest, error) {
	fd, err := openRoot(root)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return ScanFD(fd, opt)
}

func openRoot(root string) (int, error) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			return -1, fmt.Errorf("%s is not a directory (or is a symlink)", root)
		}
		return -1, fmt.Errorf("open %s: %w", root, err)
	}
	return fd, nil
}

// ErrStopped is ScanUntil's error when stop came before the walk's end.
var ErrStopped = errors.New("scan stopped")

// Partial is what a walk saw before it was stopped: the entries it
// reached, and the directories it listed in full.
type Partial struct {
	Manifest
	listed map[string]bool
}

// Knows reports whether the walk settled p: it saw p, or it saw in full a
// directory that held no p (so p did not exist then).
func (w Partial) Knows(p string) bool {
	if _, ok := w.Manifest[p]; ok {
		return true
	}
	for d := parent(p); ; d = parent(d) {
		if w.listed[d] {
			return true
		}
		if e, ok := w.Manifest[d]; ok {
			return e.Type != TypeDir // a file then: nothing was below it
		}
		if d == "" {
			return false
		}
		// d did not exist when the walk reached it, if it did: ask its parent.
	}
}

// ScanUntil is Scan that ends early once stop is closed, with ErrStopped
// and what it saw so far.
func ScanUntil(root string, opt ScanOptions, stop <-chan struct{}) (Partial, error) {
	fd, err := openRoot(root)
	if err != nil {
		return Partial{}, err
	}
	defer unix.Close(fd)
	w := newWalker(fd, opt)
	w.stop, w.listed = stop, map[string]bool{}
	m, err := w.walk()
	if err == nil && w.stopped.Load() {
		err = ErrStopped
	}
	return Partial{Manifest: m, listed: w.listed}, err
}

// ScanFD is Scan on an open directory.
func ScanFD(rootFD int, opt ScanOptions) (Manifest, error) {
	return newWalker(rootFD, opt).walk()
}

func newWalker(rootFD int, opt ScanOptions) *walker {
	if opt.Workers <= 0 {
		opt.Workers = max(2, runtime.GOMAXPROCS(0))
	}
	if opt.MaxEntries <= 0 {
		opt.MaxEntries = DefaultMaxEntries
	}
	return &walker{root: rootFD, opt: opt, sem: make(chan struct{}, opt.Workers)}
}

func (w *walker) walk() (Manifest, error) {
	if w.opt.Progress != nil {
		stop := make(chan struct{})
		done := make(chan struct{})
		go w.report(stop, done)
		defer func() { close(stop); <-done }()
	}
	w.wg.Add(1)
	w.dir("")
	w.wg.Wait()
	if w.err != nil {
		return nil, w.err
	}
	// One map of the final size: growing it entry by entry rehashes it
	// again and again.
	m := make(Manifest, w.n.Load())
	for i, batch := range w.batches {
		for _, e := range batch {
			m[e.Path] = e
		}
		w.batches[i] = nil // a huge tree's copy need not be held twice
	}
	return m, nil
}

type walker struct {
	root int
	opt  ScanOptions
	sem  chan struct{}
	wg   sync.WaitGroup

	n, bytes atomic.Int64

	stop    <-chan struct{} // ScanUntil's
	stopped atomic.Bool     // a directory was left unfinished for stop

	mu      sync.Mutex
	batches [][]Entry       // each directory's entries, made one manifest at the end
	listed  map[string]bool // ScanUntil: directories seen in full
	err     error
}

// halted reports whether stop has come, and notes that the walk is cut short.
func (w *walker) halted() bool {
	if !closed(w.stop) {
		return false
	}
	w.stopped.Store(true)
	return true
}

func (w *walker) report(stop, done chan struct{}) {
	defer close(done)
	t := newTicker()
	defer t.Stop()
	for {
		select {
		case <-stop:
			w.opt.Progress(w.n.Load(), w.bytes.Load())
			return
		case <-t.C:
			w.opt.Progress(w.n.Load(), w.bytes.Load())
		}
	}
}

func (w *walker) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
}

func (w *walker) failed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err != nil
}

// dir lists one directory (rel to the root) and hashes its files; its
// subdirectories get goroutines of their own. A semaphore bounds the work
// in flight, and no descriptor is held while waiting for it.
func (w *walker) dir(rel string) {
	defer w.wg.Done()
	w.sem <- struct{}{}
	defer func() { <-w.sem }()
	if w.failed() || w.halted() {
		return
	}
	fd, err := openBeneath(w.root, rel, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		w.fail(fmt.Errorf("open directory %s: %w", Quote(rel), err))
		return
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		w.fail(fmt.Errorf("read directory %s: %w", Quote(rel), err))
		return
	}
	sort.Strings(names)
	// The entries go into the manifest in one go, under one lock: when the
	// directory is done, or the walk ends early.
	seen := make([]Entry, 0, len(names))
	listed := false
	defer func() {
		w.mu.Lock()
		w.batches = append(w.batches, seen)
		if listed && w.listed != nil {
			w.listed[rel] = true
		}
		w.mu.Unlock()
	}()
	for _, name := range names {
		if w.halted() {
			return
		}
		child := name
		if rel != "" {
			child = rel + "/" + name
		}
		if w.opt.Exclude.Match(child) {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // gone meanwhile
			}
			w.fail(fmt.Errorf("stat %s: %w", Quote(child), err))
			return
		}
		e := entryOf(child, &st)
		switch e.Type {
		case TypeDir:
			if w.opt.Opaque {
				e.Opaque = opaque(fd, name)
			}
			w.wg.Add(1)
			go w.dir(child)
		case TypeSymlink:
			e.Link, err = readlinkat(fd, name)
			if err != nil {
				e.Unreadable = err.Error()
			}
		case TypeFile:
			if !w.opt.NoHash {
				w.hash(fd, name, &e)
			}
			w.bytes.Add(e.Size)
		}
		if n := w.n.Add(1); n > int64(w.opt.MaxEntries) {
			w.fail(fmt.Errorf("%w: more than %d entries", ErrTooMany, w.opt.MaxEntries))
			return
		}
		seen = append(seen, e)
	}
	listed = true
}

func entryOf(rel string, st *unix.Stat_t) Entry {
	e := Entry{Path: rel, Mode: uint32(st.Mode & 0o7777), Size: st.Size, Dev: uint64(st.Dev), Ino: st.Ino,
		Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano(), Rdev: uint64(st.Rdev)}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		e.Type = TypeFile
	case unix.S_IFDIR:
		e.Type, e.Size = TypeDir, 0
	case unix.S_IFLNK:
		e.Type = TypeSymlink
	case unix.S_IFCHR:
		e.Type, e.Size, e.Other = TypeOther, 0, fmt.Sprintf("char device %d:%d", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)))
	case unix.S_IFBLK:
		e.Type, e.Size, e.Other = TypeOther, 0, fmt.Sprintf("block device %d:%d", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)))
	case unix.S_IFIFO:
		e.Type, e.Size, e.Other = TypeOther, 0, "fifo"
	case unix.S_IFSOCK:
		e.Type, e.Size, e.Other = TypeOther, 0, "socket"
	default:
		e.Type, e.Size, e.Other = TypeOther, 0, "unknown file type"
	}
	return e
}

// maxLink bounds a symlink target (PATH_MAX).
const maxLink = 4096

func readlinkat(dirfd int, name string) (string, error) {
	buf := make([]byte, maxLink)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// opaque reads overlayfs' opaque marker on an upper dir: user.overlay.opaque
// when mounted with userxattr (as in a user namespace), else trusted.overlay.opaque.
func opaque(dirfd int, name string) bool {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	buf := make([]byte, 8)
	for _, attr := range []string{"user.overlay.opaque", "trusted.overlay.opaque"} {
		if n, err := unix.Fgetxattr(fd, attr, buf); err == nil && n == 1 && buf[0] == 'y' {
			return true
		}
	}
	return false
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 128<<10); return &b }}

// hash fills e.SHA256 from the cache or by reading the file, opened without
// following links and checked to be the very inode that was listed.
func (w *walker) hash(dirfd int, name string, e *Entry) {
	if sum, ok := w.opt.Cache.lookup(e); ok {
		e.SHA256, e.Stamp = sum, time.Now().UnixNano()
		return
	}
	if w.opt.HashIf != nil && !w.opt.HashIf(e) {
		return
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		e.Unreadable = err.Error()
		return
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	stamp := time.Now().UnixNano()
	// Read what the listing said is there, then check the file is still the
	// listed inode, unchanged: one fstat instead of one before and one after.
	sum, n, err := hashReader(io.LimitReader(f, e.Size))
	if err != nil {
		e.Unreadable = err.Error()
		return
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || n != e.Size || !sameStat(&st, e) {
		e.Unreadable = "changed while being read"
		return
	}
	e.SHA256, e.Stamp = sum, stamp
	w.opt.Cache.store(e)
}

func sameStat(st *unix.Stat_t, e *Entry) bool {
	return st.Ino == e.Ino && uint64(st.Dev) == e.Dev && st.Mode&unix.S_IFMT == unix.S_IFREG &&
		st.Size == e.Size && st.Mtim.Nano() == e.Mtime && st.Ctim.Nano() == e.Ctime
}

func hashReader(r io.Reader) (string, int64, error) {
	h := sha256.New()
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	// Hide the file's WriteTo: it would try sendfile and splice, then
	// allocate a buffer of its own, for every file.
	n, err := io.CopyBuffer(h, struct{ io.Reader }{r}, *bp)
	if err != nil {
		return "", n, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// parent returns p's parent ("" for a top-level name).
func parent(p string) string {
	d := path.Dir(p)
	if d == "." {
		return ""
	}
	return d
}
