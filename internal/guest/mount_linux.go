package guest

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/proto"
)

// newRootAt is where the cloned host tree is attached before pivot_root. Every
// source was opened as a descriptor before anything is mounted here, so covering
// the host's /tmp in our (private) view loses nothing.
const newRootAt = "/tmp"

// stepError names the setup step that failed, so the host can say which.
type stepError struct {
	step string
	err  error
}

func (e *stepError) Error() string { return e.step + ": " + e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

func step(name string, err error) error {
	if err == nil {
		return nil
	}
	return &stepError{name, err}
}

// builder assembles the sandbox's root from descriptors, never from paths the
// sandbox could have raced: targets are resolved with RESOLVE_IN_ROOT inside
// the new root, so a symlink there cannot point a mount at the host.
type builder struct {
	root    int   // O_PATH of the new root
	scratch int   // detached tmpfs holding the empty file used to mask files
	sealed  []int // read-only tmpfs mounts, made read-only once their children are in place
}

// buildRoot builds the sandbox's filesystem view from the plan and pivots
// into it. The old root is still being detached when it returns: the caller
// must receive from detached before it resolves any path (see pivot).
func buildRoot(in *proto.Init, premade []*os.File) (detached <-chan error, err error) {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, step("make mounts private", err)
	}
	// Clone every source first, while the host view is intact.
	sources := make([]int, len(in.Mounts))
	layers := make([][3]int, len(in.Mounts))
	made := func(n int) (int, error) {
		if n < 1 || n > len(premade) {
			return -1, fmt.Errorf("the host sent %d mounts, the plan names the %dth", len(premade), n)
		}
		return int(premade[n-1].Fd()), nil
	}
	for i, m := range in.Mounts {
		sources[i] = -1
		if m.FD > 0 {
			// The host made it (idmapped): attach it as it is.
			fd, err := made(m.FD)
			if err != nil {
				return nil, step("mount "+m.Target, err)
			}
			if m.Kind != proto.MountOverlay {
				sources[i] = fd
				continue
			}
			// overlayfs takes a layer only from a mount namespace whose
			// owner the mounter is privileged over, which a detached tree
			// of the host's is not: the layers are stacked at newRootAt in
			// ours first (the new root covers them; the overlay keeps
			// private clones of them).
			dir, err := made(m.FD + 1)
			if err != nil {
				return nil, step("mount "+m.Target, err)
			}
			for j, name := range []string{"", path.Base(m.Upper), path.Base(m.Work)} {
				if j < 2 {
					if err := unix.MoveMount([]int{fd, dir}[j], "", unix.AT_FDCWD, newRootAt, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
						return nil, step("attach overlay layer of "+m.Target, err)
					}
				}
				at, err := unix.Open(path.Join(newRootAt, name), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if err != nil {
					return nil, step("open overlay layer of "+m.Target, err)
				}
				defer unix.Close(at)
				layers[i][j] = at
			}
			continue
		}
		if m.Kind == proto.MountOverlay {
			for j, p := range []string{m.Source, m.Upper, m.Work} {
				fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
				if err != nil {
					return nil, step("open overlay layer "+p, err)
				}
				defer unix.Close(fd)
				layers[i][j] = fd
			}
			continue
		}
		if m.Kind != proto.MountBind {
			continue
		}
		fd, err := cloneTree(m.Source)
		if err != nil {
			if m.Optional && errors.Is(err, unix.ENOENT) {
				continue
			}
			return nil, step("clone "+m.Source, err)
		}
		defer unix.Close(fd)
		sources[i] = fd
	}
	devNodes := map[string]int{}
	for _, n := range devNodeNames {
		fd, err := cloneTree("/dev/" + n)
		if err != nil {
			return nil, step("clone /dev/"+n, err)
		}
		defer unix.Close(fd)
		devNodes[n] = fd
	}

	b := &builder{}
	shadows, dirs := missingParents(in.Mounts)
	if tops, ok := shadows["/"]; ok {
		if err := b.shadow("/", tops); err != nil {
			return nil, step("build root with "+strings.Join(tops, ", "), err)
		}
	} else {
		rootTree, err := cloneTree("/")
		if err != nil {
			return nil, step("clone host root", err)
		}
		defer unix.Close(rootTree)
		if err := setAttr(rootTree, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, 0, true); err != nil {
			return nil, step("make root read-only", err)
		}
		if err := unix.MoveMount(rootTree, "", unix.AT_FDCWD, newRootAt, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return nil, step("attach new root", err)
		}
	}
	if b.root, err = unix.Open(newRootAt, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return nil, step("open new root", err)
	}
	defer unix.Close(b.root)
	for _, d := range dirs {
		if d != "/" {
			if err := b.shadow(d, shadows[d]); err != nil {
				return nil, step("make mountpoints "+strings.Join(shadows[d], ", ")+" in "+d, err)
			}
		}
	}
	if b.scratch, err = newScratch(); err != nil {
		return nil, step("scratch tmpfs", err)
	}
	defer unix.Close(b.scratch)

	for i, m := range in.Mounts {
		var err error
		switch m.Kind {
		case proto.MountBind:
			if sources[i] < 0 {
				continue
			}
			err = b.bind(sources[i], m, m.FD > 0)
		case proto.MountOverlay:
			err = b.overlay(layers[i], m.Target)
		case proto.MountTmpfs:
			err = b.tmpfs(m)
		case proto.MountProc:
			err = b.proc(m.Target)
		case proto.MountDev:
			err = b.dev(m.Target, devNodes)
		case proto.MountSysfs:
			err = b.sysfs(m.Target)
		default:
			err = fmt.Errorf("unknown mount kind %q", m.Kind)
		}
		if err != nil {
			return nil, step(fmt.Sprintf("mount %s on %s", m.Kind, m.Target), err)
		}
	}
	for _, fd := range b.sealed {
		err := setAttr(fd, unix.MOUNT_ATTR_RDONLY, 0, false)
		unix.Close(fd)
		if err != nil {
			return nil, step("seal read-only tmpfs", err)
		}
	}
	for _, p := range in.Hide {
		if inFreshTmpfs(in.Mounts, p) {
			continue // nothing there to hide
		}
		if err := b.hide(p); err != nil {
			return nil, step("hide "+p, err)
		}
	}
	detached, err = b.pivot()
	return detached, step("pivot_root", err)
}

// inFreshTmpfs reports whether what shows at p is a tmpfs of the plan with
// no mount of the plan at or below p: the tmpfs was made empty, and setup
// only made the mountpoints of the plan's mounts in it, so p does not
// exist there and hiding it would find nothing to cover. What shows at p
// is the last mount applied (in plan order) whose target holds p: a later
// one at the same target, or above it, covers an earlier one (the home's
// tmpfs under a workspace that is the home).
func inFreshTmpfs(mounts []proto.Mount, p string) bool {
	p = path.Clean("/" + p)
	if p == "/" {
		return false
	}
	var shown *proto.Mount
	for i, m := range mounts {
		t := path.Clean("/" + m.Target)
		if t == p || strings.HasPrefix(t, p+"/") {
			return false // something of the plan is placed there
		}
		if t == "/" || strings.HasPrefix(p, t+"/") {
			shown = &mounts[i]
		}
	}
	return shown != nil && shown.Kind == proto.MountTmpfs
}

// missingParents finds mount targets the host lacks whose nearest existing
// ancestor is part of the read-only root (not a tmpfs or bind of the plan,
// where the mountpoint can simply be made): such an ancestor is shadowed by
// a tmpfs holding its entries plus the new directories. It returns the new
// names by ancestor, and the ancestors, parents first.
func missingParents(mounts []proto.Mount) (map[string][]string, []string) {
	out := map[string][]string{}
	var dirs []string
	for _, m := range mounts {
		t := path.Clean("/" + m.Target)
		if t == "/" {
			continue
		}
		if _, err := os.Lstat(t); err == nil || !errors.Is(err, os.ErrNotExist) {
			continue
		}
		d, child := path.Dir(t), path.Base(t)
		for d != "/" {
			if _, err := os.Lstat(d); err == nil {
				break
			}
			d, child = path.Dir(d), path.Base(d)
		}
		covered := false
		for _, o := range mounts {
			ot := path.Clean("/" + o.Target)
			if ot != t && ot != "/" && (d == ot || strings.HasPrefix(d, ot+"/")) {
				covered = true // made inside another mount of the plan
			}
		}
		if covered || slices.Contains(out[d], child) {
			continue
		}
		if _, ok := out[d]; !ok {
			dirs = append(dirs, d)
		}
		out[d] = append(out[d], child)
	}
	slices.SortFunc(dirs, func(a, b string) int { return strings.Count(a, "/") - strings.Count(b, "/") })
	if _, ok := out["/"]; ok {
		dirs = slices.DeleteFunc(dirs, func(d string) bool { return d == "/" })
		dirs = append([]string{"/"}, dirs...)
	}
	return out, dirs
}

// shadow covers dir (the host's, and so the new root's) with a small tmpfs
// holding each of its entries (directories and files as read-only clones of
// their trees, symlinks as copies) plus the directories in names, sealed
// read-only once the plan's mounts are in place. For "/" the tmpfs is the
// new root itself, attached at newRootAt. Only sandboxes whose mounts need
// a directory the host lacks pay for it.
func (b *builder) shadow(dir string, names []string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	// Clone first, while the host's view is whole: newRootAt is the host's /tmp.
	type clone struct {
		name string
		fd   int
		dir  bool
		link string
	}
	var clones []clone
	defer func() {
		for _, c := range clones {
			if c.fd >= 0 {
				unix.Close(c.fd)
			}
		}
	}()
	for _, e := range entries {
		c := clone{name: e.Name(), fd: -1, dir: e.IsDir()}
		p := path.Join(dir, c.name)
		switch {
		case e.Type()&os.ModeSymlink != 0:
			if c.link, err = os.Readlink(p); err != nil {
				return err
			}
		case e.IsDir() || e.Type().IsRegular():
			if c.fd, err = cloneTree(p); err != nil {
				return fmt.Errorf("clone %s: %w", p, err)
			}
			if err := setAttr(c.fd, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, 0, true); err != nil {
				return fmt.Errorf("make %s read-only: %w", p, err)
			}
		default:
			continue // sockets and devices are not shown here
		}
		clones = append(clones, c)
	}
	tmp, err := newTmpfs("size=64k,mode=0755", false)
	if err != nil {
		return err
	}
	defer unix.Close(tmp)
	var at int
	if dir == "/" {
		if err := unix.MoveMount(tmp, "", unix.AT_FDCWD, newRootAt, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("attach: %w", err)
		}
		at, err = unix.Open(newRootAt, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	} else {
		rel := strings.TrimPrefix(dir, "/")
		if err := unix.MoveMount(tmp, "", b.root, rel, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("attach: %w", err)
		}
		how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
		at, err = unix.Openat2(b.root, rel, how)
	}
	if err != nil {
		return err
	}
	b.sealed = append(b.sealed, at) // closed when sealed
	for _, c := range clones {
		switch {
		case c.link != "":
			err = unix.Symlinkat(c.link, at, c.name)
		case c.dir:
			err = unix.Mkdirat(at, c.name, 0o755)
		default:
			var f int
			if f, err = unix.Openat(at, c.name, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644); err == nil {
				unix.Close(f)
			}
		}
		if err != nil {
			return fmt.Errorf("mountpoint %s: %w", path.Join(dir, c.name), err)
		}
		if c.fd >= 0 {
			if err := unix.MoveMount(c.fd, "", at, c.name, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
				return fmt.Errorf("attach %s: %w", path.Join(dir, c.name), err)
			}
		}
	}
	for _, n := range names {
		if err := unix.Mkdirat(at, n, 0o755); err != nil {
			return fmt.Errorf("mountpoint %s: %w", path.Join(dir, n), err)
		}
	}
	return nil
}

func cloneTree(p string) (int, error) {
	return unix.OpenTree(unix.AT_FDCWD, p, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
}

func setAttr(fd int, set, clr uint64, recursive bool) error {
	flags := unix.AT_EMPTY_PATH
	if recursive {
		flags |= unix.AT_RECURSIVE
	}
	return unix.MountSetattr(fd, "", uint(flags), &unix.MountAttr{Attr_set: set, Attr_clr: clr})
}

// newScratch returns a detached tmpfs holding what hide masks with: an empty
// file ("empty") and an empty directory ("dir", mode 0555). The mount is
// made read-only, nosuid, nodev and noexec once its entries exist, and a
// clone of a mount keeps its attributes: every mask cloned from it is
// read-only as made, and all of them share one small superblock instead of
// one tmpfs per hidden directory.
func newScratch() (int, error) {
	fd, err := newTmpfs("size=4k,mode=0755", false)
	if err != nil {
		return -1, err
	}
	f, err := unix.Openat(fd, "empty", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o444)
	if err == nil {
		unix.Close(f)
		err = unix.Mkdirat(fd, "dir", 0o555)
	}
	if err == nil {
		err = setAttr(fd, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC, 0, false)
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// newTmpfs returns a detached tmpfs mount.
func newTmpfs(opts string, readOnly bool) (int, error) {
	return newMount("tmpfs", opts, readOnly)
}

func newMount(fstype, opts string, readOnly bool) (int, error) {
	fsfd, err := unix.Fsopen(fstype, unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen %s: %w", fstype, err)
	}
	defer unix.Close(fsfd)
	for _, kv := range strings.Split(opts, ",") {
		if kv == "" {
			continue
		}
		k, v, hasValue := strings.Cut(kv, "=")
		if hasValue {
			err = unix.FsconfigSetString(fsfd, k, v)
		} else {
			err = unix.FsconfigSetFlag(fsfd, k)
		}
		if err != nil {
			return -1, fmt.Errorf("%s option %s: %w", fstype, kv, err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("create %s: %w", fstype, err)
	}
	attr := uint64(unix.MOUNT_ATTR_NOSUID)
	if fstype != "devpts" { // the pty nodes live there
		attr |= unix.MOUNT_ATTR_NODEV
	}
	if readOnly {
		attr |= unix.MOUNT_ATTR_RDONLY
	}
	if fstype == "proc" || fstype == "sysfs" {
		attr |= unix.MOUNT_ATTR_NOEXEC
	}
	return unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, int(attr))
}

// target opens p inside the new root, creating it (a directory, or an empty
// file when dir is false) when it is missing and its parent is writable, as in
// a tmpfs mounted earlier in the plan.
func (b *builder) target(p string, dir bool) (int, error) {
	rel := strings.TrimPrefix(path.Clean("/"+p), "/")
	if rel == "" {
		return unix.Dup(b.root)
	}
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(b.root, rel, how)
	if err == nil || !errors.Is(err, unix.ENOENT) {
		return fd, err
	}
	parent, err := b.target(path.Dir("/"+rel), true)
	if err != nil {
		return -1, err
	}
	defer unix.Close(parent)
	name := path.Base(rel)
	if dir {
		err = unix.Mkdirat(parent, name, 0o755)
	} else {
		var f int
		f, err = unix.Openat(parent, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err == nil {
			unix.Close(f)
		}
	}
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, fmt.Errorf("create mountpoint %s: %w", p, err)
	}
	return unix.Openat2(b.root, rel, how)
}

func (b *builder) attach(mnt int, p string, dir bool) error {
	t, err := b.target(p, dir)
	if err != nil {
		return err
	}
	defer unix.Close(t)
	return unix.MoveMount(mnt, "", t, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
}

// bind attaches src at m.Target; premade mounts come with their attributes
// set by the host.
func (b *builder) bind(src int, m proto.Mount, premade bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil {
		return err
	}
	if premade {
		return b.attach(src, m.Target, st.Mode&unix.S_IFMT == unix.S_IFDIR)
	}
	set, clr := uint64(unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV), uint64(0)
	if m.ReadOnly {
		set |= unix.MOUNT_ATTR_RDONLY
	} else {
		clr = unix.MOUNT_ATTR_RDONLY
	}
	if err := setAttr(src, set, clr, true); err != nil {
		if !m.ReadOnly && errors.Is(err, unix.EPERM) {
			return fmt.Errorf("%s is on a read-only mount and cannot be made writable", m.Source)
		}
		return err
	}
	return b.attach(src, m.Target, st.Mode&unix.S_IFMT == unix.S_IFDIR)
}

func (b *builder) tmpfs(m proto.Mount) error {
	opts := fmt.Sprintf("mode=%o", m.Mode)
	if m.Mode == 0 {
		opts = "mode=0755"
	}
	if m.SizeBytes > 0 {
		opts += fmt.Sprintf(",size=%d", m.SizeBytes)
	}
	fd, err := newTmpfs(opts, false)
	if err != nil {
		return err
	}
	if err := b.attach(fd, m.Target, true); err != nil {
		unix.Close(fd)
		return err
	}
	if m.ReadOnly {
		b.sealed = append(b.sealed, fd)
		return nil
	}
	return unix.Close(fd)
}

// overlay mounts overlayfs at target from three directories opened before
// the host's view changed: lower, upper, work. In a user namespace overlayfs
// keeps its own metadata in user.overlay.* xattrs (userxattr), and whiteouts
// are character devices 0:0 in the upper dir, which the host reads back.
func (b *builder) overlay(layers [3]int, target string) error {
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("fsopen overlay: %w (overlay workspaces need Linux 5.11+ with overlayfs)", err)
	}
	defer unix.Close(fsfd)
	opts := [][2]string{
		{"lowerdir", fmt.Sprintf("/proc/self/fd/%d", layers[0])},
		{"upperdir", fmt.Sprintf("/proc/self/fd/%d", layers[1])},
		{"workdir", fmt.Sprintf("/proc/self/fd/%d", layers[2])},
		{"userxattr", ""},
	}
	for _, o := range opts {
		if o[1] == "" {
			err = unix.FsconfigSetFlag(fsfd, o[0])
		} else {
			err = unix.FsconfigSetString(fsfd, o[0], o[1])
		}
		if err != nil {
			return fmt.Errorf("overlay option %s: %w", o[0], err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return fmt.Errorf("create overlay: %w (the state dir's filesystem must support user xattrs, and must not lie inside the workspace)", err)
	}
	mnt, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return err
	}
	defer unix.Close(mnt)
	return b.attach(mnt, target, true)
}

// Under /proc, what a container runtime masks (reads as empty) and what it
// makes read-only, so nothing inside can change a host-wide setting.
var (
	procMasked   = []string{"kcore", "keys", "key-users", "timer_list", "sched_debug", "latency_stats", "timer_stats", "kallsyms", "kmsg", "kpagecount", "kpageflags", "kpagecgroup", "vmallocinfo", "acpi", "scsi", "asound", "sysvipc"}
	procReadOnly = []string{"sys", "sysrq-trigger", "irq", "bus", "fs", "driver", "tty", "bootconfig", "config.gz"}
)

func (b *builder) proc(target string) error {
	fd, err := newMount("proc", "", false)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := b.attach(fd, target, true); err != nil {
		return err
	}
	// Nothing runs in the sandbox yet and a fresh proc's entries are the
	// kernel's: each goes on by its name from one descriptor of the mount's
	// root, in four calls where a path resolved from the sandbox's root took
	// six. The 26 entries cost ~3% of a run; this saves about a third of it.
	dir, err := b.target(target, true)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	for _, name := range procMasked {
		if err := b.maskEntry(dir, name); err != nil {
			return fmt.Errorf("mask %s: %w", filepath.Join(target, name), err)
		}
	}
	for _, name := range procReadOnly {
		if err := readOnlyEntry(dir, name); err != nil {
			return fmt.Errorf("make %s read-only: %w", filepath.Join(target, name), err)
		}
	}
	return nil
}

// maskEntry masks dir's entry name as hide does, if it exists; a symbolic
// link, which hide would follow, is refused: proc's own entries are none.
func (b *builder) maskEntry(dir int, name string) error {
	var st unix.Stat_t
	err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EACCES) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return errors.New("a symbolic link")
	}
	return b.mask(st.Mode, dir, name)
}

// readOnlyEntry re-mounts dir's entry name read-only in place (with
// nosuid, nodev and noexec) if it exists.
func readOnlyEntry(dir int, name string) error {
	c, err := unix.OpenTree(dir, name, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(c)
	if err := setAttr(c, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC, 0, true); err != nil {
		return err
	}
	return unix.MoveMount(c, "", dir, name, unix.MOVE_MOUNT_F_EMPTY_PATH)
}

// sysfs mounts a fresh, read-only sysfs at target.
func (b *builder) sysfs(target string) error {
	fd, err := newMount("sysfs", "", true)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return b.attach(fd, target, true)
}

// hide masks an existing path: a directory with an empty read-only
// directory, any other file with an empty read-only file (clones from the
// scratch mount, read-only, nosuid, nodev and noexec as it is). Missing
// paths are skipped.
func (b *builder) hide(p string) error {
	t, err := unix.Openat2(b.root, strings.TrimPrefix(path.Clean("/"+p), "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EACCES) {
		// EACCES: a sandbox holding no host id cannot reach it either.
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(t)
	var st unix.Stat_t
	if err := unix.Fstat(t, &st); err != nil {
		return err
	}
	return b.mask(st.Mode, t, "")
}

// mask mounts over dir's entry name (dir itself for "") a clone of the
// scratch mount's mask for a file of mode: its empty directory for a
// directory, its empty file for anything else.
func (b *builder) mask(mode uint32, dir int, name string) error {
	mask := "empty"
	if mode&unix.S_IFMT == unix.S_IFDIR {
		mask = "dir"
	}
	mnt, err := unix.OpenTree(b.scratch, mask, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(mnt)
	flags := unix.MOVE_MOUNT_F_EMPTY_PATH
	if name == "" {
		flags |= unix.MOVE_MOUNT_T_EMPTY_PATH
	}
	return unix.MoveMount(mnt, "", dir, name, flags)
}

var devNodeNames = []string{"null", "zero", "full", "random", "urandom", "tty"}

// dev builds a minimal /dev: the host's harmless character devices bound in,
// a private devpts instance, and a private /dev/shm.
func (b *builder) dev(target string, nodes map[string]int) error {
	fd, err := newTmpfs("mode=0755,size=64k", false)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := b.attach(fd, target, true); err != nil {
		return err
	}
	// The tmpfs was just made and nothing runs in the sandbox yet: its
	// entries are made and mounted on by name from one descriptor of it.
	dir, err := b.target(target, true)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	into := func(mnt int, name string, isDir bool) error {
		if isDir {
			err = unix.Mkdirat(dir, name, 0o755)
		} else {
			var f int
			if f, err = unix.Openat(dir, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644); err == nil {
				unix.Close(f)
			}
		}
		if err != nil {
			return fmt.Errorf("create mountpoint /dev/%s: %w", name, err)
		}
		return unix.MoveMount(mnt, "", dir, name, unix.MOVE_MOUNT_F_EMPTY_PATH)
	}
	for _, n := range devNodeNames {
		if err := into(nodes[n], n, false); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", n, err)
		}
	}
	pts, err := newMount("devpts", "newinstance,ptmxmode=0666,mode=0620", false)
	if err != nil {
		return err
	}
	defer unix.Close(pts)
	if err := into(pts, "pts", true); err != nil {
		return err
	}
	shm, err := newTmpfs("mode=1777,size=64m", false)
	if err != nil {
		return err
	}
	defer unix.Close(shm)
	if err := into(shm, "shm", true); err != nil {
		return err
	}
	for name, to := range map[string]string{"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2", "core": "/proc/kcore"} {
		// O_PATH descriptors cannot be *at targets for symlinkat; go through /proc.
		if err := unix.Symlinkat(to, dir, name); err != nil && !errors.Is(err, unix.EEXIST) {
			if err2 := os.Symlink(to, fmt.Sprintf("/proc/self/fd/%d/%s", dir, name)); err2 != nil {
				return fmt.Errorf("symlink /dev/%s: %w", name, err)
			}
		}
	}
	// The directory itself stays read-only; the nodes, pts and shm are their own mounts.
	c, err := unix.OpenTree(dir, "", unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return err
	}
	defer unix.Close(c)
	return setAttr(c, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOEXEC, 0, false)
}

// pivot makes the new root the guest's. pivot_root(".", ".") stacks the old
// root on the new one; detaching it leaves no path back to the host's tree.
// The detach unhooks the old tree at once but returns only after an RCU
// grace period: it runs on another thread, and the channel says when it
// has returned (and the guest's directory is the new /). Until then no
// path may be resolved: the old root still shows at / and at ".".
func (b *builder) pivot() (<-chan error, error) {
	if err := unix.Fchdir(b.root); err != nil {
		return nil, err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return nil, err
	}
	detached := make(chan error, 1)
	go func() {
		if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
			detached <- step("pivot_root", fmt.Errorf("detach old root: %w", err))
			return
		}
		detached <- step("pivot_root", unix.Chdir("/"))
	}()
	return detached, nil
}
