package vfs

import (
	"encoding/binary"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// RealDir is a host directory. Every path is resolved beneath its root
// with openat2(RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS): symlinks inside the
// tree may be followed, but nothing (symlink, "..", /proc magic link, a
// rename racing the walk) leads out of it. The last component is never
// followed except by Stat. Unlike the workspace scanner, which refuses
// every symlink, this must let the guest keep and use its own symlinks.
type RealDir struct {
	root int // O_PATH descriptor of the root
	dev  uint64
}

// resolveBeneath are the openat2 rules for every walk from the root.
const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS

// NewRealDir opens root (which must be a directory, not a symlink).
func NewRealDir(root string) (*RealDir, error) {
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &RealDir{root: fd, dev: st.Dev}, nil
}

// Close releases the root descriptor.
func (r *RealDir) Close() error { return unix.Close(r.root) }

func openat2(dirfd int, rel string, flags int, resolve uint64) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: resolve}
	return openHow(dirfd, rel, &how)
}

// openHow retries what openat2 asks to be retried (a rename raced the
// walk), a bounded number of times since the guest can race on purpose.
func openHow(dirfd int, rel string, how *unix.OpenHow) (int, error) {
	for range 64 {
		fd, err := unix.Openat2(dirfd, rel, how)
		if err != unix.EINTR && err != unix.EAGAIN {
			return fd, err
		}
	}
	return -1, unix.EAGAIN
}

// rel turns a provider path into one relative to the root ("." for it).
func rel(p string) string {
	p = Clean(p)
	if p == "/" {
		return "."
	}
	return p[1:]
}

// dir opens p's parent directory beneath the root (O_PATH) and returns it
// with p's last name; for the root itself name is "".
func (r *RealDir) dir(p string) (fd int, name string, err error) {
	d, name := split(p)
	if name == "" {
		fd, err = unix.Dup(r.root)
		return fd, "", err
	}
	if err := validName(name); err != nil {
		return -1, "", err
	}
	fd, err = openat2(r.root, rel(d), unix.O_PATH|unix.O_DIRECTORY, resolveBeneath)
	return fd, name, err
}

// at runs f on p's parent directory and name. f sees name "" for the root.
func (r *RealDir) at(p string, f func(dirfd int, name string) error) error {
	fd, name, err := r.dir(p)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return f(fd, name)
}

func attrOf(st *unix.Stat_t) Attr {
	return Attr{Ino: st.Ino, Mode: st.Mode, Nlink: uint32(st.Nlink), UID: st.Uid, GID: st.Gid,
		Size: st.Size, Blocks: st.Blocks, Rdev: st.Rdev,
		Atime: time.Unix(st.Atim.Unix()), Mtime: time.Unix(st.Mtim.Unix()), Ctime: time.Unix(st.Ctim.Unix())}
}

func lstatAt(dirfd int, name string) (Attr, error) {
	var st unix.Stat_t
	var err error
	if name == "" {
		err = unix.Fstatat(dirfd, "", &st, unix.AT_EMPTY_PATH)
	} else {
		err = unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	}
	return attrOf(&st), err
}

func (r *RealDir) Lstat(p string) (a Attr, err error) {
	err = r.at(p, func(dirfd int, name string) error {
		a, err = lstatAt(dirfd, name)
		return err
	})
	return a, err
}

func (r *RealDir) Stat(p string) (Attr, error) {
	fd, err := openat2(r.root, rel(p), unix.O_PATH, resolveBeneath)
	if err != nil {
		return Attr{}, err
	}
	defer unix.Close(fd)
	return lstatAt(fd, "")
}

// openNoFollow opens p itself beneath the root; a symlink is ELOOP.
func (r *RealDir) openNoFollow(p string, flags int) (int, error) {
	return openat2(r.root, rel(p), flags|unix.O_NOFOLLOW, resolveBeneath)
}

func (r *RealDir) ReadDir(p string) ([]DirEntry, error) {
	fd, err := r.openNoFollow(p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return readDirents(fd)
}

// readDirents lists fd with getdents64 (os.File's listing drops d_ino).
func readDirents(fd int) ([]DirEntry, error) {
	var out []DirEntry
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return out, nil
		}
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return nil, unix.EIO
			}
			name := b[19:reclen]
			for i, c := range name {
				if c == 0 {
					name = name[:i]
					break
				}
			}
			if s := string(name); s != "." && s != ".." {
				out = append(out, DirEntry{Name: s, Ino: binary.NativeEndian.Uint64(b[0:8]), Mode: dtMode(b[18])})
			}
			b = b[reclen:]
		}
	}
}

