package workspace

// --protect-git: a repository is not a way out of the sandbox.
//
// git on the host runs and reads what a git directory tells it to: hooks,
// config (hooksPath, fsmonitor, helpers, ...), config.worktree, commondir
// (another directory's config, hooks and objects), objects/info/alternates
// (objects read from elsewhere), info/ (attributes naming filters), the
// legacy remotes/ and branches/ (URLs), worktrees/*/gitdir and commondir,
// and a `.git` file's `gitdir:` line. A bind-mode sandbox writes the host's
// workspace live, and a host user may run git there while an agent runs for
// hours, so the guard has to hold during the run, not only after it:
//
//   - .git (and objects, refs, logs) are bound onto themselves: mountpoints,
//     which cannot be renamed, removed or replaced (EBUSY), while what a
//     commit writes (objects, refs, index, HEAD, logs, the lock and temp
//     files git makes beside them) stays writable;
//   - every name git reads to run or read something else is a read-only
//     bind: config, config.worktree, commondir, hooks, info, worktrees,
//     remotes, branches, objects/info/alternates, a `.git` file;
//     submodules' git dirs under .git/modules get the same (info/ being
//     read-only, git gc warns that it cannot update info/refs);
//   - what the repository's config names inside the workspace (a
//     core.hooksPath, an included config, a script a command runs) is
//     read-only too, its directories pinned;
//   - a name that must stay creatable-proof but does not exist yet is made
//     first, as what git already reads as its absence: an empty directory
//     (hooks, info, worktrees, remotes, branches), an empty config.worktree
//     and objects/info/alternates, a commondir holding "." (the git dir
//     itself). git behaves as before; they are removed after the run.
//
// A tmpfs or session dir shown at .git, with the host's files copied back at
// exit, was the alternative: it would stop every new name, but the host's
// HEAD and index would lag the sandbox's commits for the whole run and a
// host user's own commits meanwhile would be overwritten at exit.
//
// What a mount cannot hold is done at exit and reported: those same paths
// are restored from a snapshot taken at start, a name git does not make
// that appeared at .git's top is renamed away, and every git directory or
// `gitdir:` file the run made or changed anywhere in the workspace (nested
// repositories, bare ones, submodules) is defused: hooks and redirections
// renamed away (NAME.airlock-defused, never run or read by git), a config
// reduced to keys that run and read nothing. Overlay and copy sandboxes
// change nothing on the host during the run; the same paths are risky in
// their review and never applied without an explicit yes.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// Bounds on what --protect-git snapshots and guards.
const (
	maxGitEntries  = 2000
	maxGitBytes    = 32 << 20
	maxGitDirs     = 16   // git dirs guarded with mounts (the workspace's and its submodules')
	maxGitFileRead = 4096 // a `.git` file's gitdir: line
	maxDefused     = 1000 // renames and rewrites at exit
)

// Placeholders: what a guarded git dir holds where a name git reads did
// not exist, meaning to git what the name's absence means.
const (
	commondirPlaceholder = ".\n"
	defusedSuffix        = ".airlock-defused"
)

var commondirPlaceholderSum = func() string {
	s := sha256.Sum256([]byte(commondirPlaceholder))
	return hex.EncodeToString(s[:])
}()

// guardedDirs and guardedFiles are the names in a git dir shown read-only.
var (
	guardedDirs  = []string{"hooks", "info", "worktrees", "remotes", "branches"}
	guardedFiles = []string{"config", "config.worktree", "commondir"}
	pinnedDirs   = []string{"objects", "refs", "logs"}
)

