package vfs

import (
	"hash/fnv"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Mount puts a provider at a path of a Router.
type Mount struct {
	Path     string // e.g. "/workspace"
	Provider Provider
}

// Router joins providers under path prefixes ("/workspace" → a RealDir,
// "/data" → ReadOnly(RealDir)...). Directories above the mounts are made
// up and read-only; a rename or link between providers is EXDEV.
type Router struct {
	mounts []routed // longest path first
	start  time.Time
}

type routed struct {
	path string
	p    Provider
	tag  uint64
}

// NewRouter checks and orders the mounts. "/" may be one of them.
func NewRouter(mounts ...Mount) (*Router, error) {
	r := &Router{start: time.Now()}
	seen := map[string]bool{}
	for i, m := range mounts {
		p := Clean(m.Path)
		if seen[p] || m.Provider == nil {
			return nil, unix.EINVAL
		}
		seen[p] = true
		r.mounts = append(r.mounts, routed{path: p, p: m.Provider, tag: uint64(i + 1)})
	}
	sort.Slice(r.mounts, func(i, j int) bool { return len(r.mounts[i].path) > len(r.mounts[j].path) })
	return r, nil
}

// route finds the provider serving p and p within it.
func (r *Router) route(p string) (*routed, string) {
	p = Clean(p)
	for i := range r.mounts {
		m := &r.mounts[i]
		if m.path == "/" {
			return m, p
		}
		if p == m.path {
			return m, "/"
		}
		if strings.HasPrefix(p, m.path+"/") {
			return m, p[len(m.path):]
		}
	}
	return nil, p
}

// virtual lists the names under a made-up directory p, or false if p is
// not above any mount.
func (r *Router) virtual(p string) ([]string, bool) {
	p = Clean(p)
	prefix := p + "/"
	if p == "/" {
		prefix = "/"
	}
	var names []string
	found := false
	for _, m := range r.mounts {
		if rest, ok := strings.CutPrefix(m.path, prefix); ok && m.path != p {
			found = true
			name, _, _ := strings.Cut(rest, "/")
			if !contains(names, name) {
				names = append(names, name)
			}
		}
	}
	sort.Strings(names)
	return names, found
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func (r *Router) virtualAttr(p string) Attr {
	h := fnv.New64a()
	h.Write([]byte(Clean(p)))
	return Attr{Ino: h.Sum64() | 1<<63, Mode: unix.S_IFDIR | 0o755, Nlink: 2, Size: 4096,
		Atime: r.start, Mtime: r.start, Ctime: r.start}
}

// get resolves p for a read: a provider, or a made-up directory.
func (r *Router) get(p string) (*routed, string, bool, error) {
	if _, ok := r.virtual(p); ok {
		return nil, p, true, nil
	}
	m, sub := r.route(p)
	if m == nil {
		return nil, "", false, unix.ENOENT
	}
	return m, sub, false, nil
}

// put resolves p for a change: made-up directories cannot change.
func (r *Router) put(p string) (*routed, string, error) {
	m, sub, virt, err := r.get(p)
	if err != nil {
		return nil, "", err
	}
	if virt {
		return nil, "", unix.EROFS
	}
	return m, sub, nil
}

// fix moves a mount's inode numbers into its own space.
func fix(tag uint64) func(Attr, error) (Attr, error) {
	return func(a Attr, err error) (Attr, error) {
		a.Ino = mixIno(a.Ino, tag)
		return a, err
	}
}

func (r *Router) Lstat(p string) (Attr, error) {
	m, sub, virt, err := r.get(p)
	if virt {
		return r.virtualAttr(p), nil
	}
	if err != nil {
		return Attr{}, err
	}
	return fix(m.tag)(m.p.Lstat(sub))
}

func (r *Router) Stat(p string) (Attr, error) {
	m, sub, virt, err := r.get(p)
	if virt {
		return r.virtualAttr(p), nil
	}
	if err != nil {
		return Attr{}, err
	}
	return fix(m.tag)(m.p.Stat(sub))
}

func (r *Router) ReadDir(p string) ([]DirEntry, error) {
	if names, ok := r.virtual(p); ok {
		var out []DirEntry
		// A mount at "/" shows its own entries beside the mount points.
		if m, sub := r.route(p); m != nil {
			if es, err := m.p.ReadDir(sub); err == nil {
				for _, e := range es {
					if !contains(names, e.Name) {
						e.Ino = mixIno(e.Ino, m.tag)
						out = append(out, e)
					}
				}
			}
		}
		for _, n := range names {
			out = append(out, DirEntry{Name: n, Mode: unix.S_IFDIR, Ino: r.virtualAttr(Clean(p) + "/" + n).Ino})
		}
		return out, nil
	}
	m, sub := r.route(p)
	if m == nil {
		return nil, unix.ENOENT
	}
	es, err := m.p.ReadDir(sub)
	for i := range es {
		es[i].Ino = mixIno(es[i].Ino, m.tag)
	}
	return es, err
}

func (r *Router) Open(p string, flags int) (File, error) {
	m, sub, virt, err := r.get(p)
	if virt {
		return nil, unix.EISDIR
	}
	if err != nil {
		return nil, err
	}
	f, err := m.p.Open(sub, flags)
	if err != nil {
		return nil, err
	}
	return tagFile{f, m.tag}, nil
}

func (r *Router) Create(p string, flags int, mode uint32) (File, error) {
	m, sub, err := r.put(p)
	if err != nil {
		return nil, err
	}
	f, err := m.p.Create(sub, flags, mode)
	if err != nil {
		return nil, err
	}
	return tagFile{f, m.tag}, nil
}

func (r *Router) Mkdir(p string, mode uint32) error {
	if _, ok := r.virtual(p); ok {
		return unix.EEXIST
	}
	m, sub, err := r.put(p)
	if err != nil {
		return err
	}
	return m.p.Mkdir(sub, mode)
}

func (r *Router) Remove(p string) error {
	m, sub, err := r.put(p)
	if err != nil {
		return err
	}
	if sub == "/" {
		return unix.EBUSY
	}
	return m.p.Remove(sub)
}

// pair resolves two paths that must be on the same provider.
func (r *Router) pair(a, b string) (*routed, string, string, error) {
	ma, sa, err := r.put(a)
	if err != nil {
		return nil, "", "", err
	}
	mb, sb, err := r.put(b)
	if err != nil {
		return nil, "", "", err
	}
	if ma != mb {
		return nil, "", "", unix.EXDEV
	}
	if sa == "/" || sb == "/" {
		return nil, "", "", unix.EBUSY
	}
	return ma, sa, sb, nil
}

func (r *Router) Rename(from, to string) error {
	m, a, b, err := r.pair(from, to)
	if err != nil {
		return err
	}
	return m.p.Rename(a, b)
}

func (r *Router) Link(existing, p string) error {
	m, a, b, err := r.pair(existing, p)
	if err != nil {
		return err
	}
	return m.p.Link(a, b)
}

func (r *Router) Symlink(target, p string) error {
	m, sub, err := r.put(p)
	if err != nil {
		return err
	}
	return m.p.Symlink(target, sub)
}

func (r *Router) Readlink(p string) (string, error) {
	m, sub, virt, err := r.get(p)
	if virt {
		return "", unix.EINVAL
	}
	if err != nil {
		return "", err
	}
	return m.p.Readlink(sub)
}

func (r *Router) Setattr(p string, a SetAttr) (Attr, error) {
	m, sub, err := r.put(p)
	if err != nil {
		return Attr{}, err
	}
	return fix(m.tag)(m.p.Setattr(sub, a))
}

// Statfs reports the first mount's file system ("/" if mounted, else the
// shortest path).
func (r *Router) Statfs() (Statfs, error) {
	if len(r.mounts) == 0 {
		return Statfs{Bsize: 4096, NameLen: 255}, nil
	}
	return r.mounts[len(r.mounts)-1].p.Statfs()
}

type tagFile struct {
	File
	tag uint64
}

func (f tagFile) Stat() (Attr, error) {
	a, err := f.File.Stat()
	a.Ino = mixIno(a.Ino, f.tag)
	return a, err
}