func dtMode(t byte) uint32 {
	switch t {
	case unix.DT_DIR:
		return unix.S_IFDIR
	case unix.DT_LNK:
		return unix.S_IFLNK
	case unix.DT_CHR:
		return unix.S_IFCHR
	case unix.DT_BLK:
		return unix.S_IFBLK
	case unix.DT_FIFO:
		return unix.S_IFIFO
	case unix.DT_SOCK:
		return unix.S_IFSOCK
	}
	return unix.S_IFREG
}

// regular checks an opened fd is a regular file or a directory: devices,
// fifos and sockets on the host are never opened for the guest.
func regular(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return nil
	case unix.S_IFDIR:
		return unix.EISDIR
	}
	return unix.EACCES
}

const openMask = unix.O_ACCMODE | unix.O_APPEND | unix.O_TRUNC

func (r *RealDir) Open(p string, flags int) (File, error) {
	fd, err := r.openNoFollow(p, flags&openMask|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return nil, err
	}
	return r.file(fd, p)
}

func (r *RealDir) file(fd int, p string) (File, error) {
	if err := regular(fd); err != nil {
		unix.Close(fd)
		return nil, err
	}
	// Back to blocking for plain reads and writes.
	unix.SetNonblock(fd, false)
	return &realFile{f: os.NewFile(uintptr(fd), p)}, nil
}

func (r *RealDir) Create(p string, flags int, mode uint32) (File, error) {
	var fd int
	err := r.at(p, func(dirfd int, name string) (err error) {
		if name == "" {
			return unix.EISDIR
		}
		// O_CREAT needs its mode in OpenHow, so not through openat2().
		how := unix.OpenHow{Flags: uint64(flags&(openMask|unix.O_EXCL) | unix.O_CREAT | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC), Mode: uint64(mode & 0o7777), Resolve: resolveBeneath}
		fd, err = openHow(dirfd, name, &how)
		return err
	})
	if err != nil {
		return nil, err
	}
	return r.file(fd, p)
}

func (r *RealDir) Mkdir(p string, mode uint32) error {
	return r.at(p, func(dirfd int, name string) error {
		if name == "" {
			return unix.EEXIST
		}
		return unix.Mkdirat(dirfd, name, mode&0o7777)
	})
}

func (r *RealDir) Remove(p string) error {
	return r.at(p, func(dirfd int, name string) error {
		if name == "" {
			return unix.EBUSY
		}
		err := unix.Unlinkat(dirfd, name, 0)
		if err == unix.EISDIR || err == unix.EPERM {
			if a, e := lstatAt(dirfd, name); e == nil && a.IsDir() {
				err = unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
			}
		}
		return err
	})
}

// two runs f on the parents and names of a and b.
func (r *RealDir) two(a, b string, f func(ad int, an string, bd int, bn string) error) error {
	return r.at(a, func(ad int, an string) error {
		return r.at(b, func(bd int, bn string) error {
			if an == "" || bn == "" {
				return unix.EBUSY
			}
			return f(ad, an, bd, bn)
		})
	})
}

func (r *RealDir) Rename(from, to string) error {
	return r.two(from, to, func(ad int, an string, bd int, bn string) error {
		return unix.Renameat(ad, an, bd, bn)
	})
}

func (r *RealDir) Link(existing, p string) error {
	return r.two(existing, p, func(ad int, an string, bd int, bn string) error {
		return unix.Linkat(ad, an, bd, bn, 0) // the entry itself, never a symlink's target
	})
}

func (r *RealDir) Symlink(target, p string) error {
	return r.at(p, func(dirfd int, name string) error {
		if name == "" {
			return unix.EEXIST
		}
		return unix.Symlinkat(target, dirfd, name)
	})
}

func (r *RealDir) Readlink(p string) (s string, err error) {
	err = r.at(p, func(dirfd int, name string) error {
		buf := make([]byte, 4096)
		n, err := unix.Readlinkat(dirfd, name, buf)
		s = string(buf[:max(n, 0)])
		return err
	})
	return s, err
}

