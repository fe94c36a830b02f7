package workspace

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Excluder decides which paths a copy, a manifest and an apply leave alone.
// A pattern without a slash matches any one name in a path (node_modules,
// *.o); a pattern with a slash matches from the workspace's root
// (build/out, .git/objects) and excludes everything below what it matches.
// Patterns use path.Match syntax (*, ?, [...]).
type Excluder struct {
	names    []string
	anchored []string
	literal  map[string]bool
	filter   func(rel string) bool // a fixed rule, for airlock's own scans
	hide     *Hider                // what the sandbox never sees
}

// NewExcluder checks and compiles patterns.
func NewExcluder(patterns []string) (*Excluder, error) {
	x := &Excluder{literal: map[string]bool{}}
	for _, p := range patterns {
		q := strings.Trim(strings.TrimSpace(p), "/")
		if q == "" || q == "." || q == ".." {
			return nil, fmt.Errorf("--exclude %q: give a name or a path inside the workspace", p)
		}
		if _, err := path.Match(q, ""); err != nil {
			return nil, fmt.Errorf("--exclude %q: bad pattern (use *, ? and [...] as in shell globs)", p)
		}
		if strings.Contains(q, "/") {
			x.anchored = append(x.anchored, path.Clean(q))
		} else {
			x.names = append(x.names, q)
		}
	}
	return x, nil
}

// AddPath excludes one relative path (and what is below it) literally.
func (x *Excluder) AddPath(rel string) { x.literal[rel] = true }

// Match reports whether rel (relative, slash-separated) is excluded, either
// itself or through one of its parent directories.
func (x *Excluder) Match(rel string) bool {
	if x == nil || rel == "" {
		return false
	}
	if x.filter != nil && x.filter(rel) {
		return true
	}
	if x.hide.Covers(rel) {
		return true
	}
	for p := rel; p != ""; p = parent(p) {
		if x.literal[p] {
			return true
		}
		for _, a := range x.anchored {
			if ok, _ := path.Match(a, p); ok {
				return true
			}
		}
		base := path.Base(p)
		for _, n := range x.names {
			if ok, _ := path.Match(n, base); ok {
				return true
			}
		}
	}
	return false
}

// Quote shows a path safely on a terminal: as it is when it is printable
// UTF-8 without quotes or backslashes, else Go-quoted (so a newline or an
// escape sequence in a name the sandbox chose cannot forge output).
func Quote(p string) string {
	if p == "" {
		return "."
	}
	if utf8.ValidString(p) && !strings.ContainsAny(p, "\"\\") {
		ok := true
		for _, r := range p {
			if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u2028' || r == '\u2029' || r == '\u202e' {
				ok = false
				break
			}
		}
		if ok {
			return p
		}
	}
	return strconv.Quote(p)
}

func newTicker() *time.Ticker { return time.NewTicker(100 * time.Millisecond) }
