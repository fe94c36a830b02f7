package vfs

import (
	"context"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Owner is who the guest sees owning every file.
type Owner struct{ UID, GID uint32 }

// fsRoot is what every node of one served tree shares.
type fsRoot struct {
	p     Provider
	owner *Owner
	// openFlags: FOPEN_KEEP_CACHE when attributes are cached, so reopening
	// an unchanged file reads the guest's page cache; the kernel drops it
	// when it sees the size or mtime change (auto_inval_data), so host-side
	// edits show within the attribute timeout.
	openFlags uint32
}

// node adapts one go-fuse inode to the provider. go-fuse keys inodes by
// the provider's Ino, so the same file (hard links included) is one node.
type node struct {
	fs.Inode
	r *fsRoot
}

var (
	_ fs.NodeLookuper   = (*node)(nil)
	_ fs.NodeGetattrer  = (*node)(nil)
	_ fs.NodeSetattrer  = (*node)(nil)
	_ fs.NodeReaddirer  = (*node)(nil)
	_ fs.NodeMkdirer    = (*node)(nil)
	_ fs.NodeCreater    = (*node)(nil)
	_ fs.NodeOpener     = (*node)(nil)
	_ fs.NodeUnlinker   = (*node)(nil)
	_ fs.NodeRmdirer    = (*node)(nil)
	_ fs.NodeRenamer    = (*node)(nil)
	_ fs.NodeSymlinker  = (*node)(nil)
	_ fs.NodeReadlinker = (*node)(nil)
	_ fs.NodeLinker     = (*node)(nil)
	_ fs.NodeStatfser   = (*node)(nil)
	_ fs.NodeFsyncer    = (*node)(nil)
)

// maxDepth bounds a path walk up the tree.
const maxDepth = 4096

// path is n's provider path; false if n is no longer in the tree (an
// unlinked file still open), which must never be mistaken for the root.
func (n *node) path() (string, bool) {
	var segs []string
	in := n.EmbeddedInode()
	for !in.IsRoot() {
		name, parent := in.Parent()
		if parent == nil || len(segs) > maxDepth {
			return "", false
		}
		segs = append(segs, name)
		in = parent
	}
	var b strings.Builder
	for i := len(segs) - 1; i >= 0; i-- {
		b.WriteByte('/')
		b.WriteString(segs[i])
	}
	if b.Len() == 0 {
		return "/", true
	}
	return b.String(), true
}

func (n *node) child(name string) (string, syscall.Errno) {
	if err := validName(name); err != nil {
		return "", errno(err)
	}
	p, ok := n.path()
	if !ok {
		return "", syscall.ENOENT
	}
	if p == "/" {
		return "/" + name, 0
	}
	return p + "/" + name, 0
}

func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	return fs.ToErrno(err)
}

func (r *fsRoot) fill(a Attr, out *fuse.Attr) {
	out.Ino = a.Ino
	out.Mode = a.Mode
	out.Nlink = a.Nlink
	out.Uid, out.Gid = a.UID, a.GID
	if r.owner != nil {
		out.Uid, out.Gid = r.owner.UID, r.owner.GID
	}
	out.Size = uint64(max(a.Size, 0))
	out.Blocks = uint64(max(a.Blocks, 0))
	out.Blksize = 4096
	out.Rdev = uint32(a.Rdev)
	out.SetTimes(&a.Atime, &a.Mtime, &a.Ctime)
}