func (r *RealDir) Setattr(p string, a SetAttr) (Attr, error) {
	if a.Size != nil {
		fd, err := r.openNoFollow(p, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
		if err != nil {
			return Attr{}, err
		}
		err = regular(fd)
		if err == nil {
			err = unix.Ftruncate(fd, *a.Size)
		}
		unix.Close(fd)
		if err != nil {
			return Attr{}, err
		}
	}
	var out Attr
	err := r.at(p, func(dirfd int, name string) error {
		if a.Mode != nil {
			if err := chmodNoFollow(dirfd, name, *a.Mode&0o7777); err != nil {
				return err
			}
		}
		if a.UID != nil || a.GID != nil {
			uid, gid := -1, -1
			if a.UID != nil {
				uid = int(*a.UID)
			}
			if a.GID != nil {
				gid = int(*a.GID)
			}
			flags := unix.AT_SYMLINK_NOFOLLOW
			if name == "" {
				flags = unix.AT_EMPTY_PATH
			}
			if err := unix.Fchownat(dirfd, name, uid, gid, flags); err != nil {
				return err
			}
		}
		if a.Atime != nil || a.Mtime != nil {
			ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
			if a.Atime != nil {
				ts[0] = unix.NsecToTimespec(a.Atime.UnixNano())
			}
			if a.Mtime != nil {
				ts[1] = unix.NsecToTimespec(a.Mtime.UnixNano())
			}
			n := name
			if n == "" {
				n = "."
			}
			if err := unix.UtimesNanoAt(dirfd, n, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return err
			}
		}
		var err error
		out, err = lstatAt(dirfd, name)
		return err
	})
	return out, err
}

// chmodNoFollow changes the mode of name itself: fchmodat follows a final
// symlink, so the entry is pinned with O_PATH|O_NOFOLLOW first and changed
// through its /proc/self/fd link, which names exactly that inode.
func chmodNoFollow(dirfd int, name string, mode uint32) error {
	n := name
	if n == "" {
		n = "."
	}
	fd, err := unix.Openat(dirfd, n, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return unix.EOPNOTSUPP
	}
	return unix.Fchmodat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), mode, 0)
}

func (r *RealDir) Statfs() (Statfs, error) {
	var s unix.Statfs_t
	if err := unix.Fstatfs(r.root, &s); err != nil {
		return Statfs{}, err
	}
	return Statfs{Blocks: s.Blocks, Bfree: s.Bfree, Bavail: s.Bavail, Files: s.Files, Ffree: s.Ffree,
		Bsize: uint32(s.Bsize), NameLen: uint32(s.Namelen)}, nil
}

type realFile struct{ f *os.File }

func (f *realFile) ReadAt(p []byte, off int64) (int, error) {
	var n int
	err := f.rawDo(func(fd int) (err error) {
		n, err = unix.Pread(fd, p, off)
		return err
	})
	return max(n, 0), err
}

func (f *realFile) WriteAt(p []byte, off int64) (int, error) {
	// os.File.WriteAt refuses O_APPEND files; pwrite on Linux appends.
	var n int
	err := f.rawDo(func(fd int) (err error) {
		n, err = unix.Pwrite(fd, p, off)
		return err
	})
	return max(n, 0), err
}

func (f *realFile) rawDo(fn func(fd int) error) error {
	c, err := f.f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := c.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

func (f *realFile) Stat() (a Attr, err error) {
	err = f.rawDo(func(fd int) (err error) {
		a, err = lstatAt(fd, "")
		return err
	})
	return a, err
}

func (f *realFile) Truncate(size int64) error { return unwrap(f.f.Truncate(size)) }
func (f *realFile) Sync() error               { return unwrap(f.f.Sync()) }
func (f *realFile) Close() error              { return unwrap(f.f.Close()) }

// unwrap takes the errno out of an os error so callers see unix.Errno.
func unwrap(err error) error {
	switch e := err.(type) {
	case *os.PathError:
		return e.Err
	case *os.SyscallError:
		return e.Err
	}
	return err
}

// whiteout puts an overlayfs whiteout (char device 0:0) at p. Unprivileged
// processes may make this one device node since Linux 5.8.
func (r *RealDir) whiteout(p string) error {
	return r.at(p, func(dirfd int, name string) error {
		return unix.Mknodat(dirfd, name, unix.S_IFCHR|0, 0)
	})
}

// opaqueAttrs are the xattrs overlayfs (and workspace.Scan) read to know a
// directory hides the lower one: user.* when mounted with userxattr (what
// an unprivileged process can set), trusted.* otherwise.
var opaqueAttrs = []string{"user.overlay.opaque", "trusted.overlay.opaque"}

func (r *RealDir) setOpaque(p string) error {
	fd, err := r.openNoFollow(p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for _, a := range opaqueAttrs {
		if err = unix.Fsetxattr(fd, a, []byte("y"), 0); err == nil {
			return nil
		}
	}
	return err
}

func (r *RealDir) opaque(p string) bool {
	fd, err := r.openNoFollow(p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	buf := make([]byte, 8)
	for _, a := range opaqueAttrs {
		if n, err := unix.Fgetxattr(fd, a, buf); err == nil && n == 1 && buf[0] == 'y' {
			return true
		}
	}
	return false
}
