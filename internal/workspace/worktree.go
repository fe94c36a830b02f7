package workspace

// A workspace that is a `git worktree` (one the user made, or one airlock
// made for --branch): its `.git` file names an admin dir,
// COMMON/worktrees/ID, outside the workspace, and a commit there writes
// three places outside the workspace: the admin dir (HEAD, index, logs),
// the repository's objects, and the branch's ref and reflog. The rest of
// COMMON (config, hooks, info, packed-refs, other branches' refs, other
// worktrees) stays read-only, as the host's filesystem is inside. So:
//
//   - the admin dir is writable, bound onto itself (it cannot be renamed
//     or replaced), but its commondir, gitdir and config.worktree, which
//     point the host's git elsewhere or make it run programs, are
//     read-only (an empty config.worktree is made where there was none);
//   - objects is writable, bound onto itself; objects/info (alternates:
//     objects read from elsewhere) and the packs there are read-only
//     (at exit, an object the run wrote must hash to its name, a pack
//     pass git verify-pack; the loose objects, linked into the session
//     at start, are put back where the run removed them);
//   - the directory holding the branch's ref (refs/heads, or refs/heads/a
//     for a/b) and its reflog's are writable, as git makes NAME.lock
//     beside them, with every other entry in them read-only: other
//     branches cannot be moved or removed.
//
// At exit the admin dir is reviewed (links and names git does not make
// there are defused, HEAD is put back on the branch) and refs that
// appeared beside its branch are reported (not removed: another sandbox
// or the host may have made them meanwhile).

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// maxRefSiblings bounds the read-only binds kept over the refs beside the
// branch's (a repository with more is asked to pack them).
const maxRefSiblings = 200

// Worktree is a linked worktree's layout, as read from its `.git` file.
type Worktree struct {
	Root   string `json:"root"`             // the checkout
	Admin  string `json:"admin"`            // COMMON/worktrees/ID
	Common string `json:"common"`           // the repository's git dir
	Branch string `json:"branch,omitempty"` // HEAD's branch (refs/heads/BRANCH); "" when detached
}

// FindWorktree reads root's `.git` file and checks that it is a linked
// worktree of the usual shape: the admin dir lies in COMMON/worktrees, its
// commondir names COMMON and its gitdir names root's `.git`; no link on
// the way. Anything else is not treated as a worktree.
func FindWorktree(root string) (*Worktree, error) {
	admin, err := readGitdirFile(filepath.Join(root, ".git"))
	if err != nil {
		return nil, err
	}
	if !noLinks(admin) || filepath.Base(filepath.Dir(admin)) != "worktrees" {
		return nil, fmt.Errorf("%s is not a worktree's admin dir", admin)
	}
	common := filepath.Dir(filepath.Dir(admin))
	b, err := readBounded(admin, "commondir", maxGitFileRead)
	if err != nil {
		return nil, fmt.Errorf("%s: commondir: %w", admin, err)
	}
	cd := strings.TrimSpace(string(b))
	if !filepath.IsAbs(cd) {
		cd = filepath.Join(admin, cd)
	}
	if filepath.Clean(cd) != common || !noLinks(common) {
		return nil, fmt.Errorf("%s: commondir does not name %s", admin, common)
	}
	b, err = readBounded(admin, "gitdir", maxGitFileRead)
	if err != nil || filepath.Clean(strings.TrimSpace(string(b))) != filepath.Join(root, ".git") {
		return nil, fmt.Errorf("%s: gitdir does not name %s", admin, filepath.Join(root, ".git"))
	}
	for _, d := range []string{"objects", "refs"} {
		if st, err := os.Lstat(filepath.Join(common, d)); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("%s has no %s directory", common, d)
		}
	}
	w := &Worktree{Root: root, Admin: admin, Common: common}
	if b, err := readBounded(admin, "HEAD", maxGitFileRead); err == nil {
		if ref, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "ref: refs/heads/"); ok && ValidBranch(ref) {
			w.Branch = ref
		}
	}
	return w, nil
}

// ValidBranch reports whether b is a branch name safe to use as a path
// under refs/heads: git's check-ref-format rules that matter for that.
func ValidBranch(b string) bool {
	if b == "" || len(b) > 200 || strings.HasPrefix(b, "-") || strings.HasSuffix(b, "/") || strings.HasSuffix(b, ".") ||
		strings.Contains(b, "..") || strings.Contains(b, "@{") || strings.Contains(b, "//") || b == "@" {
		return false
	}
	for _, r := range b {
		if r < 0x20 || r == 0x7f || strings.ContainsRune(" ~^:?*[\\", r) {
			return false
		}
	}
	for _, part := range strings.Split(b, "/") {
		if part == "" || strings.HasPrefix(part, ".") || strings.HasSuffix(part, ".lock") {
			return false
		}
	}
	return true
}

