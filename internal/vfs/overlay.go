package vfs

import (
	"errors"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Overlay shows a lower provider with a host directory's changes over it,
// and writes those changes exactly as overlayfs lays out an upper dir
// (whiteouts are char devices 0:0, a directory that replaces a deleted one
// is marked opaque with the overlay.opaque xattr, directories are copied
// up, not redirected), so the workspace review (workspace.Scan with
// Opaque, MergeUpper) reads it unchanged. Like overlayfs without
// redirect_dir, renaming a directory that exists in the lower is EXDEV;
// mv and friends then copy.
type Overlay struct {
	mu    sync.RWMutex
	lower Provider
	upper *RealDir
}

// lowerTag keeps lower inode numbers apart from upper ones.
const lowerTag = 1

// NewOverlay serves lower with its changes in the host directory upper.
func NewOverlay(lower Provider, upper string) (*Overlay, error) {
	u, err := NewRealDir(upper)
	if err != nil {
		return nil, err
	}
	return &Overlay{lower: lower, upper: u}, nil
}

// Close releases the upper directory.
func (o *Overlay) Close() error { return o.upper.Close() }

type layer int

const (
	inUpper layer = iota + 1
	inLower
)

func isWhiteout(a Attr) bool { return a.Type() == unix.S_IFCHR && a.Rdev == 0 }

func notExist(err error) bool { return errors.Is(err, unix.ENOENT) }

// where finds the layer that shows p, and p's attributes there.
func (o *Overlay) where(p string) (layer, Attr, error) {
	p = Clean(p)
	if p == "/" {
		a, err := o.upper.Lstat("/")
		return inUpper, a, err
	}
	names := strings.Split(p[1:], "/")
	cur := ""
	lowerOK := true
	for i, name := range names {
		cur += "/" + name
		last := i == len(names)-1
		ua, err := o.upper.Lstat(cur)
		switch {
		case err == nil:
			if isWhiteout(ua) {
				return 0, Attr{}, unix.ENOENT
			}
			if last {
				return inUpper, ua, nil
			}
			if !ua.IsDir() {
				return 0, Attr{}, unix.ENOTDIR
			}
			if o.upper.opaque(cur) {
				lowerOK = false
			}
			continue
		case !notExist(err):
			return 0, Attr{}, err
		case !lowerOK:
			return 0, Attr{}, unix.ENOENT
		}
		// Nothing deeper is in upper: the rest is the lower's alone.
		la, err := o.lower.Lstat(p)
		if err != nil {
			return 0, Attr{}, err
		}
		la.Ino = mixIno(la.Ino, lowerTag)
		return inLower, la, nil
	}
	return 0, Attr{}, unix.ENOENT
}

// lowerShows reports whether the lower's p would be visible if upper had
// nothing at p itself: then removing p needs a whiteout and a directory
// made at p must be opaque.
func (o *Overlay) lowerShows(p string) bool {
	p = Clean(p)
	if p == "/" {
		return true
	}
	names := strings.Split(p[1:], "/")
	cur := ""
	for _, name := range names[:len(names)-1] {
		cur += "/" + name
		ua, err := o.upper.Lstat(cur)
		if err == nil && (isWhiteout(ua) || !ua.IsDir() || o.upper.opaque(cur)) {
			return false
		}
		if err != nil {
			break
		}
	}
	_, err := o.lower.Lstat(p)
	return err == nil
}

func (o *Overlay) Lstat(p string) (Attr, error) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	_, a, err := o.where(p)
	return a, err
}

func (o *Overlay) Stat(p string) (Attr, error) { return statFollow(o, p) }

// statFollow is Stat for providers that only Lstat: it follows final
// symlinks through the provider itself, so it never leaves it.
func statFollow(pr Provider, p string) (Attr, error) {
	p = Clean(p)
	for range 40 {
		a, err := pr.Lstat(p)
		if err != nil || a.Type() != unix.S_IFLNK {
			return a, err
		}
		t, err := pr.Readlink(p)
		if err != nil {
			return Attr{}, err
		}
		if !strings.HasPrefix(t, "/") {
			dir, _ := split(p)
			t = dir + "/" + t
		}
		p = Clean(t)
	}
	return Attr{}, unix.ELOOP
}

func (o *Overlay) ReadDir(p string) ([]DirEntry, error) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.readDir(p)
}