// GitGuard returns what a bind session of cfg needs read-only inside (ro)
// and what it binds onto itself writable (pin: mountpoints, so they cannot
// be renamed or replaced), making the placeholders the package doc
// describes. Nothing for other modes, or without --protect-git.
func GitGuard(cfg Config) (ro, pin []string) {
	if cfg.Mode != Bind || !cfg.ProtectGit {
		return nil, nil
	}
	g := &guard{budget: maxGitDirs}
	dotgit := filepath.Join(cfg.Root, ".git")
	st, err := os.Lstat(dotgit)
	switch {
	case err != nil:
		return nil, nil
	case st.IsDir():
		g.gitDir(dotgit)
		g.referenced(cfg.Root, dotgit, []string{"config", "config.worktree"}, 0)
		g.submodules(cfg.Root)
	case st.Mode().IsRegular():
		// A worktree's or submodule's `.git` file: read-only, so it keeps
		// pointing where it points; its git dir too where the sandbox could
		// otherwise write it (inside the workspace; outside, the host is
		// read-only inside or not shown at all).
		g.ro = append(g.ro, dotgit)
		// A linked worktree: what a commit writes in the repository's
		// git dir is writable, its config, hooks and other branches not
		// (see worktree.go).
		if ro, rw, err := WorktreeGuard(cfg.Root); err == nil && len(rw) > 0 {
			g.ro = append(g.ro, ro...)
			g.pin = append(g.pin, rw...)
			return g.ro, g.pin
		}
		if gd, err := readGitdirFile(dotgit); err == nil {
			if real, err := filepath.EvalSymlinks(gd); err == nil && real != cfg.Root && strings.HasPrefix(real, cfg.Root+"/") {
				if st, err := os.Lstat(real); err == nil && st.IsDir() {
					g.gitDir(real)
				}
			}
		}
	}
	return g.ro, g.pin
}

type guard struct {
	ro, pin []string
	dirs    []string // the git dirs guarded
	budget  int
	seen    map[string]bool
	// dry changes nothing on the host and also lists a hooksPath or an
	// included file that does not exist (the review's use).
	dry bool
}

// Bounds on the workspace paths a repository's config names.
const (
	maxReferenced   = 32
	maxIncludeDepth = 3
)

// referenced keeps read-only what the config files (names in gd) name in
// the workspace: a core.hooksPath there, an included config file, a
// script a command runs (fsmonitor, a filter, a helper). The sandbox could
// otherwise write what the host's git runs. Relative include paths are
// relative to the config's dir; the others to the workspace, where git
// runs them. Each path's directories up to the workspace are pinned, so
// none can be renamed away and replaced.
func (g *guard) referenced(root, dir string, names []string, depth int) {
	if g.seen == nil {
		g.seen = map[string]bool{}
	}
	for _, n := range names {
		b, err := readBounded(dir, n, maxAuditBytes)
		if err != nil {
			continue
		}
		vars, _ := ParseGitConfig(b)
		for _, v := range vars {
			key := strings.ToLower(v.Key)
			include := key == "include.path" || strings.HasPrefix(key, "includeif.") && strings.HasSuffix(key, ".path")
			var cands []string
			switch {
			case include:
				p := v.Value
				if !filepath.IsAbs(p) {
					p = filepath.Join(dir, filepath.Dir(n), p)
				}
				cands = []string{p}
			case key == "core.hookspath":
				p := v.Value
				if !filepath.IsAbs(p) {
					p = filepath.Join(root, p)
				}
				if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) && within(root, p) && !g.dry && noLinks(filepath.Dir(p)) {
					os.Mkdir(p, 0o755) // an empty hooks dir is what git reads as none
				}
				cands = []string{p}
			case gitKeyRisk(key) != "":
				for _, f := range strings.Fields(v.Value) {
					f = strings.Trim(strings.TrimPrefix(f, "!"), `"'`)
					if !strings.Contains(f, "/") {
						continue
					}
					if !filepath.IsAbs(f) {
						f = filepath.Join(root, f)
					}
					cands = append(cands, f)
				}
			}
			for _, p := range cands {
				p = filepath.Clean(p)
				if g.seen[p] || len(g.seen) >= maxReferenced || !within(root, p) {
					continue
				}
				g.seen[p] = true
				st, err := os.Lstat(p)
				if g.dry && (include || key == "core.hookspath") && errors.Is(err, fs.ErrNotExist) {
					g.ro = append(g.ro, p)
					continue
				}
				if err != nil || !(st.IsDir() || st.Mode().IsRegular()) || !noLinks(p) {
					// Nothing there, nothing to keep; a link on the way is
					// the exit review's (a mount would follow it out).
					continue
				}
				for d := filepath.Dir(p); d != root && within(root, d); d = filepath.Dir(d) {
					if !slices.Contains(g.pin, d) {
						g.pin = append(g.pin, d)
					}
				}
				if !slices.Contains(g.ro, p) {
					g.ro = append(g.ro, p)
				}
				if include && st.Mode().IsRegular() && depth < maxIncludeDepth {
					g.referenced(root, filepath.Dir(p), []string{filepath.Base(p)}, depth+1)
				}
			}
		}
	}
}

