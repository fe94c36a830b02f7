package vfs

import (
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Memory is a file tree held in memory, bounded in bytes and entries.
type Memory struct {
	mu       sync.Mutex
	root     *memNode
	next     uint64
	used     int64 // bytes of file data and symlink targets
	entries  int
	maxBytes int64
	maxFiles int
}

type memNode struct {
	ino                 uint64
	mode                uint32
	nlink               uint32
	uid, gid            uint32
	data                []byte
	target              string
	kids                map[string]*memNode
	opens               int // open Files: an unlinked file's data lives until the last closes
	atime, mtime, ctime time.Time
}

// NewMemory returns an empty tree that refuses (ENOSPC) more than maxBytes
// of data or maxFiles entries; zero means 64 MiB and 100,000.
func NewMemory(maxBytes int64, maxFiles int) *Memory {
	if maxBytes <= 0 {
		maxBytes = 64 << 20
	}
	if maxFiles <= 0 {
		maxFiles = 100_000
	}
	m := &Memory{next: 1, maxBytes: maxBytes, maxFiles: maxFiles}
	m.root = m.newNode(unix.S_IFDIR | 0o755)
	m.root.nlink = 2
	return m
}

func (m *Memory) newNode(mode uint32) *memNode {
	now := time.Now()
	n := &memNode{ino: m.next, mode: mode, nlink: 1, uid: uint32(unix.Geteuid()), gid: uint32(unix.Getegid()), atime: now, mtime: now, ctime: now}
	m.next++
	if mode&unix.S_IFMT == unix.S_IFDIR {
		n.kids = map[string]*memNode{}
	}
	return n
}

func (n *memNode) isDir() bool { return n.mode&unix.S_IFMT == unix.S_IFDIR }

func (n *memNode) attr() Attr {
	return Attr{Ino: n.ino, Mode: n.mode, Nlink: n.nlink, UID: n.uid, GID: n.gid, Size: n.size(),
		Blocks: (n.size() + 511) / 512, Atime: n.atime, Mtime: n.mtime, Ctime: n.ctime}
}

func (n *memNode) size() int64 {
	switch {
	case n.isDir():
		return 4096
	case n.mode&unix.S_IFMT == unix.S_IFLNK:
		return int64(len(n.target))
	}
	return int64(len(n.data))
}

// walk finds p; m.mu is held. Intermediate symlinks are not followed:
// callers (the FUSE kernel side) resolve them.
func (m *Memory) walk(p string) (*memNode, error) {
	n := m.root
	for _, name := range strings.Split(Clean(p), "/")[1:] {
		if name == "" {
			continue
		}
		if !n.isDir() {
			return nil, unix.ENOTDIR
		}
		c, ok := n.kids[name]
		if !ok {
			return nil, unix.ENOENT
		}
		n = c
	}
	return n, nil
}

// parent finds p's directory and checks p's name; m.mu is held.
func (m *Memory) parent(p string) (*memNode, string, error) {
	dir, name := split(p)
	if err := validName(name); err != nil {
		return nil, "", err
	}
	d, err := m.walk(dir)
	if err != nil {
		return nil, "", err
	}
	if !d.isDir() {
		return nil, "", unix.ENOTDIR
	}
	return d, name, nil
}

func (m *Memory) add(d *memNode, name string, n *memNode) error {
	if m.entries >= m.maxFiles {
		return unix.ENOSPC
	}
	m.entries++
	d.kids[name] = n
	if n.isDir() {
		d.nlink++
	}
	d.mtime, d.ctime = time.Now(), time.Now()
	return nil
}

func (m *Memory) Lstat(p string) (Attr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.walk(p)
	if err != nil {
		return Attr{}, err
	}
	return n.attr(), nil
}

// Stat follows a final symlink target within the tree (up to 40 hops).
func (m *Memory) Stat(p string) (Attr, error) {
	p = Clean(p)
	for range 40 {
		m.mu.Lock()
		n, err := m.walk(p)
		if err != nil {
			m.mu.Unlock()
			return Attr{}, err
		}
		if n.mode&unix.S_IFMT != unix.S_IFLNK {
			a := n.attr()
			m.mu.Unlock()
			return a, nil
		}
		t := n.target
		m.mu.Unlock()
		if !strings.HasPrefix(t, "/") {
			dir, _ := split(p)
			t = dir + "/" + t
		}
		p = Clean(t)
	}
	return Attr{}, unix.ELOOP
}

func (m *Memory) ReadDir(p string) ([]DirEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.walk(p)
	if err != nil {
		return nil, err
	}
	if !n.isDir() {
		return nil, unix.ENOTDIR
	}
	out := make([]DirEntry, 0, len(n.kids))
	for name, c := range n.kids {
		out = append(out, DirEntry{Name: name, Mode: c.mode & unix.S_IFMT, Ino: c.ino})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (m *Memory) Open(p string, flags int) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.walk(p)
	if err != nil {
		return nil, err
	}
	return m.open(n, flags)
}

func (m *Memory) open(n *memNode, flags int) (File, error) {
	switch n.mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if writing(flags) {
			return nil, unix.EISDIR
		}
	case unix.S_IFLNK:
		return nil, unix.ELOOP
	}
	if flags&unix.O_TRUNC != 0 && n.mode&unix.S_IFMT == unix.S_IFREG {
		m.used -= int64(len(n.data))
		n.data = nil
		n.mtime, n.ctime = time.Now(), time.Now()
	}
	n.opens++
	return &memFile{m: m, n: n, appendOnly: flags&unix.O_APPEND != 0}, nil
}

func (m *Memory) Create(p string, flags int, mode uint32) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, name, err := m.parent(p)
	if err != nil {
		return nil, err
	}
	if n, ok := d.kids[name]; ok {
		if flags&unix.O_EXCL != 0 {
			return nil, unix.EEXIST
		}
		return m.open(n, flags)
	}
	n := m.newNode(unix.S_IFREG | mode&0o7777)
	if err := m.add(d, name, n); err != nil {
		return nil, err
	}
	return m.open(n, flags&^unix.O_TRUNC)
}