// guard lists what a sandbox in w needs: ro read-only, rw writable (bound
// onto itself). It makes the empty config.worktree and the branch's ref
// directories where missing. A branch with more refs beside it than
// maxRefSiblings is an error (its ref stays read-only: commits fail).
func (w *Worktree) guard() (ro, rw []string, err error) {
	// The git dir itself, read-only: where the host's filesystem is not
	// shown (a repository in the hidden home, or under /tmp) git inside
	// still reads its config, HEAD and packed-refs, and can write no
	// packed-refs of its own (pack-refs would drop the branch's loose
	// ref on the host and keep the packed one inside).
	ro = append(ro, w.Common)
	rw = append(rw, w.Admin)
	cw := filepath.Join(w.Admin, "config.worktree")
	if _, err := os.Lstat(cw); errors.Is(err, os.ErrNotExist) {
		writeNew(cw, "")
	}
	// modules: the worktree's own submodules' git dirs (config, hooks);
	// an operation in progress: its exec lines run on --continue.
	for _, n := range []string{"commondir", "gitdir", "config.worktree", "modules", "rebase-merge", "rebase-apply", "sequencer"} {
		if st, err := os.Lstat(filepath.Join(w.Admin, n)); err == nil && (st.Mode().IsRegular() || st.IsDir()) {
			ro = append(ro, filepath.Join(w.Admin, n))
		}
	}
	objects := filepath.Join(w.Common, "objects")
	rw = append(rw, objects)
	info := filepath.Join(objects, "info")
	os.Mkdir(info, 0o755)
	if noLinks(info) {
		ro = append(ro, info)
	}
	// The packs (most of the history) and what finds objects in them
	// (indexes, a multi-pack-index) cannot be removed or replaced: each
	// is read-only, up to a bound.
	if names, err := dirNames(filepath.Join(objects, "pack")); err == nil && len(names) <= maxRefSiblings {
		for _, n := range names {
			ro = append(ro, filepath.Join(objects, "pack", n))
		}
	}
	if w.Branch == "" {
		return ro, rw, nil
	}
	for _, top := range []string{"refs/heads", "logs/refs/heads"} {
		dir := filepath.Join(w.Common, top, filepath.Dir(w.Branch))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, nil, fmt.Errorf("workspace: make %s: %w", dir, err)
		}
		if !noLinks(dir) {
			return nil, nil, fmt.Errorf("workspace: %s is reached through a symlink", dir)
		}
		names, err := dirNames(dir)
		if err != nil {
			return nil, nil, fmt.Errorf("workspace: %w", err)
		}
		if len(names) > maxRefSiblings {
			return nil, nil, fmt.Errorf("%s holds %d refs beside %s, more than airlock guards one by one (%d): pack them with git pack-refs --all", dir, len(names), w.Branch, maxRefSiblings)
		}
		rw = append(rw, dir)
		for _, n := range names {
			if n != filepath.Base(w.Branch) {
				ro = append(ro, filepath.Join(dir, n))
			}
		}
	}
	return ro, rw, nil
}

// WorktreeGuard is GitGuard's part for a workspace that is a linked
// worktree: ro and rw as guard lists them; nothing when root is not one.
func WorktreeGuard(root string) (ro, rw []string, err error) {
	w, err := FindWorktree(root)
	if err != nil {
		return nil, nil, nil
	}
	return w.guard()
}

func dirNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(maxRefSiblings + 1)
	if err != nil && len(names) == 0 {
		return nil, nil
	}
	sort.Strings(names)
	return names, nil
}

// worktreeStart is what the exit review compares with: the names in the
// admin dir and beside the branch's ref at start.
type worktreeStart struct {
	Worktree
	AdminNames []string `json:"admin_names"`
	RefNames   []string `json:"ref_names"`
	LogNames   []string `json:"log_names"`
	// Since is when what the run writes begins (ns): after the links
	// keepLooseObjects made (a link changes an object's ctime), less the
	// timestamps' coarseness.
	Since int64 `json:"since"`
}

const worktreeFile = "worktree.json"

