package workspace

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// tmpPrefix names apply's staged files in the workspace's root; a killed
// apply's leftovers are removed by the next one.
const tmpPrefix = ".airlock-apply-"

// Skipped is a change apply left alone, and why.
type Skipped struct {
	Path string `json:"path"`
	Why  string `json:"why"`
}

// ApplyResult says what an apply did.
type ApplyResult struct {
	Applied []Change  `json:"applied"`
	Skipped []Skipped `json:"skipped,omitempty"`
}

// applier carries changes from a source tree (an overlay upper dir, a copy)
// into the host's workspace. It works in two phases: stage writes every new
// file's bytes to a temp file in the workspace's root (fsync'd, hash
// checked against the reviewed change); only when all are staged does
// commit rename them into place, one atomic rename per file. A failure while
// staging (a full disk) removes the temp files and applies nothing; a kill
// at any moment leaves each file either old or new.
type applier struct {
	root, src int // dirfds: the host workspace, the sandbox's tree
	// expect is the host state each change was computed against (nil: the
	// path did not exist); a host that no longer matches is a conflict.
	expect func(Change) *Entry
	tag    string
	seq    int
	staged map[string]string // change path -> temp name in the root
	res    ApplyResult
	uid    int
}

// Apply carries changes from the tree at src into the workspace at root.
// Every path is resolved beneath its root without following symlinks, so a
// link planted by the sandbox (or on the host) cannot redirect a write.
func Apply(root, src string, changes []Change, expect func(Change) *Entry) (ApplyResult, error) {
	rfd, err := openDirNoSymlinks(root)
	if err != nil {
		return ApplyResult{}, err
	}
	defer unix.Close(rfd)
	sfd := -1
	if src != "" {
		if sfd, err = unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err != nil {
			return ApplyResult{}, fmt.Errorf("open the sandbox's changes in %s: %w", src, err)
		}
		defer unix.Close(sfd)
	}
	a := &applier{root: rfd, src: sfd, expect: expect, tag: strconv.FormatInt(int64(os.Getpid()), 36), staged: map[string]string{}, uid: os.Geteuid()}
	cleanStaged(rfd)
	return a.run(changes)
}

// openDirNoSymlinks opens an absolute directory path refusing a symlink in
// any component: the workspace must still be the directory it was.
func openDirNoSymlinks(p string) (int, error) {
	if !path.IsAbs(p) {
		return -1, fmt.Errorf("workspace %s is not an absolute path", p)
	}
	fd, err := openNoSymlinks(p)
	switch {
	case errors.Is(err, unix.ELOOP):
		return -1, fmt.Errorf("workspace %s is now reached through a symlink: refusing to write through it", p)
	case errors.Is(err, unix.ENOTDIR):
		return -1, fmt.Errorf("workspace %s is no longer a directory", p)
	case err != nil:
		return -1, fmt.Errorf("open workspace %s: %w", p, err)
	}
	return fd, nil
}

// cleanStaged removes what a killed apply left in the root.
func cleanStaged(root int) {
	f, err := os.Open(fmt.Sprintf("/proc/self/fd/%d", root))
	if err != nil {
		return
	}
	defer f.Close()
	names, _ := f.Readdirnames(-1)
	for _, n := range names {
		if strings.HasPrefix(n, tmpPrefix) {
			unix.Unlinkat(root, n, 0)
		}
	}
}

func (a *applier) skip(c Change, format string, args ...any) {
	a.res.Skipped = append(a.res.Skipped, Skipped{c.Path, fmt.Sprintf(format, args...)})
}

