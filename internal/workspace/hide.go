package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
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
// it leads anyway, and reading through it must show nothing); and
// every other name in root of a hidden file's inode (a hard link made
// before the start reads the same bytes). It stops with an error past
// MaxHidden paths.
func FindHidden(root string, h *Hider) ([]string, error) {
	if h == nil || len(h.pats) == 0 {
		return nil, nil
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
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root {
				return err
			}
			return nil // unreadable here is unreadable inside too
		}
		if p == root {
			return nil
		}
		rel := filepath.ToSlash(p[len(root)+1:])
		if !h.Match(rel, d.IsDir()) {
			return nil
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			// Only a target in the workspace: one outside it shows inside
			// as the sandbox's view of the host has it (the home there is
			// private; a system file is readable by design), and masking a
			// host path a repository's link names (/bin/sh) would let the
			// repository break the sandbox it runs in.
			target, err := filepath.EvalSymlinks(p)
			if err != nil || !within(root, target) {
				return nil // dangling, the workspace itself, or outside it
			}
			return add(target)
		case d.IsDir():
			if err := add(p); err != nil {
				return err
			}
			return filepath.SkipDir
		}
		if st, err := os.Lstat(p); err == nil && st.Mode().IsRegular() {
			if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Nlink > 1 {
				linked[[2]uint64{uint64(sys.Dev), uint64(sys.Ino)}] = true
			}
		}
		return add(p)
	})
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return out, err
	}
	if len(linked) == 0 {
		return out, nil
	}
	// A second walk, only when a hidden file has other names: find them.
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || seen[p] {
			if err == nil && d.IsDir() && seen[p] {
				return filepath.SkipDir
			}
			return nil
		}
		st, err := os.Lstat(p)
		if err != nil {
			return nil
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && linked[[2]uint64{uint64(sys.Dev), uint64(sys.Ino)}] {
			return add(p)
		}
		return nil
	})
	return out, err
}

func (h *Hider) describe() string {
	var s []string
	for _, p := range h.pats {
		s = append(s, p.src)
	}
	return strings.Join(s, ", ")
}
