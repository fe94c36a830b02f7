package workspace

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultHide is what every sandbox hides in its workspace unless told not
// to (--no-hide): where secrets usually sit in a project.
var DefaultHide = []string{".env", ".env.*", "*.pem", "*.key", "id_*"}

// Bounds of a hide pattern and of what it may match.
const (
	maxPatternLen  = 1024
	maxPatternSegs = 64
	maxPathSegs    = 4096
	// MaxHidden bounds the paths one sandbox masks (each is a mount): a
	// tree with more matches should hide their directory instead.
	MaxHidden = 4096
)

// Hider matches workspace paths against hide patterns, which follow
// .gitignore's rules: a pattern without a slash matches a name at any
// depth (.env, *.pem); one with a slash matches from the workspace's root
// (/secrets, config/*.key); a trailing slash matches directories only; **
// matches any number of directories (**/prod/*.key, certs/**); *, ? and
// [...] never match a slash. Negation (!) is not supported: hiding is a
// deny list. Matching is case-sensitive, as the file systems are.
type Hider struct {
	pats []hidePattern
}

type hidePattern struct {
	src     string
	segs    []string // "**" is any number of names
	dirOnly bool
	name    string // for a pattern on names alone (.env, *.pem): the glob, matched against the last name
}

// NewHider checks and compiles relative patterns.
func NewHider(patterns []string) (*Hider, error) {
	h := &Hider{}
	for _, p := range patterns {
		hp, err := parseHide(p)
		if err != nil {
			return nil, err
		}
		h.pats = append(h.pats, hp)
	}
	return h, nil
}

func parseHide(p string) (hidePattern, error) {
	bad := func(why string) (hidePattern, error) {
		return hidePattern{}, fmt.Errorf("%q: %s", p, why)
	}
	q := strings.TrimSpace(p)
	switch {
	case q == "" || q == "/" || q == "." || q == "./":
		return bad("give a name or glob (.env, *.pem) or a path from the workspace root (config/*.key)")
	case len(q) > maxPatternLen:
		return bad(fmt.Sprintf("longer than %d bytes", maxPatternLen))
	case strings.HasPrefix(q, "!"):
		return bad("negation (!) is not supported: hide patterns only ever hide more")
	case strings.ContainsRune(q, 0):
		return bad("a pattern cannot hold a NUL byte")
	}
	hp := hidePattern{src: p}
	q = strings.TrimPrefix(q, "./")
	if strings.HasSuffix(q, "/") {
		hp.dirOnly = true
		q = strings.TrimRight(q, "/")
	}
	anchored := strings.Contains(q, "/")
	for _, s := range strings.Split(strings.TrimPrefix(q, "/"), "/") {
		switch s {
		case "", ".":
			continue
		case "..":
			return bad("a pattern may not climb out of the workspace with ..: write an absolute path")
		}
		if _, err := path.Match(s, ""); err != nil {
			return bad("bad glob (use *, ?, [...] and ** as in .gitignore)")
		}
		if strings.Contains(s, "**") && s != "**" {
			s = strings.ReplaceAll(s, "**", "*") // as .gitignore: a plain * here
		}
		if s == "**" && len(hp.segs) > 0 && hp.segs[len(hp.segs)-1] == "**" {
			continue
		}
		hp.segs = append(hp.segs, s)
	}
	if len(hp.segs) == 0 || len(hp.segs) == 1 && hp.segs[0] == "**" {
		return bad("it would hide the whole workspace")
	}
	// dir/** hides all that is in dir: masking dir itself shows the same
	// (an empty directory) with one mount instead of one per entry.
	if n := len(hp.segs); n > 1 && hp.segs[n-1] == "**" {
		hp.segs, hp.dirOnly = hp.segs[:n-1], true
	}
	if !anchored {
		if len(hp.segs) == 1 {
			hp.name = hp.segs[0]
		}
		hp.segs = append([]string{"**"}, hp.segs...)
	}
	if len(hp.segs) > maxPatternSegs {
		return bad(fmt.Sprintf("more than %d path elements", maxPatternSegs))
	}
	return hp, nil
}

// Match reports whether rel (relative to the workspace, slash-separated)
// itself matches a pattern; isDir says whether it is a directory.
func (h *Hider) Match(rel string, isDir bool) bool {
	if h == nil || rel == "" || rel == "." {
		return false
	}
	// Most patterns are on names alone: those need only the last name, and
	// the walk at every start asks for each entry of the workspace.
	base := rel[strings.LastIndexByte(rel, '/')+1:]
	var names []string
	for i := range h.pats {
		p := &h.pats[i]
		if p.dirOnly && !isDir {
			continue
		}
		if p.name != "" {
			if ok, _ := path.Match(p.name, base); ok {
				return true
			}
			continue
		}
		if names == nil {
			if names = strings.Split(rel, "/"); len(names) > maxPathSegs {
				return true // deeper than any file system allows: refuse to show it
			}
		}
		if matchSegs(p.segs, names) {
			return true
		}
	}
	return false
}