// readDir merges p's entries; o.mu is held.
func (o *Overlay) readDir(p string) ([]DirEntry, error) {
	l, a, err := o.where(p)
	if err != nil {
		return nil, err
	}
	if !a.IsDir() {
		return nil, unix.ENOTDIR
	}
	if l == inLower {
		return o.lowerDir(p)
	}
	ups, err := o.upper.ReadDir(p)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(ups))
	out := make([]DirEntry, 0, len(ups))
	for _, e := range ups {
		seen[e.Name] = true
		if e.Mode == unix.S_IFCHR {
			if a, err := o.upper.Lstat(Clean(p) + "/" + e.Name); err == nil && isWhiteout(a) {
				continue
			}
		}
		out = append(out, e)
	}
	if Clean(p) == "/" || !o.upper.opaque(p) && o.lowerShows(p) {
		if lows, err := o.lowerDir(p); err == nil {
			for _, e := range lows {
				if !seen[e.Name] {
					out = append(out, e)
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (o *Overlay) lowerDir(p string) ([]DirEntry, error) {
	es, err := o.lower.ReadDir(p)
	for i := range es {
		es[i].Ino = mixIno(es[i].Ino, lowerTag)
	}
	return es, err
}

func (o *Overlay) Readlink(p string) (string, error) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	l, _, err := o.where(p)
	if err != nil {
		return "", err
	}
	if l == inLower {
		return o.lower.Readlink(p)
	}
	return o.upper.Readlink(p)
}

func (o *Overlay) Open(p string, flags int) (File, error) {
	if writing(flags) {
		o.mu.Lock()
		defer o.mu.Unlock()
		if err := o.copyUp(p); err != nil {
			return nil, err
		}
		return o.upper.Open(p, flags)
	}
	o.mu.RLock()
	defer o.mu.RUnlock()
	l, _, err := o.where(p)
	if err != nil {
		return nil, err
	}
	if l == inLower {
		f, err := o.lower.Open(p, flags)
		if err != nil {
			return nil, err
		}
		return tagFile{f, lowerTag}, nil
	}
	return o.upper.Open(p, flags)
}

// copyUpDir makes sure directory d exists in upper; o.mu is held.
func (o *Overlay) copyUpDir(d string) error {
	d = Clean(d)
	if d == "/" {
		return nil
	}
	l, a, err := o.where(d)
	if err != nil {
		return err
	}
	if !a.IsDir() {
		return unix.ENOTDIR
	}
	if l == inUpper {
		return nil
	}
	parent, _ := split(d)
	if err := o.copyUpDir(parent); err != nil {
		return err
	}
	if err := o.upper.Mkdir(d, a.Mode&0o7777); err != nil {
		return err
	}
	_, err = o.upper.Setattr(d, SetAttr{Mtime: &a.Mtime, Atime: &a.Atime})
	return err
}

// copyUp copies p (and its parents) from lower to upper unless it is
// there already; o.mu is held.
func (o *Overlay) copyUp(p string) error {
	l, a, err := o.where(p)
	if err != nil || l == inUpper {
		return err
	}
	if a.IsDir() {
		return o.copyUpDir(p)
	}
	parent, _ := split(p)
	if err := o.copyUpDir(parent); err != nil {
		return err
	}
	switch a.Type() {
	case unix.S_IFLNK:
		t, err := o.lower.Readlink(p)
		if err != nil {
			return err
		}
		return o.upper.Symlink(t, p)
	case unix.S_IFREG:
	default:
		return unix.EACCES
	}
	src, err := o.lower.Open(p, unix.O_RDONLY)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := o.upper.Create(p, unix.O_WRONLY|unix.O_EXCL, a.Mode&0o7777)
	if err != nil {
		return err
	}
	if err := copyFile(dst, src); err != nil {
		dst.Close()
		o.upper.Remove(p)
		return err
	}
	if err := dst.Close(); err != nil {
		return err
	}
	_, err = o.upper.Setattr(p, SetAttr{Mtime: &a.Mtime, Atime: &a.Atime})
	return err
}

func copyFile(dst, src File) error {
	buf := make([]byte, 128<<10)
	var off int64
	for {
		n, err := src.ReadAt(buf, off)
		if n > 0 {
			if _, err := dst.WriteAt(buf[:n], off); err != nil {
				return err
			}
			off += int64(n)
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
	}
}

// prepare readies upper for a new entry at p: its parents copied up and
// a whiteout at p removed; o.mu is held. p must not be visible.
func (o *Overlay) prepare(p string) error {
	parent, _ := split(p)
	if err := o.copyUpDir(parent); err != nil {
		return err
	}
	if a, err := o.upper.Lstat(p); err == nil && isWhiteout(a) {
		return o.upper.Remove(p)
	}
	return nil
}

// absent returns EEXIST if p is visible, nil if not, or another error.
func (o *Overlay) absent(p string) error {
	_, _, err := o.where(p)
	switch {
	case err == nil:
		return unix.EEXIST
	case notExist(err):
		return nil
	}
	return err
}

func (o *Overlay) Create(p string, flags int, mode uint32) (File, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.absent(p); err != nil {
		if err != unix.EEXIST || flags&unix.O_EXCL != 0 {
			return nil, err
		}
		if err := o.copyUp(p); err != nil {
			return nil, err
		}
		return o.upper.Open(p, flags)
	}
	if err := o.prepare(p); err != nil {
		return nil, err
	}
	return o.upper.Create(p, flags|unix.O_EXCL, mode)
}

func (o *Overlay) Mkdir(p string, mode uint32) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.absent(p); err != nil {
		return err
	}
	if err := o.prepare(p); err != nil {
		return err
	}
	if err := o.upper.Mkdir(p, mode); err != nil {
		return err
	}
	if o.lowerShows(p) {
		return o.upper.setOpaque(p)
	}
	return nil
}

func (o *Overlay) Symlink(target, p string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.absent(p); err != nil {
		return err
	}
	if err := o.prepare(p); err != nil {
		return err
	}
	return o.upper.Symlink(target, p)
}

func (o *Overlay) Link(existing, p string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.absent(p); err != nil {
		return err
	}
	if err := o.copyUp(existing); err != nil {
		return err
	}
	if err := o.prepare(p); err != nil {
		return err
	}
	return o.upper.Link(existing, p)
}

func (o *Overlay) Setattr(p string, a SetAttr) (Attr, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.copyUp(p); err != nil {
		return Attr{}, err
	}
	return o.upper.Setattr(p, a)
}

// clearDir removes the whiteouts left in an upper dir that shows as empty;
// o.mu is held.
func (o *Overlay) clearDir(p string) error {
	es, err := o.upper.ReadDir(p)
	if err != nil {
		return err
	}
	for _, e := range es {
		if err := o.upper.Remove(Clean(p) + "/" + e.Name); err != nil {
			return err
		}
	}
	return nil
}

// gone makes p (already checked removable) disappear; o.mu is held.
func (o *Overlay) gone(p string, l layer, a Attr, lower bool) error {
	if l == inUpper {
		if a.IsDir() {
			if err := o.clearDir(p); err != nil {
				return err
			}
		}
		if err := o.upper.Remove(p); err != nil {
			return err
		}
	}
	if !lower {
		return nil
	}
	parent, _ := split(p)
	if err := o.copyUpDir(parent); err != nil {
		return err
	}
	return o.upper.whiteout(p)
}

func (o *Overlay) Remove(p string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if Clean(p) == "/" {
		return unix.EBUSY
	}
	l, a, err := o.where(p)
	if err != nil {
		return err
	}
	if a.IsDir() {
		if err := o.emptyDir(p); err != nil {
			return err
		}
	}
	return o.gone(p, l, a, o.lowerShows(p))
}

// emptyDir returns ENOTEMPTY unless the merged directory p is empty; o.mu
// is held.
func (o *Overlay) emptyDir(p string) error {
	es, err := o.readDir(p)
	if err != nil {
		return err
	}
	if len(es) > 0 {
		return unix.ENOTEMPTY
	}
	return nil
}

func (o *Overlay) Rename(from, to string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	from, to = Clean(from), Clean(to)
	if from == "/" || to == "/" {
		return unix.EBUSY
	}
	_, fa, err := o.where(from)
	if err != nil {
		return err
	}
	if from == to {
		return nil
	}
	if fa.IsDir() && strings.HasPrefix(to+"/", from+"/") {
		return unix.EINVAL
	}
	tl, ta, terr := o.where(to)
	if terr != nil && !notExist(terr) {
		return terr
	}
	if terr == nil {
		switch {
		case fa.Ino == ta.Ino:
			return nil
		case fa.IsDir() && !ta.IsDir():
			return unix.ENOTDIR
		case !fa.IsDir() && ta.IsDir():
			return unix.EISDIR
		case ta.IsDir():
			if err := o.emptyDir(to); err != nil {
				return err
			}
		}
	}
	fromLower := o.lowerShows(from)
	if fa.IsDir() && fromLower {
		return unix.EXDEV // as overlayfs without redirect_dir
	}
	if err := o.copyUp(from); err != nil {
		return err
	}
	toLower := o.lowerShows(to)
	if terr == nil {
		// Drop what is at to in upper; the rename puts from there.
		if tl == inUpper && ta.IsDir() {
			if err := o.clearDir(to); err != nil {
				return err
			}
		}
	}
	if err := o.prepare(to); err != nil {
		return err
	}
	if err := o.upper.Rename(from, to); err != nil {
		return err
	}
	if fa.IsDir() && toLower {
		if err := o.upper.setOpaque(to); err != nil {
			return err
		}
	}
	if fromLower {
		return o.upper.whiteout(from)
	}
	return nil
}

func (o *Overlay) Statfs() (Statfs, error) { return o.upper.Statfs() }