// FlagGitReferenced adds a risk to each change of a path the workspace's
// repository config (as it is on the host) names: a hooksPath, an included
// config, a script a command runs. git on the host runs or reads it.
func FlagGitReferenced(root string, cs []Change) {
	dotgit := filepath.Join(root, ".git")
	if st, err := os.Lstat(dotgit); err != nil || !st.IsDir() {
		return
	}
	g := &guard{dry: true}
	g.referenced(root, dotgit, []string{"config", "config.worktree"}, 0)
	if len(g.ro) == 0 {
		return
	}
	for i, c := range cs {
		if c.Kind == Reverted {
			continue
		}
		for _, p := range g.ro {
			rel := strings.TrimPrefix(p, root+"/")
			if c.Path == rel || strings.HasPrefix(c.Path, rel+"/") {
				why := "the repository's git config names " + Quote(rel) + ": git on the host runs or reads it"
				if !slices.Contains(cs[i].Risks, why) {
					cs[i].Risks = append(cs[i].Risks, why)
					sort.Strings(cs[i].Risks)
				}
				break
			}
		}
	}
}

// submodules keeps the checkouts .gitmodules names pointing where they
// point: a `.git` file read-only (its git dir under .git/modules is
// guarded already), a `.git` dir guarded as the workspace's is.
func (g *guard) submodules(root string) {
	b, err := readBounded(root, ".gitmodules", maxAuditBytes)
	if err != nil {
		return
	}
	vars, _ := ParseGitConfig(b)
	n := 0
	for _, v := range vars {
		if !strings.HasPrefix(v.Key, "submodule.") || !strings.HasSuffix(v.Key, ".path") || n >= maxGitDirs {
			continue
		}
		n++
		p := filepath.Join(root, filepath.Clean("/"+v.Value), ".git")
		if !within(root, p) {
			continue
		}
		st, err := os.Lstat(p)
		switch {
		case err != nil || !noLinks(p):
		case st.Mode().IsRegular():
			if !slices.Contains(g.ro, p) {
				g.ro = append(g.ro, p)
			}
		case st.IsDir():
			g.gitDir(p)
		}
	}
}

// noLinks reports whether no component of p is a symlink (p exists).
func noLinks(p string) bool {
	real, err := filepath.EvalSymlinks(p)
	return err == nil && real == p
}

// within reports whether p lies inside root (and is not root).
func within(root, p string) bool {
	return p != root && strings.HasPrefix(p, root+"/")
}

func (g *guard) gitDir(gd string) {
	if g.budget <= 0 {
		return
	}
	g.budget--
	g.dirs = append(g.dirs, gd)
	g.pin = append(g.pin, gd)
	isDir := func(p string) bool {
		st, err := os.Lstat(p)
		return err == nil && st.IsDir()
	}
	for _, n := range pinnedDirs {
		if p := filepath.Join(gd, n); isDir(p) {
			g.pin = append(g.pin, p)
		}
	}
	files := guardedFiles
	if isDir(filepath.Join(gd, "objects")) {
		// objects/info stays writable (gc writes the commit-graph there);
		// alternates are files in it.
		// It is pinned too, or it could be renamed away with them.
		if p := filepath.Join(gd, "objects/info"); !g.dry && os.Mkdir(p, 0o755) == nil || isDir(p) {
			g.pin = append(g.pin, p)
		}
		files = append(files[:len(files):len(files)], "objects/info/alternates", "objects/info/http-alternates")
	}
	for _, n := range guardedDirs {
		p := filepath.Join(gd, n)
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) && !g.dry {
			os.Mkdir(p, 0o755) // an empty dir is what git reads as none
		}
		if isDir(p) {
			g.ro = append(g.ro, p)
		}
	}
	for _, n := range files {
		p := filepath.Join(gd, n)
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) && !g.dry {
			body := ""
			switch n {
			case "commondir":
				body = commondirPlaceholder
			case "config":
				continue // git makes it with the repository; none is an odd repository, left to the exit review
			}
			writeNew(p, body)
		}
		if st, err := os.Lstat(p); err == nil && st.Mode().IsRegular() {
			g.ro = append(g.ro, p)
		}
	}
	// Submodules' git dirs (.git/modules/NAME, NAME may hold slashes).
	modules := filepath.Join(gd, "modules")
	if !isDir(modules) {
		return
	}
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		ents, err := os.ReadDir(dir)
		if err != nil || depth > 3 {
			return
		}
		for i, e := range ents {
			if i >= 64 || g.budget <= 0 {
				return
			}
			if !e.IsDir() {
				continue
			}
			p := filepath.Join(dir, e.Name())
			if st, err := os.Lstat(filepath.Join(p, "HEAD")); err == nil && st.Mode().IsRegular() {
				g.gitDir(p)
			} else {
				walk(p, depth+1)
			}
		}
	}
	walk(modules, 0)
}