func (a *applier) run(changes []Change) (ApplyResult, error) {
	var todo []Change
	for _, c := range changes {
		switch {
		case !c.Applicable():
			if c.Refused != "" {
				a.skip(c, "%s", c.Refused)
			}
		case !validRel(c.Path):
			a.skip(c, "not a plain relative path")
		default:
			already, why := a.check(c)
			switch {
			case why != "":
				a.skip(c, "%s", why)
			case already:
				a.res.Applied = append(a.res.Applied, c)
			default:
				todo = append(todo, c)
			}
		}
	}
	// Stage: every new file and link, bytes checked, on disk.
	for _, c := range todo {
		if c.After == nil || (c.After.Type != TypeFile && c.After.Type != TypeSymlink) || c.Kind == ModeOnly {
			continue
		}
		if err := a.stage(c); err != nil {
			a.unstage()
			return a.res, fmt.Errorf("%s: %w; nothing was applied", Quote(c.Path), err)
		}
	}
	// Commit, in an order that keeps parents before children: deletions
	// (deepest first), new directories (shallowest first), files, modes.
	sort.SliceStable(todo, func(i, j int) bool { return todo[i].Path < todo[j].Path })
	done := map[string]bool{}
	var firstErr error
	fail := func(c Change, err error) {
		a.skip(c, "%v", err)
		if firstErr == nil {
			firstErr = fmt.Errorf("%s: %w", Quote(c.Path), err)
		}
	}
	for i := len(todo) - 1; i >= 0; i-- {
		c := todo[i]
		if c.Before != nil && (c.After == nil || (c.After.Type != c.Before.Type && (c.Before.Type == TypeDir || c.After.Type == TypeDir))) {
			if err := a.remove(c); err != nil {
				fail(c, err)
				done[c.Path] = true
				continue
			}
			if c.After == nil {
				a.res.Applied = append(a.res.Applied, c)
				done[c.Path] = true
			}
		}
	}
	for _, c := range todo {
		if done[c.Path] || c.After == nil || c.After.Type != TypeDir || c.Kind == ModeOnly {
			continue
		}
		done[c.Path] = true
		if err := a.mkdir(c); err != nil {
			fail(c, err)
			continue
		}
		a.res.Applied = append(a.res.Applied, c)
	}
	for _, c := range todo {
		if done[c.Path] {
			continue
		}
		tmp, ok := a.staged[c.Path]
		if !ok {
			continue
		}
		done[c.Path] = true
		if err := a.commit(c, tmp); err != nil {
			fail(c, err)
			continue
		}
		delete(a.staged, c.Path)
		a.res.Applied = append(a.res.Applied, c)
	}
	for _, c := range todo {
		if done[c.Path] {
			continue
		}
		if err := a.chmod(c.Path, c.After.Mode); err != nil {
			fail(c, err)
			continue
		}
		a.res.Applied = append(a.res.Applied, c)
	}
	a.unstage() // whatever a failure left
	return a.res, firstErr
}

func validRel(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
		return false
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" || part == "." || part == ".." {
			return false
		}
	}
	return true
}

var errNotDir = errors.New("not a directory")

// parentFD opens rel's parent beneath the root, as O_PATH.
func (a *applier) parentFD(rel string) (int, string, error) {
	fd, err := openBeneath(a.root, parent(rel), oPath|unix.O_DIRECTORY)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOTDIR) {
			return -1, "", fmt.Errorf("%w: a directory above it on the host is a symlink or a file: refusing to write through it", errNotDir)
		}
		return -1, "", fmt.Errorf("open its directory on the host: %w", err)
	}
	return fd, path.Base(rel), nil
}

// check compares the host's path with the state the change was computed
// against. A host that already holds the change's result (a retry after an
// interrupted apply) needs nothing done; anything else is a conflict.
func (a *applier) check(c Change) (already bool, why string) {
	dfd, name, err := a.parentFD(c.Path)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, errNotDir) { // the host has no such path (yet)
			switch {
			case a.expect(c) == nil:
				return false, ""
			case c.After == nil:
				return true, ""
			}
			return false, "deleted on the host since the sandbox started"
		}
		return false, err.Error()
	}
	defer unix.Close(dfd)
	ok, err := hostIs(dfd, name, a.expect(c), false)
	if err != nil {
		return false, err.Error()
	}
	if ok {
		return false, ""
	}
	if done, _ := hostIs(dfd, name, c.After, true); done {
		return true, ""
	}
	return false, "changed on the host since the sandbox started (see it with airlock diff; apply the rest, then copy this one by hand)"
}