func (m *Memory) Mkdir(p string, mode uint32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, name, err := m.parent(p)
	if err != nil {
		return err
	}
	if _, ok := d.kids[name]; ok {
		return unix.EEXIST
	}
	n := m.newNode(unix.S_IFDIR | mode&0o7777)
	n.nlink = 2
	return m.add(d, name, n)
}

// unlinkFrom drops d's entry name (n); m.mu is held.
func (m *Memory) unlinkFrom(d *memNode, name string, n *memNode) {
	delete(d.kids, name)
	m.entries--
	now := time.Now()
	d.mtime, d.ctime, n.ctime = now, now, now
	if n.isDir() {
		d.nlink--
		n.nlink = 0
		return
	}
	n.nlink--
	m.release(n)
}

// release frees the data of a file no name and no open File refers to, so
// a guest cannot hide data from the bound by unlinking open files.
func (m *Memory) release(n *memNode) {
	if n.nlink == 0 && n.opens == 0 {
		m.used -= n.size()
		n.data, n.target = nil, ""
	}
}

func (m *Memory) Remove(p string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, name, err := m.parent(p)
	if err != nil {
		return err
	}
	n, ok := d.kids[name]
	if !ok {
		return unix.ENOENT
	}
	if n.isDir() && len(n.kids) > 0 {
		return unix.ENOTEMPTY
	}
	m.unlinkFrom(d, name, n)
	return nil
}

func (m *Memory) Rename(from, to string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	fd, fname, err := m.parent(from)
	if err != nil {
		return err
	}
	td, tname, err := m.parent(to)
	if err != nil {
		return err
	}
	n, ok := fd.kids[fname]
	if !ok {
		return unix.ENOENT
	}
	if n.isDir() && (Clean(to)+"/" == Clean(from)+"/" || strings.HasPrefix(Clean(to)+"/", Clean(from)+"/")) {
		if Clean(to) == Clean(from) {
			return nil
		}
		return unix.EINVAL // into itself
	}
	if old, ok := td.kids[tname]; ok {
		if old == n {
			return nil
		}
		switch {
		case n.isDir() && !old.isDir():
			return unix.ENOTDIR
		case !n.isDir() && old.isDir():
			return unix.EISDIR
		case old.isDir() && len(old.kids) > 0:
			return unix.ENOTEMPTY
		}
		m.unlinkFrom(td, tname, old)
	}
	delete(fd.kids, fname)
	if n.isDir() {
		fd.nlink--
		td.nlink++
	}
	td.kids[tname] = n
	now := time.Now()
	fd.mtime, fd.ctime, td.mtime, td.ctime, n.ctime = now, now, now, now, now
	return nil
}