// writeNew creates p holding body, never over anything.
func writeNew(p, body string) {
	fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return
	}
	unix.Write(fd, []byte(body))
	unix.Close(fd)
}

// readGitdirFile reads a `.git` file's `gitdir:` line (bounded, a regular
// file only) and returns the directory it names, made absolute.
func readGitdirFile(p string) (string, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", errors.New("not a regular file")
	}
	buf := make([]byte, maxGitFileRead)
	n, _ := unix.Read(fd, buf)
	if n < 0 {
		n = 0
	}
	line, _, _ := strings.Cut(string(buf[:n]), "\n")
	gd, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), "gitdir: ")
	if !ok || gd == "" {
		return "", errors.New("no gitdir: line")
	}
	if !filepath.IsAbs(gd) {
		gd = filepath.Join(filepath.Dir(p), gd)
	}
	return filepath.Clean(gd), nil
}

// gitSubset is the manifest of what --protect-git restores at exit: the
// guarded names of the workspace's .git (with .git itself, so a copy can be
// made). Placeholders are left out, so they are neither restored nor
// reported.
func gitSubset(root string) (Manifest, error) {
	m := Manifest{}
	gitPath := filepath.Join(root, ".git")
	st, err := os.Lstat(gitPath)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && !st.IsDir()) {
		return m, nil // no repository here, or a `.git` file (guarded read-only, defused at exit)
	}
	if err != nil {
		return nil, err
	}
	all, err := Scan(root, ScanOptions{Exclude: onlyGuarded(), MaxEntries: maxGitEntries})
	if err != nil {
		return nil, err
	}
	var total int64
	for p, e := range all {
		switch {
		case p == ".git/objects" || p == ".git/objects/info":
			continue // only there to reach alternates
		case isPlaceholder(strings.TrimPrefix(p, ".git/"), e):
			continue
		}
		m[p] = e
		total += e.Size
	}
	if total > maxGitBytes {
		return nil, fmt.Errorf(".git's hooks and config hold more than %d MiB", maxGitBytes>>20)
	}
	return m, nil
}

// isPlaceholder reports whether e, at rel in a git dir, is what GitGuard
// makes where nothing was.
func isPlaceholder(rel string, e Entry) bool {
	switch rel {
	case "commondir":
		return e.Type == TypeFile && e.SHA256 == commondirPlaceholderSum
	case "config.worktree", "objects/info/alternates", "objects/info/http-alternates":
		return e.Type == TypeFile && e.Size == 0
	}
	return false
}

// onlyGuarded excludes everything but .git's guarded names, so the subset
// scan reads no more than that.
func onlyGuarded() *Excluder {
	return &Excluder{filter: func(rel string) bool {
		if rel == ".git" {
			return false
		}
		r, ok := strings.CutPrefix(rel, ".git/")
		if !ok {
			return true
		}
		top, rest, _ := strings.Cut(r, "/")
		switch top {
		case "config", "config.worktree", "commondir":
			return rest != ""
		case "hooks", "info", "remotes", "branches":
			return false
		case "worktrees":
			// Read-only inside on every backend (made empty when absent):
			// what changes there is the host's own git worktree add, which
			// a restore would undo.
			return true
		case "objects":
			switch rest {
			case "info", "info/alternates", "info/http-alternates":
				return false
			}
		}
		return true
	}}
}

// topNames lists a git dir's top-level names (bounded).
func topNames(gd string) ([]string, error) {
	f, err := os.Open(gd)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(maxGitEntries)
	if err != nil && len(names) == 0 && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return names, nil
}