// newChild registers a's node under n (or finds the one already there).
func (n *node) newChild(ctx context.Context, a Attr, out *fuse.EntryOut) *fs.Inode {
	n.r.fill(a, &out.Attr)
	return n.NewInode(ctx, &node{r: n.r}, fs.StableAttr{Mode: a.Mode & unix.S_IFMT, Ino: a.Ino})
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	p, e := n.child(name)
	if e != 0 {
		return nil, e
	}
	a, err := n.r.p.Lstat(p)
	if err != nil {
		return nil, errno(err)
	}
	return n.newChild(ctx, a, out), 0
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	var a Attr
	var err error
	if h, ok := f.(*handle); ok {
		a, err = h.f.Stat()
	} else if p, ok := n.path(); ok {
		a, err = n.r.p.Lstat(p)
	} else {
		return syscall.ENOENT
	}
	if err != nil {
		return errno(err)
	}
	n.r.fill(a, &out.Attr)
	return 0
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	var s SetAttr
	if m, ok := in.GetMode(); ok {
		s.Mode = &m
	}
	if n.r.owner == nil { // with an Owner, chown is a no-op: the guest sees one owner anyway
		if u, ok := in.GetUID(); ok {
			s.UID = &u
		}
		if g, ok := in.GetGID(); ok {
			s.GID = &g
		}
	}
	if t, ok := in.GetATime(); ok {
		s.Atime = &t
	}
	if t, ok := in.GetMTime(); ok {
		s.Mtime = &t
	}
	h, _ := f.(*handle)
	if size, ok := in.GetSize(); ok {
		if size > 1<<62 {
			return syscall.EFBIG
		}
		sz := int64(size)
		if h != nil { // ftruncate: works on an unlinked open file too
			if err := h.f.Truncate(sz); err != nil {
				return errno(err)
			}
		} else {
			s.Size = &sz
		}
	}
	p, ok := n.path()
	var a Attr
	var err error
	switch {
	case ok:
		a, err = n.r.p.Setattr(p, s)
	case h != nil && s == (SetAttr{}):
		a, err = h.f.Stat()
	default:
		return syscall.ENOENT
	}
	if err != nil {
		return errno(err)
	}
	n.r.fill(a, &out.Attr)
	return 0
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	p, ok := n.path()
	if !ok {
		return nil, syscall.ENOENT
	}
	es, err := n.r.p.ReadDir(p)
	if err != nil {
		return nil, errno(err)
	}
	// "." and ".." first, as on any Linux filesystem (ls -a and some
	// scripts expect them); go-fuse keeps them out of its tree.
	self := n.StableAttr().Ino
	up := self
	if _, parent := n.Parent(); parent != nil {
		up = parent.StableAttr().Ino
	}
	list := make([]fuse.DirEntry, 0, len(es)+2)
	list = append(list, fuse.DirEntry{Name: ".", Mode: fuse.S_IFDIR, Ino: self}, fuse.DirEntry{Name: "..", Mode: fuse.S_IFDIR, Ino: up})
	for _, e := range es {
		list = append(list, fuse.DirEntry{Name: e.Name, Mode: e.Mode, Ino: e.Ino})
	}
	return fs.NewListDirStream(list), 0
}

// made looks up a just-made entry and registers its node.
func (n *node) made(ctx context.Context, p string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	a, err := n.r.p.Lstat(p)
	if err != nil {
		return nil, errno(err)
	}
	return n.newChild(ctx, a, out), 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	p, e := n.child(name)
	if e != 0 {
		return nil, e
	}
	if err := n.r.p.Mkdir(p, mode&0o7777); err != nil {
		return nil, errno(err)
	}
	return n.made(ctx, p, out)
}

// fileFlags keeps what providers understand of open(2) flags.
func fileFlags(flags uint32) int {
	return int(flags) & (unix.O_ACCMODE | unix.O_APPEND | unix.O_TRUNC | unix.O_EXCL)
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	p, e := n.child(name)
	if e != 0 {
		return nil, nil, 0, e
	}
	f, err := n.r.p.Create(p, fileFlags(flags), mode&0o7777)
	if err != nil {
		return nil, nil, 0, errno(err)
	}
	a, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, 0, errno(err)
	}
	return n.newChild(ctx, a, out), &handle{f: f}, n.r.openFlags, 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	p, ok := n.path()
	if !ok {
		return nil, 0, syscall.ENOENT
	}
	f, err := n.r.p.Open(p, fileFlags(flags)&^unix.O_EXCL)
	if err != nil {
		return nil, 0, errno(err)
	}
	return &handle{f: f}, n.r.openFlags, 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	return n.remove(name, false)
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	return n.remove(name, true)
}