func (m *Memory) Symlink(target, p string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, name, err := m.parent(p)
	if err != nil {
		return err
	}
	if _, ok := d.kids[name]; ok {
		return unix.EEXIST
	}
	if len(target) > 4095 {
		return unix.ENAMETOOLONG
	}
	if m.used+int64(len(target)) > m.maxBytes {
		return unix.ENOSPC
	}
	n := m.newNode(unix.S_IFLNK | 0o777)
	n.target = target
	if err := m.add(d, name, n); err != nil {
		return err
	}
	m.used += int64(len(target))
	return nil
}

func (m *Memory) Readlink(p string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.walk(p)
	if err != nil {
		return "", err
	}
	if n.mode&unix.S_IFMT != unix.S_IFLNK {
		return "", unix.EINVAL
	}
	return n.target, nil
}

func (m *Memory) Link(existing, p string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.walk(existing)
	if err != nil {
		return err
	}
	if n.isDir() {
		return unix.EPERM
	}
	d, name, err := m.parent(p)
	if err != nil {
		return err
	}
	if _, ok := d.kids[name]; ok {
		return unix.EEXIST
	}
	if err := m.add(d, name, n); err != nil {
		return err
	}
	n.nlink++
	n.ctime = time.Now()
	return nil
}

func (m *Memory) Setattr(p string, a SetAttr) (Attr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.walk(p)
	if err != nil {
		return Attr{}, err
	}
	if a.Size != nil {
		if err := m.truncate(n, *a.Size); err != nil {
			return Attr{}, err
		}
	}
	if a.Mode != nil {
		n.mode = n.mode&unix.S_IFMT | *a.Mode&0o7777
	}
	if a.UID != nil {
		n.uid = *a.UID
	}
	if a.GID != nil {
		n.gid = *a.GID
	}
	if a.Atime != nil {
		n.atime = *a.Atime
	}
	if a.Mtime != nil {
		n.mtime = *a.Mtime
	}
	n.ctime = time.Now()
	return n.attr(), nil
}

// truncate resizes n's data; m.mu is held.
func (m *Memory) truncate(n *memNode, size int64) error {
	switch {
	case n.isDir():
		return unix.EISDIR
	case n.mode&unix.S_IFMT != unix.S_IFREG:
		return unix.EINVAL
	case size < 0:
		return unix.EINVAL
	}
	grow := size - int64(len(n.data))
	if m.used+grow > m.maxBytes {
		return unix.ENOSPC
	}
	if grow > 0 {
		n.data = append(n.data, make([]byte, grow)...)
	} else {
		n.data = n.data[:size:size]
	}
	m.used += grow
	n.mtime, n.ctime = time.Now(), time.Now()
	return nil
}

func (m *Memory) Statfs() (Statfs, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	free := uint64(m.maxBytes-m.used) / 4096
	return Statfs{Blocks: uint64(m.maxBytes) / 4096, Bfree: free, Bavail: free,
		Files: uint64(m.maxFiles), Ffree: uint64(m.maxFiles - m.entries), Bsize: 4096, NameLen: 255}, nil
}

type memFile struct {
	m          *Memory
	n          *memNode
	appendOnly bool
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.n.isDir() {
		return 0, unix.EISDIR
	}
	if off < 0 {
		return 0, unix.EINVAL
	}
	if off >= int64(len(f.n.data)) {
		return 0, nil
	}
	f.n.atime = time.Now()
	return copy(p, f.n.data[off:]), nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.n.isDir() {
		return 0, unix.EISDIR
	}
	if f.appendOnly {
		off = int64(len(f.n.data))
	}
	if off < 0 || off > 1<<40 {
		return 0, unix.EFBIG
	}
	if end := off + int64(len(p)); end > int64(len(f.n.data)) {
		if err := f.m.truncate(f.n, end); err != nil {
			return 0, err
		}
	}
	copy(f.n.data[off:], p)
	f.n.mtime, f.n.ctime = time.Now(), time.Now()
	return len(p), nil
}

func (f *memFile) Stat() (Attr, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	return f.n.attr(), nil
}

func (f *memFile) Truncate(size int64) error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	return f.m.truncate(f.n, size)
}

func (f *memFile) Sync() error { return nil }
func (f *memFile) Close() error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.n != nil {
		f.n.opens--
		f.m.release(f.n)
		f.n = nil
	}
	return nil
}