// gitOwnName reports whether git itself makes name at a git dir's top,
// so one the run made there is no redirection.
func gitOwnName(name string) bool {
	switch name {
	case "HEAD", "index", "packed-refs", "description", "shallow", "objects", "refs", "logs",
		"hooks", "info", "config", "modules", "worktrees", "remotes", "branches", "rebase-merge",
		"rebase-apply", "sequencer", "rr-cache", "lfs", "gc.pid", "gc.log", "gitk.cache", "reftable",
		"COMMIT_EDITMSG", "TAG_EDITMSG", "SQUASH_MSG", "MERGE_MSG", "MERGE_MODE", "MERGE_RR",
		"MERGE_AUTOSTASH", "BISECT_LOG", "BISECT_TERMS", "BISECT_NAMES", "BISECT_ANCESTORS_OK",
		"AUTO_MERGE", "annex", "svn", "filter-repo", "subtree-cache", "BISECT_EXPECTED_REV", "BISECT_RUN", "BISECT_START", "NOTES_MERGE_PARTIAL", "NOTES_MERGE_WORKTREE":
		return true
	}
	return strings.HasSuffix(name, ".lock") || strings.Contains(name, defusedSuffix) || strings.HasSuffix(name, "_HEAD") ||
		strings.HasPrefix(name, "sharedindex.") || strings.HasPrefix(name, "index.stash.") ||
		strings.HasPrefix(name, "tmp_") || strings.HasPrefix(name, "tmp-")
}

// snapshotGit keeps a copy of .git's guarded names in the session, and
// the names at its top.
func (s *Session) snapshotGit() error {
	m, err := gitSubset(s.m.Root)
	if err != nil {
		return fmt.Errorf("workspace: --protect-git: %w (pass --protect-git=false to go without)", err)
	}
	if len(m) == 0 {
		return nil // no repository: restoreGit removes whatever .git the run made
	}
	if err := os.Mkdir(s.path(gitDir), 0o700); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	if _, err := CopyIn(s.m.Root, s.path(gitDir), m, nil); err != nil {
		return fmt.Errorf("workspace: --protect-git: snapshot: %w", err)
	}
	names, _ := topNames(filepath.Join(s.m.Root, ".git"))
	if err := writeJSONFile(s.path(gitNames), names); err != nil {
		return fmt.Errorf("workspace: --protect-git: %w", err)
	}
	return SaveManifest(s.path(gitManifest), m)
}

// restoreGit puts .git's guarded names back as they were at start, renames
// away what the run added at .git's top that git does not make, removes
// the placeholders, and returns what the sandbox had changed, audited.
func (s *Session) restoreGit() ([]Change, []Defused, error) {
	cur, err := gitSubset(s.m.Root)
	if err != nil {
		return nil, nil, fmt.Errorf("workspace: --protect-git: read .git after the run: %w", err)
	}
	var snap Manifest
	if _, err := os.Lstat(s.path(gitManifest)); err == nil {
		if snap, err = LoadManifest(s.path(gitManifest)); err != nil {
			return nil, nil, fmt.Errorf("workspace: --protect-git: %w", err)
		}
	} else if len(cur) == 0 {
		return nil, nil, nil
	} else if snap, err = s.freshGit(); err != nil {
		// No repository at start: the run made one (git init). It is kept —
		// it may hold the run's commits — with the config and hooks of a
		// fresh repository, so nothing it set up runs on the host.
		return nil, nil, fmt.Errorf("workspace: --protect-git: %w", err)
	}
	var defused []Defused
	if len(cur) > 0 {
		defused = s.defuseNewTop()
		g := &guard{dry: true, budget: maxGitDirs}
		g.gitDir(filepath.Join(s.m.Root, ".git"))
		g.submodules(s.m.Root)
		for _, d := range g.dirs {
			removePlaceholders(d)
		}
	}
	forward := Compare(snap, cur, nil)
	if len(forward) == 0 {
		return nil, defused, nil
	}
	Audit(forward, s.m.Root, &gitReader{s})
	back := Compare(cur, snap, nil)
	if _, err := Apply(s.m.Root, s.path(gitDir), back, func(c Change) *Entry { return c.Before }); err != nil {
		return forward, defused, fmt.Errorf("workspace: --protect-git: restore .git: %w", err)
	}
	return forward, defused, nil
}

// defuseNewTop renames away the names at .git's top the run added that git
// does not make itself.
func (s *Session) defuseNewTop() []Defused {
	var start []string
	if b, err := os.ReadFile(s.path(gitNames)); err == nil {
		json.Unmarshal(b, &start)
	}
	had := map[string]bool{}
	for _, n := range start {
		had[n] = true
	}
	names, _ := topNames(filepath.Join(s.m.Root, ".git"))
	sort.Strings(names)
	var out []Defused
	for _, n := range names {
		if had[n] || gitOwnName(n) || strings.Contains(n, defusedSuffix) {
			continue
		}
		switch n {
		case "commondir", "config.worktree":
			continue // restored from the snapshot (or a placeholder)
		}
		out = append(out, defuse(s.m.Root, ".git/"+n, "a name git does not make, at the top of .git"))
	}
	return out
}