// snapshotWorktree notes what the exit review needs, when the workspace is
// a linked worktree.
func (s *Session) snapshotWorktree() error {
	w, err := FindWorktree(s.m.Root)
	if err != nil {
		return nil
	}
	st := worktreeStart{Worktree: *w}
	st.AdminNames, _ = dirNames(w.Admin)
	if w.Branch != "" {
		st.RefNames, _ = dirNames(filepath.Join(w.Common, "refs/heads", filepath.Dir(w.Branch)))
		st.LogNames, _ = dirNames(filepath.Join(w.Common, "logs/refs/heads", filepath.Dir(w.Branch)))
	}
	keepLooseObjects(filepath.Join(w.Common, "objects"), s.path(keptObjects))
	st.Since = max(s.m.Started.UnixNano(), time.Now().Add(-settled).UnixNano())
	return writeJSONFile(s.path(worktreeFile), st)
}

// keptObjects holds links to the repository's loose objects, taken at start.
const keptObjects = "objects-kept"

// maxKeptObjects bounds the loose objects linked at start.
const maxKeptObjects = 100000

// keepLooseObjects links each loose object in objects into dir (where both
// are on one filesystem): a link keeps the object's bytes if the sandbox
// removes its name, so the exit review can put it back.
func keepLooseObjects(objects, dir string) {
	names, _ := dirNames(objects)
	n := 0
	for _, d := range names {
		if len(d) != 2 || !isHex(d) {
			continue
		}
		files, _ := dirNamesMax(filepath.Join(objects, d), maxKeptObjects)
		made := false
		for _, f := range files {
			if n++; n > maxKeptObjects {
				return
			}
			if !isHex(f) {
				continue
			}
			if !made {
				if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
					return
				}
				made = true
			}
			if err := unix.Linkat(unix.AT_FDCWD, filepath.Join(objects, d, f), unix.AT_FDCWD, filepath.Join(dir, d, f), 0); errors.Is(err, unix.EXDEV) {
				os.RemoveAll(dir) // another filesystem: nothing to keep this way
				return
			}
		}
	}
}

// restoreLooseObjects links back each kept object whose name the run
// removed (or whose forgery verifyObjects renamed away), if its bytes
// still hash to its name, and reports it; then drops the links.
func restoreLooseObjects(objects, dir string) []Defused {
	defer os.RemoveAll(dir)
	var out []Defused
	names, _ := dirNames(dir)
	for _, d := range names {
		files, _ := dirNamesMax(filepath.Join(dir, d), maxKeptObjects)
		for _, f := range files {
			p := filepath.Join(objects, d, f)
			if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
				continue
			}
			kept := filepath.Join(dir, d, f)
			rep := Defused{Path: p, Why: "an object the run removed"}
			switch {
			case !looseObjectOK(kept, d+f):
				rep.Action = "lost: its bytes were changed in place too (git fsck shows what is missing)"
			case os.MkdirAll(filepath.Dir(p), 0o755) != nil || unix.Linkat(unix.AT_FDCWD, kept, unix.AT_FDCWD, p, 0) != nil:
				rep.Action = "not put back"
			default:
				rep.Action = "put back"
			}
			out = append(out, rep)
			if len(out) >= maxDefused {
				return out
			}
		}
	}
	return out
}

// worktreeOwnName reports whether git makes name at a worktree admin dir's top.
func worktreeOwnName(name string) bool {
	switch name {
	case "gitdir", "commondir", "config.worktree", "locked", "ORIG_HEAD", "FETCH_HEAD", "AUTO_MERGE", "REBASE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD":
		return true
	case "config", "hooks", "info", "modules", "worktrees", "remotes", "branches", "packed-refs", "objects":
		return false // shared parts: git reads them from the common dir, a copy here is no business of a worktree
	}
	return gitOwnName(name)
}