// Covers reports whether rel or one of its parent directories matches:
// whether rel lies in what the sandbox cannot see. A directory-only
// pattern is taken to match rel itself too, whose kind is not known here:
// the review leaves alone a file named like a hidden directory.
func (h *Hider) Covers(rel string) bool {
	if h == nil || len(h.pats) == 0 {
		return false
	}
	if h.Match(rel, true) {
		return true
	}
	for p := parent(rel); p != ""; p = parent(p) {
		if h.Match(p, true) {
			return true
		}
	}
	return false
}

// matchSegs matches names against segs, ** taking any number of names, in
// time bounded by len(segs)*len(names): a table of which suffixes match.
func matchSegs(segs, names []string) bool {
	m, n := len(segs), len(names)
	// next[j]: segs[i+1:] matches names[j:]; cur the same for segs[i:].
	next := make([]bool, n+1)
	cur := make([]bool, n+1)
	next[n] = true // no segs match no names
	for i := m - 1; i >= 0; i-- {
		s := segs[i]
		cur[n] = s == "**" && next[n]
		for j := n - 1; j >= 0; j-- {
			if s == "**" {
				cur[j] = next[j] || cur[j+1]
			} else {
				ok, _ := path.Match(s, names[j])
				cur[j] = ok && next[j+1]
			}
		}
		next, cur = cur, next
	}
	return next[0]
}

// FindHidden walks root and returns the absolute paths to mask for h: each
// matching file or directory (whose contents are not walked), a matching
// symlink's target when it lies in root (masking a link would mask where
// it leads anyway, and reading through it must show nothing); and every
// other name in root of a hidden file's inode (a hard link made before
// the start reads the same bytes). It stops with an error past MaxHidden
// paths.
//
// With a cacheFile, a directory whose identity, mtime and ctime are what
// they were at the last walk (and had settled by then) is not read again:
// its matches and subdirectories are the cache's. Entries come and go
// only by changing their directory's mtime, and nothing but the kernel
// sets ctime, so an unchanged directory holds the same names. A start in
// a tree of 50,000 entries stats its directories instead of reading them.
func FindHidden(root string, h *Hider, cacheFile string) ([]string, error) {
	if h == nil || len(h.pats) == 0 {
		return nil, nil
	}
	w := &hideWalk{root: root, h: h, old: loadHideCache(cacheFile, root, h), now: time.Now().UnixNano()}
	w.new = hideCache{Root: root, Patterns: h.sources(), Dirs: map[string]hideDir{}}
	if err := w.dir(""); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var out []string
	linked := map[[2]uint64]bool{} // hidden regular files with other names
	seen := map[string]bool{}
	add := func(p string) error {
		if seen[p] {
			return nil
		}
		if len(out) == MaxHidden {
			return fmt.Errorf("filesystem.hide: more than %d paths in %s match %s: hide the directories that hold them instead", MaxHidden, root, h.describe())
		}
		seen[p] = true
		out = append(out, p)
		return nil
	}
	for _, p := range w.found {
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink > 1 {
			linked[[2]uint64{uint64(st.Dev), uint64(st.Ino)}] = true
		}
		if err := add(p); err != nil {
			return nil, err
		}
	}
	for _, p := range w.links {
		// Only a target in the workspace: one outside it shows inside
		// as the sandbox's view of the host has it (the home there is
		// private; a system file is readable by design), and masking a
		// host path a repository's link names (/bin/sh) would let the
		// repository break the sandbox it runs in. Resolved every time:
		// what a link leads to can change without its directory.
		target, err := filepath.EvalSymlinks(p)
		if err != nil || !within(root, target) {
			continue // dangling, the workspace itself, or outside it
		}
		if err := add(target); err != nil {
			return nil, err
		}
	}
	w.save(cacheFile)
	if len(linked) == 0 {
		return out, nil
	}
	// A second walk, only when a hidden file has other names: find them.
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || seen[p] {
			if err == nil && d.IsDir() && seen[p] {
				return filepath.SkipDir
			}
			return nil
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil && linked[[2]uint64{uint64(st.Dev), uint64(st.Ino)}] {
			return add(p)
		}
		return nil
	})
	return out, err
}