// removePlaceholders removes what GitGuard made in gd that is still as it
// made it (and in its submodules' git dirs).
func removePlaceholders(gd string) {
	for _, n := range []string{"commondir", "config.worktree", "objects/info/alternates", "objects/info/http-alternates"} {
		p := filepath.Join(gd, n)
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		buf := make([]byte, 8)
		k, _ := unix.Read(fd, buf)
		var st unix.Stat_t
		unix.Fstat(fd, &st)
		unix.Close(fd)
		if st.Mode&unix.S_IFMT == unix.S_IFREG && (n == "commondir" && st.Size == 2 && k == 2 && string(buf[:2]) == commondirPlaceholder ||
			n != "commondir" && st.Size == 0) {
			os.Remove(p)
		}
	}
	for _, n := range []string{"worktrees", "remotes", "branches"} {
		os.Remove(filepath.Join(gd, n)) // only if still empty
	}
}

// freshConfig is what git init writes on Linux.
const freshConfig = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n"

// freshGit puts a fresh repository's config and (empty) hooks in the
// session's git snapshot dir and returns its manifest: what a .git the run
// created is restored to.
func (s *Session) freshGit() (Manifest, error) {
	dir := filepath.Join(s.path(gitDir), ".git")
	if err := os.MkdirAll(filepath.Join(dir, "hooks"), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "config"), []byte(freshConfig), 0o644); err != nil {
		return nil, err
	}
	m, err := gitSubset(s.path(gitDir))
	if err != nil {
		return nil, err
	}
	// Every guarded name the run made beyond these goes: a fresh
	// repository has none of them.
	return m, nil
}

type gitReader struct{ s *Session }

func (g *gitReader) Before(c Change) ([]byte, error) {
	return readBounded(g.s.path(gitDir), c.Path, MaxDiffBytes)
}

func (g *gitReader) After(c Change) ([]byte, error) {
	return readBounded(g.s.m.Root, c.Path, MaxDiffBytes)
}

// Defused is a git file the run made or changed that the exit review made
// harmless: renamed away, or a config reduced to safe keys.
type Defused struct {
	Path   string `json:"path"`
	Why    string `json:"why"`
	Action string `json:"action"`
}

// DefuseGit makes harmless every git directory entry and `gitdir:` file
// among changes (a bind run's, after it exited): anywhere in the workspace
// at root, nested and bare repositories included.
func DefuseGit(root string, changes []Change) []Defused {
	var out []Defused
	isGit := map[string]bool{} // dir (relative) -> is a git dir
	gitDirAt := func(dir string) bool {
		if v, ok := isGit[dir]; ok {
			return v
		}
		v := false
		if path.Base(dir) == ".git" {
			v = lstatType(root, dir) == TypeDir
		} else {
			v = lstatType(root, dir+"/HEAD") == TypeFile && lstatType(root, dir+"/objects") == TypeDir && lstatType(root, dir+"/refs") == TypeDir
		}
		isGit[dir] = v
		return v
	}
	for _, c := range changes {
		if len(out) >= maxDefused {
			break
		}
		if c.After == nil || c.Kind == Reverted || c.After.Type == TypeDir {
			continue
		}
		p := c.Path
		if path.Base(p) == ".git" {
			out = append(out, defuse(root, p, "a .git file or link points git at another repository"))
			continue
		}
		// The innermost git dir holding p.
		gd := ""
		for d := parent(p); d != ""; d = parent(d) {
			if gitDirAt(d) {
				gd = d
				break
			}
		}
		if gd == "" {
			continue
		}
		rel := strings.TrimPrefix(p, gd+"/")
		if gd == ".git" && strings.HasPrefix(rel, "worktrees/") {
			continue // read-only inside (GitGuard): a change there is the host's own
		}
		if c.After.Type == TypeSymlink {
			out = append(out, defuse(root, p, "a link in a git directory: git would read what it points at"))
			continue
		}
		role, why := gitRole(rel)
		switch role {
		case roleNone:
			continue
		case roleConfig:
			if c.After.Type == TypeFile {
				if d, ok := reduceConfig(root, p); ok {
					if d.Path != "" {
						out = append(out, d)
					}
					continue
				}
			}
		case roleRun:
			if strings.HasPrefix(rel, "hooks/") && strings.HasSuffix(rel, ".sample") && c.After.Type == TypeFile {
				continue // git never runs a *.sample hook; git init writes a dozen
			}
		}
		out = append(out, defuse(root, p, why))
	}
	return out
}