// hostIs reports whether the host's dfd/name is want (nil: absent); with
// mode it compares permission bits too.
func hostIs(dfd int, name string, want *Entry, mode bool) (bool, error) {
	var st unix.Stat_t
	err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return want == nil, nil
	}
	if err != nil {
		return false, fmt.Errorf("cannot check it on the host: %v", err)
	}
	if want == nil {
		return false, nil
	}
	cur := entryOf(name, &st)
	if cur.Type != want.Type || (mode && cur.Type != TypeSymlink && cur.Mode != want.Mode) {
		return false, nil
	}
	switch cur.Type {
	case TypeFile:
		if cur.Size != want.Size {
			return false, nil
		}
		if want.SHA256 == "" {
			return true, nil
		}
		fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
		if err != nil {
			return false, fmt.Errorf("cannot read it on the host: %v", err)
		}
		f := os.NewFile(uintptr(fd), name)
		sum, _, err := hashReader(f)
		f.Close()
		return err == nil && sum == want.SHA256, nil
	case TypeSymlink:
		l, _ := readlinkat(dfd, name)
		return l == want.Link, nil
	}
	return true, nil
}

// stage copies one file or link from the sandbox's tree into a temp file in
// the root, checking that its bytes are the ones reviewed.
func (a *applier) stage(c Change) error {
	a.seq++
	tmp := fmt.Sprintf("%s%s-%d", tmpPrefix, a.tag, a.seq)
	if c.After.Type == TypeSymlink {
		if err := unix.Symlinkat(c.After.Link, a.root, tmp); err != nil {
			return fmt.Errorf("stage link: %w", err)
		}
		a.staged[c.Path] = tmp
		return nil
	}
	sfd, err := openBeneath(a.src, c.Path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return fmt.Errorf("open the sandbox's version: %w", err)
	}
	src := os.NewFile(uintptr(sfd), c.Path)
	defer src.Close()
	var st unix.Stat_t
	if err := unix.Fstat(sfd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != c.After.Size {
		return errors.New("the sandbox's version changed since it was reviewed")
	}
	dfd, err := unix.Openat(a.root, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create temp file: %w", err)
	}
	a.staged[c.Path] = tmp
	dst := os.NewFile(uintptr(dfd), tmp)
	defer dst.Close()
	h := sha256.New()
	bp := bufPool.Get().(*[]byte)
	_, err = io.CopyBuffer(io.MultiWriter(dst, h), io.LimitReader(src, c.After.Size+1), *bp)
	bufPool.Put(bp)
	if err != nil {
		return describeWrite(err)
	}
	if hex.EncodeToString(h.Sum(nil)) != c.After.SHA256 {
		return errors.New("the sandbox's version changed since it was reviewed")
	}
	if err := unix.Fchmod(dfd, c.After.Mode&0o7777); err != nil {
		return fmt.Errorf("set mode: %w", err)
	}
	if a.uid == 0 && c.Before != nil {
		// Root applying into someone's tree keeps the file theirs.
		if pfd, name, err := a.parentFD(c.Path); err == nil {
			var old unix.Stat_t
			if unix.Fstatat(pfd, name, &old, unix.AT_SYMLINK_NOFOLLOW) == nil {
				unix.Fchown(dfd, int(old.Uid), int(old.Gid))
				unix.Fchmod(dfd, c.After.Mode&0o7777) // chown clears setuid
			}
			unix.Close(pfd)
		}
	}
	if err := dst.Sync(); err != nil {
		return describeWrite(err)
	}
	return nil
}

func describeWrite(err error) error {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return errors.New("the disk is full (or over quota)")
	}
	return err
}