// reviewWorktree defuses what the run left in the worktree's admin dir
// that the host's git would follow or run, puts HEAD back on the branch,
// and reports refs that appeared beside its branch.
func (s *Session) reviewWorktree() []Defused {
	b, err := os.ReadFile(s.path(worktreeFile))
	if err != nil {
		return nil
	}
	var st worktreeStart
	if json.Unmarshal(b, &st) != nil || st.Admin == "" {
		return nil
	}
	var out []Defused
	admin := st.Admin
	names, _ := dirNames(admin)
	for _, n := range names {
		var lst unix.Stat_t
		if unix.Lstat(filepath.Join(admin, n), &lst) != nil {
			continue
		}
		switch {
		case lst.Mode&unix.S_IFMT == unix.S_IFLNK:
			out = append(out, defuseAt(admin, n, "a link in the worktree's git directory: git would read or write what it points at"))
		case !worktreeOwnName(n) && !slices.Contains(st.AdminNames, n):
			out = append(out, defuseAt(admin, n, "a name git does not make, in the worktree's git directory"))
		case n == "rebase-merge" || n == "rebase-apply" || n == "sequencer":
			if !slices.Contains(st.AdminNames, n) {
				out = append(out, defuseAt(admin, n, "an operation in progress: its exec lines and merge strategy run when you --continue it"))
			}
		}
	}
	// Links further down (logs/, refs/ of the worktree's own).
	out = append(out, defuseLinks(admin, 4, 2000, true)...)
	// An empty config.worktree is the placeholder; anything else the
	// sandbox could not have written (read-only inside).
	if fi, err := os.Lstat(filepath.Join(admin, "config.worktree")); err == nil && fi.Mode().IsRegular() && fi.Size() == 0 {
		os.Remove(filepath.Join(admin, "config.worktree"))
	}
	if st.Branch != "" {
		want := "ref: refs/heads/" + st.Branch + "\n"
		if head, err := readBounded(admin, "HEAD", maxGitFileRead); err != nil || !bytes.Equal(head, []byte(want)) {
			var old string
			if err := writeFileBeneath(admin, "HEAD", []byte(want), 0o644, &old); err == nil {
				out = append(out, Defused{Path: filepath.Join(admin, "HEAD"), Why: "the worktree's HEAD left its branch " + st.Branch,
					Action: "put back on " + st.Branch + keptAs(old)})
			}
		}
		for _, side := range []struct {
			top, what string
			had       []string
		}{{"refs/heads", "ref", st.RefNames}, {"logs/refs/heads", "reflog", st.LogNames}} {
			dir := filepath.Join(st.Common, side.top, filepath.Dir(st.Branch))
			now, _ := dirNames(dir)
			for _, n := range now {
				if n == filepath.Base(st.Branch) {
					// The branch's own: a regular file, or git would read
					// (a symref) or append to (a reflog) what a link names;
					// the ref an object id, or "ref: other" would have the
					// host's commits on the branch move another.
					var lst unix.Stat_t
					if unix.Lstat(filepath.Join(dir, n), &lst) == nil && lst.Mode&unix.S_IFMT != unix.S_IFREG {
						out = append(out, defuseAt(dir, n, "the branch's "+side.what+" is not a plain file: git would follow it"))
					} else if side.what == "ref" && !objectIDFile(dir, n) {
						out = append(out, defuseAt(dir, n, "the branch's ref holds no object id (a symbolic ref would move another branch)"))
					}
					continue
				}
				if slices.Contains(side.had, n) || strings.HasSuffix(n, defusedSuffix) {
					continue
				}
				// Not removed: another sandbox's --branch, or the host
				// user, may have made it meanwhile.
				out = append(out, Defused{Path: filepath.Join(dir, n), Why: "a " + side.what + " that appeared beside " + st.Branch + " during the run (made by the run, another sandbox or on the host)",
					Action: "left as it is: if it is not yours, git branch -D " + strings.TrimPrefix(filepath.Join(filepath.Dir(st.Branch), n), "./")})
			}
		}
	}
	// objects: a link there would have the host's git write objects
	// elsewhere, or read them from elsewhere.
	objects := filepath.Join(st.Common, "objects")
	names, _ = dirNames(objects)
	for _, n := range names {
		var lst unix.Stat_t
		if unix.Lstat(filepath.Join(objects, n), &lst) == nil && lst.Mode&unix.S_IFMT == unix.S_IFLNK {
			out = append(out, defuseAt(objects, n, "a link in the repository's objects: git would write or read objects where it points"))
		}
	}
	out = append(out, defuseLinks(filepath.Join(objects, "pack"), 0, 10000, false)...)
	out = append(out, verifyObjects(st.Common, max(st.Since, s.m.Started.UnixNano()))...)
	out = append(out, restoreLooseObjects(objects, s.path(keptObjects))...)
	return out
}