func lstatType(root, rel string) Type {
	st, err := os.Lstat(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		return 0
	}
	switch {
	case st.Mode().IsRegular():
		return TypeFile
	case st.IsDir():
		return TypeDir
	case st.Mode()&fs.ModeSymlink != 0:
		return TypeSymlink
	}
	return TypeOther
}

// Roles of a path inside a git dir.
const (
	roleNone = iota
	roleConfig
	roleRun
)

// gitRole says whether rel, a path inside a git directory, is one git reads
// to run or read something (and why), or is git's own bookkeeping.
func gitRole(rel string) (int, string) {
	top, rest, _ := strings.Cut(rel, "/")
	switch top {
	case "config", "config.worktree":
		if rest == "" {
			return roleConfig, "git config: it can make git run programs and read files elsewhere"
		}
	case "hooks":
		return roleRun, "git hook: git runs it on commit, checkout, push and more"
	case "commondir":
		return roleRun, "commondir redirects git to another directory's config, hooks and objects"
	case "info":
		if rest == "refs" || rest == "exclude" {
			return roleNone, "" // update-server-info's list of refs (dumb HTTP); git init's excludes (untracked files shown)
		}
		return roleRun, "git's info directory: attributes, excludes and grafts there change what git runs and reads"
	case "remotes", "branches":
		return roleRun, "a remote definition: where git fetches from and pushes to"
	case "objects":
		if rest == "info/alternates" || rest == "info/http-alternates" || rest == "info" {
			return roleRun, "alternates: redirects git to objects or a repository elsewhere"
		}
		return roleNone, ""
	case "worktrees":
		parts := strings.Split(rest, "/")
		if len(parts) == 2 {
			switch parts[1] {
			case "config.worktree":
				return roleConfig, "a worktree's git config: it can make git run programs"
			case "commondir", "gitdir":
				return roleRun, "a worktree's " + parts[1] + ": it points git at another directory"
			}
		}
		return roleNone, ""
	case "rebase-merge", "rebase-apply", "sequencer":
		switch rest {
		case "git-rebase-todo", "git-rebase-todo.backup", "todo", "strategy", "strategy_opts", "opts":
			return roleRun, "an operation in progress: its exec lines and merge strategy run when you --continue it"
		}
		return roleNone, ""
	case "modules":
		// A submodule's git dir, modules/NAME with NAME of any depth: the
		// most cautious reading of every split.
		parts := strings.Split(rest, "/")
		for i := 1; i < len(parts); i++ {
			if r, why := gitRole(strings.Join(parts[i:], "/")); r != roleNone && !strings.HasPrefix(why, "a name git") {
				return r, "submodule's " + why
			}
		}
		return roleNone, ""
	}
	if rest == "" && !gitOwnName(top) {
		return roleRun, "a name git does not make, at the top of a git directory"
	}
	return roleNone, ""
}

// defuse renames rel away (NAME.airlock-defused, never over anything) and
// says so.
func defuse(root, rel, why string) Defused {
	d := Defused{Path: rel, Why: why}
	rfd, err := openDirNoSymlinks(root)
	if err != nil {
		d.Action = "not defused: " + err.Error()
		return d
	}
	defer unix.Close(rfd)
	dir, name := parent(rel), path.Base(rel)
	dfd, err := openBeneath(rfd, dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		d.Action = "not defused: " + err.Error()
		return d
	}
	defer unix.Close(dfd)
	for i := 1; i <= 100; i++ {
		to := name + defusedSuffix
		if i > 1 {
			to = fmt.Sprintf("%s%s-%d", name, defusedSuffix, i)
		}
		err = renameNoReplace(dfd, name, dfd, to)
		if err == nil {
			d.Action = "renamed to " + Quote(path.Join(dir, to))
			return d
		}
		if !errors.Is(err, unix.EEXIST) {
			break
		}
	}
	d.Action = "not defused: " + err.Error()
	return d
}