func (a *applier) unstage() {
	for p, tmp := range a.staged {
		unix.Unlinkat(a.root, tmp, 0)
		delete(a.staged, p)
	}
}

// beforeRename, when set (by the crash test), runs before each rename.
var beforeRename func()

// commit renames a staged file into place: old or new, never a mix.
func (a *applier) commit(c Change, tmp string) error {
	if beforeRename != nil {
		beforeRename()
	}
	if err := a.mkdirParents(c.Path); err != nil {
		return err
	}
	dfd, name, err := a.parentFD(c.Path)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if err := unix.Renameat(a.root, tmp, dfd, name); err != nil {
		if errors.Is(err, unix.EXDEV) {
			return errors.New("its directory is another filesystem mounted inside the workspace: copy it by hand")
		}
		return fmt.Errorf("rename into place: %w", err)
	}
	if c.Before == nil {
		a.ownLikeParent(dfd, name, c.After.Mode, c.After.Type == TypeSymlink)
	}
	return nil
}

// ownLikeParent gives what root's apply created to the owner of the
// directory it is in (the workspace's owner, in effect): a root's sandbox
// writes as that owner, and its changes applied must not be root's. Others
// create as themselves already. chown clears set-id bits, so mode is set again.
func (a *applier) ownLikeParent(dfd int, name string, mode uint32, link bool) {
	if a.uid != 0 {
		return
	}
	var st unix.Stat_t
	if unix.Fstat(dfd, &st) != nil || (st.Uid == 0 && st.Gid == 0) {
		return
	}
	if unix.Fchownat(dfd, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW) == nil && !link {
		unix.Fchmodat(dfd, name, mode&0o7777, 0)
	}
}

// mkdirParents makes missing parents of rel (directories the change set
// creates are made first, so this only fills gaps such as excluded ones).
func (a *applier) mkdirParents(rel string) error {
	dir := parent(rel)
	if dir == "" {
		return nil
	}
	fd, err := openBeneath(a.root, dir, oPath|unix.O_DIRECTORY)
	if err == nil {
		unix.Close(fd)
		return nil
	}
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOTDIR) {
		return fmt.Errorf("a directory above it on the host is a symlink or a file: refusing to write through it")
	}
	if !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("open its directory on the host: %w", err)
	}
	if err := a.mkdirParents(dir); err != nil {
		return err
	}
	pfd, name, err := a.parentFD(dir)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := unix.Mkdirat(pfd, name, 0o755); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return nil
		}
		return fmt.Errorf("create directory %s: %w", Quote(dir), err)
	}
	a.ownLikeParent(pfd, name, 0o755, false)
	return nil
}

func (a *applier) mkdir(c Change) error {
	if err := a.mkdirParents(c.Path); err != nil {
		return err
	}
	dfd, name, err := a.parentFD(c.Path)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if err := unix.Mkdirat(dfd, name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return describeWrite(err)
	} else if err == nil {
		a.ownLikeParent(dfd, name, 0o700, false)
	}
	return a.chmod(c.Path, c.After.Mode)
}

// remove deletes the host's path (a directory only when empty).
func (a *applier) remove(c Change) error {
	dfd, name, err := a.parentFD(c.Path)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	flags := 0
	if c.Before.Type == TypeDir {
		flags = unix.AT_REMOVEDIR
	}
	err = unix.Unlinkat(dfd, name, flags)
	switch {
	case err == nil, errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST):
		return errors.New("the directory holds files on the host that the sandbox did not see (excluded, or new): left in place")
	}
	return err
}

// chmod sets a path's mode without following a symlink.
func (a *applier) chmod(rel string, mode uint32) error {
	fd, err := openBeneath(a.root, rel, oPath)
	if err != nil {
		return fmt.Errorf("open it on the host: %w", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return nil
	}
	return chmodFD(fd, mode&0o7777)
}