// defuseLinks renames away the symlinks under dir (bounded depth and count).
func defuseLinks(dir string, depth, budget int, skipTop bool) []Defused {
	var out []Defused
	var walk func(rel string, d int)
	walk = func(rel string, d int) {
		if d > depth || budget <= 0 {
			return
		}
		names, _ := dirNames(filepath.Join(dir, rel))
		for _, n := range names {
			budget--
			p := filepath.Join(rel, n)
			var st unix.Stat_t
			if unix.Lstat(filepath.Join(dir, p), &st) != nil {
				continue
			}
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFLNK:
				if d > 0 || !skipTop {
					out = append(out, defuseAt(dir, p, "a link in the worktree's git directory: git would read or write what it points at"))
				}
			case unix.S_IFDIR:
				walk(p, d+1)
			}
		}
	}
	walk("", 0)
	return out
}

// defuseAt is defuse with the path reported in full.
func defuseAt(dir, rel, why string) Defused {
	d := defuse(dir, rel, why)
	d.Path = filepath.Join(dir, rel)
	return d
}

// Bounds on the exit check of the objects a run wrote.
const (
	maxObjectScan   = 200000
	maxObjectVerify = 20000
)

// verifyObjects checks what the run wrote in the repository's objects
// (files with a ctime since start): a loose object must hash to its name
// and a pack must pass git verify-pack, or another branch's content could
// have been swapped under its name; one that does not is renamed away.
func verifyObjects(common string, start int64) []Defused {
	objects := filepath.Join(common, "objects")
	var out []Defused
	scanned, verified := 0, 0
	names, _ := dirNames(objects)
	for _, d := range names {
		if len(d) != 2 || !isHex(d) {
			continue
		}
		files, _ := dirNamesMax(filepath.Join(objects, d), maxObjectScan)
		for _, f := range files {
			if scanned++; scanned > maxObjectScan || verified >= maxObjectVerify {
				return out
			}
			var st unix.Stat_t
			p := filepath.Join(objects, d, f)
			if !isHex(f) || unix.Lstat(p, &st) != nil || st.Ctim.Nano() < start {
				continue
			}
			verified++
			if st.Mode&unix.S_IFMT != unix.S_IFREG || !looseObjectOK(p, d+f) {
				out = append(out, defuseAt(filepath.Join(objects, d), f, "an object whose content does not match its name: it would stand in for another"))
			}
		}
	}
	pack := filepath.Join(objects, "pack")
	files, _ := dirNames(pack)
	for _, f := range files {
		idx, ok := strings.CutSuffix(f, ".pack")
		if !ok {
			// A side file written during the run (a multi-pack-index,
			// a reverse index, a bitmap): git trusts it to find objects,
			// and nothing here checks it.
			var st unix.Stat_t
			if !strings.HasSuffix(f, ".idx") && !strings.Contains(f, defusedSuffix) && unix.Lstat(filepath.Join(pack, f), &st) == nil && st.Ctim.Nano() >= start {
				out = append(out, defuseAt(pack, f, "a file the run wrote beside the packs: git trusts it to find objects"))
			}
			continue
		}
		var st, ist unix.Stat_t
		if unix.Lstat(filepath.Join(pack, f), &st) != nil || unix.Lstat(filepath.Join(pack, idx+".idx"), &ist) != nil ||
			st.Ctim.Nano() < start && ist.Ctim.Nano() < start {
			continue
		}
		if _, err := HostGit(common, "verify-pack", filepath.Join(pack, idx+".idx")); err != nil {
			out = append(out, defuseAt(pack, f, "a pack git verify-pack refuses: its objects could stand in for others"))
			out = append(out, defuseAt(pack, idx+".idx", "the index of a pack git verify-pack refuses"))
		}
	}
	return out
}

func isHex(s string) bool {
	for _, r := range s {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return s != ""
}

func dirNamesMax(dir string, n int) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(n)
}

// looseObjectOK reports whether the loose object at p inflates to bytes
// whose hash (SHA-1, or SHA-256 for a 64-digit name) is name.
func looseObjectOK(p, name string) bool {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	z, err := zlib.NewReader(f)
	if err != nil {
		return false
	}
	var h hash.Hash
	switch len(name) {
	case 40:
		h = sha1.New()
	case 64:
		h = sha256.New()
	default:
		return false
	}
	if _, err := io.Copy(h, z); err != nil {
		return false
	}
	return hex.EncodeToString(h.Sum(nil)) == name
}

// objectIDFile reports whether dir/name holds an object id and a newline.
func objectIDFile(dir, name string) bool {
	b, err := readBounded(dir, name, 128)
	if err != nil {
		return false
	}
	id := strings.TrimSuffix(string(b), "\n")
	return (len(id) == 40 || len(id) == 64) && isHex(id)
}