// remove checks the type rmdir or unlink expects before removing.
func (n *node) remove(name string, dir bool) syscall.Errno {
	p, e := n.child(name)
	if e != 0 {
		return e
	}
	a, err := n.r.p.Lstat(p)
	if err != nil {
		return errno(err)
	}
	switch {
	case dir && !a.IsDir():
		return syscall.ENOTDIR
	case !dir && a.IsDir():
		return syscall.EISDIR
	}
	return errno(n.r.p.Remove(p))
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	from, e := n.child(name)
	if e != 0 {
		return e
	}
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	to, e := np.child(newName)
	if e != 0 {
		return e
	}
	switch flags {
	case 0:
	case unix.RENAME_NOREPLACE:
		if _, err := n.r.p.Lstat(to); err == nil {
			return syscall.EEXIST
		}
	default:
		return syscall.EINVAL // RENAME_EXCHANGE, RENAME_WHITEOUT
	}
	return errno(n.r.p.Rename(from, to))
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	p, e := n.child(name)
	if e != 0 {
		return nil, e
	}
	if err := n.r.p.Symlink(target, p); err != nil {
		return nil, errno(err)
	}
	return n.made(ctx, p, out)
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	p, ok := n.path()
	if !ok {
		return nil, syscall.ENOENT
	}
	t, err := n.r.p.Readlink(p)
	if err != nil {
		return nil, errno(err)
	}
	return []byte(t), 0
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	t, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	existing, ok := t.path()
	if !ok {
		return nil, syscall.ENOENT
	}
	p, e := n.child(name)
	if e != 0 {
		return nil, e
	}
	if err := n.r.p.Link(existing, p); err != nil {
		return nil, errno(err)
	}
	return n.made(ctx, p, out)
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	s, err := n.r.p.Statfs()
	if err != nil {
		return errno(err)
	}
	out.Blocks, out.Bfree, out.Bavail = s.Blocks, s.Bfree, s.Bavail
	out.Files, out.Ffree = s.Files, s.Ffree
	out.Bsize, out.NameLen, out.Frsize = s.Bsize, s.NameLen, s.Bsize
	return 0
}

func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	if h, ok := f.(*handle); ok {
		return errno(h.f.Sync())
	}
	return 0
}

// handle is an open file.
type handle struct{ f File }

var (
	_ fs.FileReader   = (*handle)(nil)
	_ fs.FileWriter   = (*handle)(nil)
	_ fs.FileReleaser = (*handle)(nil)
	_ fs.FileFlusher  = (*handle)(nil)
)

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := h.f.ReadAt(dest, off)
	if err != nil && n == 0 {
		return nil, errno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	n, err := h.f.WriteAt(data, off)
	if err != nil && n == 0 {
		return 0, errno(err)
	}
	return uint32(n), 0
}

// Flush has nothing to do (writes go straight to the provider); ENOSYS
// tells the kernel so once, which saves a round trip on every close.
func (h *handle) Flush(ctx context.Context) syscall.Errno   { return syscall.ENOSYS }
func (h *handle) Release(ctx context.Context) syscall.Errno { return errno(h.f.Close()) }

// nodeFS builds the go-fuse file system for p.
func nodeFS(p Provider, o ServeOptions) (fuse.RawFileSystem, error) {
	a, err := p.Lstat("/")
	if err != nil {
		return nil, err
	}
	cache := o.CacheTimeout
	if cache == 0 {
		cache = time.Second
	}
	cache = max(cache, 0)
	var neg time.Duration
	root := &node{r: &fsRoot{p: p, owner: o.Owner}}
	if cache > 0 {
		root.r.openFlags = fuse.FOPEN_KEEP_CACHE
	}
	return fs.NewNodeFS(root, &fs.Options{
		EntryTimeout:    &cache,
		AttrTimeout:     &cache,
		NegativeTimeout: &neg,
		RootStableAttr:  &fs.StableAttr{Ino: a.Ino, Mode: unix.S_IFDIR},
		Logger:          discardLogger,
	}), nil
}
