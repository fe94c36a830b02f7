// Package vfs serves file trees to a sandbox from the host: providers
// (memory, a real directory resolved beneath its root, read-only, overlay,
// router) behind one path-based interface, hooks that audit and refuse, and
// a FUSE server that a VM guest reaches through a dumb byte relay, so the
// untrusted guest holds no filesystem logic.
package vfs

import (
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Attr is a file's metadata, as stat(2) gives it.
type Attr struct {
	Ino                 uint64 // stable: the same file has the same Ino on every lookup; hard links share it
	Mode                uint32 // file type and permission bits (st_mode)
	Nlink               uint32
	UID, GID            uint32
	Size                int64
	Blocks              int64 // 512-byte blocks
	Rdev                uint64
	Atime, Mtime, Ctime time.Time
}

// IsDir reports whether a is a directory.
func (a Attr) IsDir() bool { return a.Mode&unix.S_IFMT == unix.S_IFDIR }

// Type is a's file type bits.
func (a Attr) Type() uint32 { return a.Mode & unix.S_IFMT }

// DirEntry is one name in a directory.
type DirEntry struct {
	Name string
	Mode uint32 // file type bits
	Ino  uint64
}

// SetAttr says what Setattr changes: nil fields stay as they are.
type SetAttr struct {
	Mode         *uint32 // permission bits only
	UID, GID     *uint32
	Size         *int64
	Atime, Mtime *time.Time
}

// Statfs is a file system's usage (statfs(2)).
type Statfs struct {
	Blocks, Bfree, Bavail uint64
	Files, Ffree          uint64
	Bsize, NameLen        uint32
}

// File is an open file. It stays usable after its path is removed.
type File interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	Stat() (Attr, error)
	Truncate(size int64) error
	Sync() error
	Close() error
}

// Provider is a file tree. Paths are absolute and slash-separated ("/" is
// the provider's root) and name the entry itself: no call follows a symlink
// in the last component except Stat. Errors are unix.Errno values (ENOENT,
// EEXIST, ENOTDIR, EISDIR, ENOTEMPTY, EROFS, EACCES, EXDEV...).
type Provider interface {
	Stat(p string) (Attr, error) // follows symlinks (within the provider)
	Lstat(p string) (Attr, error)
	ReadDir(p string) ([]DirEntry, error) // without "." and ".."
	// Open opens an existing file; flags are open(2)'s access mode plus
	// O_APPEND and O_TRUNC.
	Open(p string, flags int) (File, error)
	// Create opens p, creating it with mode (permission bits) if absent;
	// O_EXCL in flags makes an existing p an error.
	Create(p string, flags int, mode uint32) (File, error)
	Mkdir(p string, mode uint32) error
	Remove(p string) error // a file, a symlink or an empty directory
	Rename(from, to string) error
	Symlink(target, p string) error
	Readlink(p string) (string, error)
	Link(existing, p string) error
	Setattr(p string, a SetAttr) (Attr, error)
	Statfs() (Statfs, error)
}

// Clean makes p absolute and clean. It never climbs above "/".
func Clean(p string) string {
	return path.Clean("/" + p)
}

// split returns p's parent and last name ("/" has none).
func split(p string) (dir, name string) {
	p = Clean(p)
	i := strings.LastIndexByte(p, '/')
	if i == 0 {
		return "/", p[1:]
	}
	return p[:i], p[i+1:]
}

// writing reports whether open flags ask for write access.
func writing(flags int) bool {
	return flags&unix.O_ACCMODE != unix.O_RDONLY || flags&unix.O_TRUNC != 0
}

// mixIno gives layer tag's inode numbers their own space, so two providers
// under one mount (router, overlay) do not hand out the same number. It is
// a bijection per tag, hence stable and hard-link preserving.
func mixIno(ino, tag uint64) uint64 {
	if tag == 0 {
		return ino
	}
	return ino ^ (tag * 0x9E3779B97F4A7C15)
}

// validName rejects names a directory cannot hold.
func validName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return unix.EINVAL
	}
	if len(name) > 255 {
		return unix.ENAMETOOLONG
	}
	return nil
}
