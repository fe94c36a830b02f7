package mcppolicy

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

const (
	maxPathLen = 4096 // PATH_MAX: longer arguments are not paths any server can open
	maxLinks   = 40   // the kernel's MAXSYMLINKS
	maxDepth   = 32   // argument nesting checked for protected paths
	maxValues  = 10000
)

// pathKeys are argument names whose string values are paths even when relative
// (compared lower-case with _ and - removed); any name ending in "path" or "paths"
// counts too. Other strings count only when absolute (/..., ~, ~/..., file://...).
var pathKeys = map[string]bool{
	"path": true, "paths": true, "file": true, "files": true, "filename": true,
	"source": true, "src": true, "destination": true, "dest": true, "target": true,
	"directory": true, "dir": true, "cwd": true, "root": true, "workdir": true,
}

func isPathKey(k string) bool {
	k = strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(k))
	return pathKeys[k] || strings.HasSuffix(k, "path") || strings.HasSuffix(k, "paths")
}

// looksAbsolute reports whether a string under any argument name is checked as a path.
// Multi-line text (file contents, messages) is not.
func looksAbsolute(s string) bool {
	if len(s) > maxPathLen || strings.ContainsAny(s, "\n\r") {
		return false
	}
	return strings.HasPrefix(s, "/") || s == "~" || strings.HasPrefix(s, "~/") ||
		len(s) >= 7 && strings.EqualFold(s[:7], "file://")
}

// resolve returns every host path s may name: relative paths against the first root,
// ~ against home, file:// URLs by their path, then symlinks followed on the host both
// the kernel's way (".." after a symlink is the link target's parent) and the
// lexical-first way of path.resolve + realpath (Node servers); the two differ only when
// ".." follows a symlink, and a caller must accept every answer.
func (p *Policy) resolve(s string) ([]string, error) {
	if s == "" {
		return nil, errors.New("empty path")
	}
	if len(s) > maxPathLen {
		return nil, fmt.Errorf("longer than %d bytes", maxPathLen)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return nil, errors.New("contains a NUL byte")
	}
	if len(s) >= 7 && strings.EqualFold(s[:7], "file://") {
		u, err := url.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("file URL: %v", err)
		}
		if u.Host != "" && !strings.EqualFold(u.Host, "localhost") {
			return nil, fmt.Errorf("file URL names host %q", u.Host)
		}
		if u.Path == "" {
			return nil, errors.New("file URL without a path")
		}
		s = u.Path
	}
	if s == "~" || strings.HasPrefix(s, "~/") {
		if p.home == "" {
			return nil, errors.New("~ and no home directory to expand it")
		}
		s = p.home + s[1:]
	}
	if !filepath.IsAbs(s) {
		if len(p.roots) == 0 {
			return nil, errors.New("relative, and the server has no root to resolve it against")
		}
		s = p.roots[0] + "/" + s
	}
	a, err := walk(s)
	if err != nil {
		return nil, err
	}
	b, err := walk(filepath.Clean(s))
	if err != nil {
		return nil, err
	}
	if a == b {
		return []string{a}, nil
	}
	return []string{a, b}, nil
}

// walk resolves an absolute path component by component as the kernel does, following
// every symlink that exists on the host (dangling ones included, so a link to a file
// not yet created is resolved to where the file would be created); components that do
// not exist are kept as they are.
func walk(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", errors.New("not an absolute path")
	}
	rest := strings.Split(p, "/")
	resolved := "/"
	links := 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			resolved = filepath.Dir(resolved)
			continue
		}
		next := filepath.Join(resolved, c)
		fi, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ENAMETOOLONG) {
			resolved = next
			continue
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			resolved = next
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("more than %d symlinks (a loop?)", maxLinks)
		}
		t, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(t) {
			resolved = "/"
		}
		rest = append(strings.Split(t, "/"), rest...)
	}
	return resolved, nil
}

// within reports whether p is root or below it; /root2 is not within /root.
func within(p, root string) bool {
	return p == root || root == "/" || strings.HasPrefix(p, root+"/")
}

func (p *Policy) pathWithin(c *compiledCond, v any) (tri, string) {
	list, ok := stringList(v)
	if !ok {
		return unsure, fmt.Sprintf("%s is %s, not a path or list of paths", c.arg, aType(v))
	}
	if len(list) == 0 {
		return no, ""
	}
	var whys []string
	for _, s := range list {
		cands, err := p.resolve(s)
		if err != nil {
			return unsure, fmt.Sprintf("%s %q cannot be resolved: %v", c.arg, clip(s), err)
		}
		for _, r := range cands {
			root := ""
			for _, rt := range c.pathWithin {
				if within(r, rt) {
					root = rt
					break
				}
			}
			if root == "" {
				return no, ""
			}
			whys = append(whys, fmt.Sprintf("%s %q resolves to %s, within %s", c.arg, clip(s), r, root))
		}
	}
	return yes, strings.Join(whys, ", ")
}

// checkProtected resolves every path-like string in the arguments (see pathKeys and
// looksAbsolute, at any depth, object keys included) and denies the call if one lands in a protected path or
// if one that must be checked cannot be.
func (p *Policy) checkProtected(args map[string]any) (Decision, bool) {
	if len(p.protected) == 0 {
		return Decision{}, false
	}
	deny := func(format string, a ...any) (Decision, bool) {
		return Decision{Verdict: Deny, Rule: "protected", Reason: "protected: " + fmt.Sprintf(format, a...)}, true
	}
	type item struct {
		key   string // the nearest object key: list elements take their list's
		v     any
		depth int
	}
	stack := []item{{v: args}}
	seen := 0
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen++; seen > maxValues || it.depth > maxDepth {
			return deny("arguments are too large or deep to check for protected paths (over %d values or %d levels)", maxValues, maxDepth)
		}
		switch x := it.v.(type) {
		case map[string]any:
			for _, k := range sortedKeys(x) {
				stack = append(stack, item{key: k, v: x[k], depth: it.depth + 1})
				if looksAbsolute(k) { // {"/etc/x": "contents"}: a key can name a file too
					stack = append(stack, item{key: "key", v: k, depth: it.depth + 1})
				}
			}
		case []any:
			for i := len(x) - 1; i >= 0; i-- {
				stack = append(stack, item{key: it.key, v: x[i], depth: it.depth + 1})
			}
		case string:
			if !looksAbsolute(x) && !(isPathKey(it.key) && x != "") {
				continue
			}
			cands, err := p.resolve(x)
			if err != nil {
				if !looksAbsolute(x) && len(p.roots) == 0 {
					continue // a relative name and no roots: not a host path (e.g. a repository path)
				}
				return deny("argument %s %q cannot be resolved (%v), so it might name a protected path", it.key, clip(x), err)
			}
			for _, r := range cands {
				for _, pr := range p.protected {
					if within(r, pr) {
						return deny("argument %s %q resolves to %s, inside protected %s", it.key, clip(x), r, pr)
					}
				}
			}
		}
	}
	return Decision{}, false
}