// reduceConfig rewrites the git config at rel with only the keys that run
// and read nothing (safeGitKey). A config with nothing else is left as it
// is (an empty Defused); false says it could not be read or rewritten.
func reduceConfig(root, rel string) (Defused, bool) {
	b, err := readBounded(root, rel, maxAuditBytes)
	if err != nil {
		return Defused{}, false
	}
	vars, perr := ParseGitConfig(b)
	var kept strings.Builder
	var dropped []string
	section := ""
	for _, v := range vars {
		sec, name := splitGitKey(v.Key)
		if !safeGitKey(v.Key) || strings.ContainsAny(v.Value, "\n\x00") {
			dropped = append(dropped, v.Key)
			continue
		}
		if sec != section {
			section = sec
			kept.WriteString(gitSectionHeader(sec))
		}
		fmt.Fprintf(&kept, "\t%s = %s\n", name, gitQuote(v.Value))
	}
	if perr != nil {
		dropped = append(dropped, "what does not parse") // a later git may read it otherwise
	}
	if len(dropped) == 0 && len(vars) > 0 {
		return Defused{}, true // nothing to take out
	}
	var old string
	if err := writeFileBeneath(root, rel, []byte(kept.String()), 0o644, &old); err != nil {
		return Defused{}, false
	}
	sort.Strings(dropped)
	dropped = compactStrings(dropped)
	return Defused{Path: rel, Why: "git config: it can make git run programs and read files elsewhere",
		Action: "reduced to safe keys (dropped " + shorten(strings.Join(dropped, ", "), 200) + keptAs(old) + ")"}, true
}

func keptAs(old string) string {
	if old == "" {
		return "; the old one could not be kept"
	}
	return "; the old one is " + Quote(old)
}

func compactStrings(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// safeGitKey reports whether a config key is one a defused config keeps:
// repository format and layout, identity, branch tracking.
func safeGitKey(key string) bool {
	k := strings.ToLower(key)
	switch k {
	case "core.repositoryformatversion", "core.filemode", "core.bare", "core.logallrefupdates",
		"core.ignorecase", "core.precomposeunicode", "core.symlinks", "core.autocrlf", "core.eol",
		"core.abbrev", "core.compression", "core.loosecompression", "user.name", "user.email", "init.defaultbranch":
		return true
	}
	sec, name := splitGitKey(k)
	if sec == "extensions" {
		return true
	}
	if strings.HasPrefix(sec, "branch.") {
		return name == "remote" || name == "merge" || name == "rebase"
	}
	return false
}

// splitGitKey splits section[.subsection].name into section[.subsection] and name.
func splitGitKey(key string) (string, string) {
	i := strings.LastIndex(key, ".")
	if i < 0 {
		return "", key
	}
	return key[:i], key[i+1:]
}

func gitSectionHeader(sec string) string {
	s, sub, ok := strings.Cut(sec, ".")
	if !ok {
		return "[" + s + "]\n"
	}
	return "[" + s + " " + gitQuote(sub) + "]\n"
}

func gitQuote(v string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\t", `\t`)
	return `"` + r.Replace(v) + `"`
}

// writeFileBeneath replaces rel beneath root with b (a temp file renamed
// over it), following no symlink; with keep, the old file is kept as
// NAME.airlock-defused first, and keep says where.
func writeFileBeneath(root, rel string, b []byte, mode uint32, keep *string) error {
	rfd, err := openDirNoSymlinks(root)
	if err != nil {
		return err
	}
	defer unix.Close(rfd)
	dfd, err := openBeneath(rfd, parent(rel), unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	tmp := path.Base(rel) + ".airlock-tmp"
	unix.Unlinkat(dfd, tmp, 0)
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return err
	}
	_, werr := unix.Write(fd, b)
	unix.Close(fd)
	if werr != nil {
		unix.Unlinkat(dfd, tmp, 0)
		return werr
	}
	if keep != nil {
		// The old content stays beside it, under a name git never reads.
		name := path.Base(rel)
		for i := 1; i <= 100; i++ {
			to := name + defusedSuffix
			if i > 1 {
				to = fmt.Sprintf("%s%s-%d", name, defusedSuffix, i)
			}
			if err = unix.Linkat(dfd, name, dfd, to, 0); err == nil {
				*keep = path.Join(parent(rel), to)
				break
			}
			if !errors.Is(err, unix.EEXIST) {
				break
			}
		}
	}
	return unix.Renameat(dfd, tmp, dfd, path.Base(rel))
}