// hideCache is what a walk of one tree for one set of patterns found, by
// directory.
type hideCache struct {
	Root     string             `json:"root"`
	Patterns []string           `json:"patterns"`
	Dirs     map[string]hideDir `json:"dirs"` // by path from the root, "" the root
}

type hideDir struct {
	Stamp   [4]int64 `json:"s,omitempty"` // dev, inode, mtime, ctime; zero: read it again
	Subdirs []string `json:"d,omitempty"` // walked into
	Found   []string `json:"f,omitempty"` // matching files and directories
	Links   []string `json:"l,omitempty"` // matching symlinks
}

// maxHideCache bounds the cache file read.
const maxHideCache = 64 << 20

type hideWalk struct {
	root         string
	h            *Hider
	old, new     hideCache
	now          int64
	found, links []string
}

func (w *hideWalk) abs(rel string) string {
	if rel == "" {
		return w.root
	}
	return w.root + "/" + rel
}

func (w *hideWalk) dir(rel string) error {
	p := w.abs(rel)
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if rel == "" {
			if err == nil {
				err = fmt.Errorf("%s is not a directory", p)
			}
			return err
		}
		return nil // gone since its parent was read
	}
	stamp := [4]int64{int64(st.Dev), int64(st.Ino), st.Mtim.Nano(), st.Ctim.Nano()}
	e, ok := w.old.Dirs[rel]
	if !ok || e.Stamp != stamp {
		e = hideDir{}
		f, err := os.Open(p)
		if err != nil {
			return nil // unreadable here is unreadable inside too
		}
		ents, err := f.ReadDir(-1)
		f.Close()
		if err != nil {
			return nil
		}
		// A directory changed in the same timestamp tick as this read
		// could change again unseen: it is read again next time.
		if w.now-max(stamp[2], stamp[3]) >= int64(settled) {
			e.Stamp = stamp
		}
		for _, d := range ents {
			name := d.Name()
			r := name
			if rel != "" {
				r = rel + "/" + name
			}
			switch {
			case w.h.Match(r, d.IsDir()) && d.Type()&fs.ModeSymlink != 0:
				e.Links = append(e.Links, name)
			case w.h.Match(r, d.IsDir()):
				e.Found = append(e.Found, name)
			case d.IsDir():
				e.Subdirs = append(e.Subdirs, name)
			}
		}
	}
	w.new.Dirs[rel] = e
	for _, n := range e.Found {
		w.found = append(w.found, filepath.Join(p, n))
	}
	for _, n := range e.Links {
		w.links = append(w.links, filepath.Join(p, n))
	}
	if len(w.found) > MaxHidden {
		return fmt.Errorf("filesystem.hide: more than %d paths in %s match %s: hide the directories that hold them instead", MaxHidden, w.root, w.h.describe())
	}
	for _, n := range e.Subdirs {
		r := n
		if rel != "" {
			r = rel + "/" + n
		}
		if err := w.dir(r); err != nil {
			return err
		}
	}
	return nil
}

// loadHideCache reads the cache of root's last walk for h's patterns: an
// empty one if there is none, or it is of another tree or patterns.
func loadHideCache(file, root string, h *Hider) hideCache {
	var c hideCache
	if file == "" {
		return c
	}
	data, err := readRegular(file, maxHideCache)
	if err != nil || json.Unmarshal(data, &c) != nil || c.Root != root || !slices.Equal(c.Patterns, h.sources()) {
		return hideCache{}
	}
	return c
}

// save writes the walk's cache atomically; a cache that cannot be written
// only costs the next start a full walk.
func (w *hideWalk) save(file string) {
	if file == "" {
		return
	}
	data, err := json.Marshal(w.new)
	if err != nil || os.MkdirAll(filepath.Dir(file), 0o700) != nil {
		return
	}
	f, err := os.CreateTemp(filepath.Dir(file), ".hide-*")
	if err != nil {
		return
	}
	_, werr := f.Write(data)
	if errors.Join(werr, f.Close()) != nil || os.Rename(f.Name(), file) != nil {
		os.Remove(f.Name())
	}
}

// readRegular reads a regular file of at most max bytes, not through a
// symlink.
func readRegular(p string, max int64) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() || st.Size() > max {
		return nil, fmt.Errorf("%s: not a regular file of at most %d bytes", p, max)
	}
	return io.ReadAll(io.LimitReader(f, max))
}

func (h *Hider) sources() []string {
	var s []string
	for _, p := range h.pats {
		s = append(s, p.src)
	}
	return s
}

func (h *Hider) describe() string {
	var s []string
	for _, p := range h.pats {
		s = append(s, p.src)
	}
	return strings.Join(s, ", ")
}
