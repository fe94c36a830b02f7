package native

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/proto"
	"github.com/airlock-dev/airlock/internal/subid"
)

// Root's sandboxes hold no host identity. Their user namespace maps ids
// 0..65535 inside to a slot of airlock's reserved range (subid), so host
// root's files are "other" to everything inside, whatever their mode. What
// the sandbox is given of the host — the workspace, --home, --rw and --ro
// paths, airlock's own files — the supervisor clones (open_tree) and
// idmaps (mount_setattr MOUNT_ATTR_IDMAP) before handing the detached
// mounts to the guest: each shows its owner as uid/gid 0 inside and other
// ids shifted into the slot, so whatever the sandbox writes there belongs
// on the host to that owner, never to the range.

// ErrNoIDMap says a path the sandbox must write lies on a filesystem that
// refuses idmapped mounts.
var ErrNoIDMap = errors.New("does not support idmapped mounts")

// OptOut is the run flag that keeps host root's identity instead.
const OptOut = "--no-idmap"

// idmapper makes one sandbox's idmapped mounts. Mappings for owners other
// than root need a user namespace of their own: a child stopped at its
// exec (ptrace) holds one while it is opened, then is killed.
type idmapper struct {
	lease *subid.Lease
	exe   string
	guest int               // the guest's pid: its user namespace maps root's files
	ns    map[[2]uint32]int // user namespace descriptors by owner
}

func (m *idmapper) close() {
	for _, fd := range m.ns {
		unix.Close(fd)
	}
	m.ns = nil
}

// userns returns a user namespace in which the owner uid:gid is 0 and the
// slot's other ids keep their numbers (so a mount idmapped with it shows
// the owner's files as root's and other users' as themselves).
func (m *idmapper) userns(uid, gid uint32) (int, error) {
	key := [2]uint32{uid, gid}
	if fd, ok := m.ns[key]; ok {
		return fd, nil
	}
	var fd int
	var err error
	if uid == 0 && gid == 0 {
		// The guest's own namespace maps exactly this.
		fd, err = unix.Open("/proc/"+strconv.Itoa(m.guest)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	} else {
		fd, err = subid.Userns(m.exe, ownerMap(uid, m.lease.UID), ownerMap(gid, m.lease.GID))
	}
	if err != nil {
		return -1, fmt.Errorf("user namespace for owner %d:%d: %w", uid, gid, err)
	}
	if m.ns == nil {
		m.ns = map[[2]uint32]int{}
	}
	m.ns[key] = fd
	return fd, nil
}

// ownerMap maps owner to base (0 inside) and every other id below
// subid.SlotSize but 0 to itself within the slot; host id 0, when it is not
// the owner, stays unmapped (shown as nobody, never writable).
func ownerMap(owner, base uint32) []syscall.SysProcIDMap {
	if owner == 0 {
		return []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: subid.SlotSize}}
	}
	out := []syscall.SysProcIDMap{{ContainerID: int(owner), HostID: int(base), Size: 1}}
	hi := uint32(subid.SlotSize)
	if owner < hi {
		if owner > 1 {
			out = append(out, syscall.SysProcIDMap{ContainerID: 1, HostID: int(base) + 1, Size: int(owner) - 1})
		}
		if owner+1 < hi {
			out = append(out, syscall.SysProcIDMap{ContainerID: int(owner) + 1, HostID: int(base + owner + 1), Size: int(hi - owner - 1)})
		}
	} else {
		out = append(out, syscall.SysProcIDMap{ContainerID: 1, HostID: int(base) + 1, Size: int(hi) - 1})
	}
	return out
}

// prepare clones and idmaps the sources of in's bind and overlay mounts,
// sets each Mount.FD, and returns the descriptors in that order. Writable
// mounts must be idmapped; a read-only one on a filesystem without idmap
// support is shown as is (its files are then "other" to the sandbox).
func (m *idmapper) prepare(in *proto.Init) (fds []int, warnings []string, err error) {
	defer func() {
		if err != nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
			fds = nil
		}
	}()
	for i := range in.Mounts {
		mt := &in.Mounts[i]
		switch mt.Kind {
		case proto.MountBind:
			if mt.Optional {
				continue // /sys/fs/cgroup: the guest binds it as it is
			}
			fd, err := m.clone(mt.Source, mt.ReadOnly)
			if err != nil {
				if !mt.ReadOnly || errors.Is(err, os.ErrNotExist) {
					return fds, nil, err
				}
				if fd, err = plainClone(mt.Source); err != nil {
					return fds, nil, err
				}
				warnings = append(warnings, fmt.Sprintf("%s is shown without its owners (%v): only what others may read is readable", mt.Source, err))
			}
			fds = append(fds, fd)
			mt.FD = len(fds)
		case proto.MountOverlay:
			// overlayfs wants upper and work dirs on one mount: their
			// parent is cloned, once.
			dir := filepath.Dir(mt.Upper)
			if filepath.Dir(mt.Work) != dir {
				return fds, nil, fmt.Errorf("overlay upper %s and work %s must share a directory", mt.Upper, mt.Work)
			}
			for j, p := range []string{mt.Source, dir} {
				fd, err := m.clone(p, j == 0)
				if err != nil {
					return fds, nil, err
				}
				fds = append(fds, fd)
				if j == 0 {
					mt.FD = len(fds)
				}
			}
		}
	}
	return fds, warnings, nil
}

// clone returns a detached, private, nosuid, nodev copy of the tree at p
// idmapped for p's owner.
func (m *idmapper) clone(p string, readOnly bool) (int, error) {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return -1, fmt.Errorf("%s: %w", p, err)
	}
	ns, err := m.userns(st.Uid, st.Gid)
	if err != nil {
		return -1, err
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, p, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return -1, fmt.Errorf("clone %s: %w", p, err)
	}
	set := uint64(unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
	if readOnly {
		set |= unix.MOUNT_ATTR_RDONLY
	}
	attr := &unix.MountAttr{Attr_set: set, Userns_fd: uint64(ns), Propagation: unix.MS_PRIVATE}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.ENOSYS) {
			return -1, fmt.Errorf("this kernel %w (Linux 5.12+ has them)", ErrNoIDMap)
		}
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EOPNOTSUPP) {
			return -1, fmt.Errorf("%s is on a filesystem (%s) that %w (or holds a mount that does not)", p, subid.FSType(p), ErrNoIDMap)
		}
		return -1, fmt.Errorf("idmap %s: %w", p, err)
	}
	return fd, nil
}

// plainClone is a detached read-only copy of p without an idmapping.
func plainClone(p string) (int, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, p, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return -1, fmt.Errorf("clone %s: %w", p, err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Propagation: unix.MS_PRIVATE}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("clone %s: %w", p, err)
	}
	return fd, nil
}

// blindParents returns, for a sandbox that holds no host id, the topmost
// directories of the read-only host root above a mount target that the
// sandbox may not search (no execute bit for others): each is covered by an
// empty read-only tmpfs in which the guest makes the mountpoints, since the
// sandbox could not reach them otherwise, and could not read what else is
// there anyway.
func blindParents(mounts []proto.Mount) []string {
	var out []string
	for _, mt := range mounts {
		t := filepath.Clean(mt.Target)
		if t == "/" {
			continue
		}
		parts := strings.Split(strings.TrimPrefix(filepath.Dir(t), "/"), "/")
		d := ""
		for _, part := range parts {
			if part == "" {
				break
			}
			d += "/" + part
			if withinAny(d, mounts) {
				break // the plan makes it, or shows it with its owner as root
			}
			st, err := os.Stat(d)
			if err != nil || !st.IsDir() {
				break
			}
			if st.Mode().Perm()&0o001 == 0 {
				if !slices.Contains(out, d) {
					out = append(out, d)
				}
				break
			}
		}
	}
	return out
}

// withinAny reports whether d is a mount's target or below one: the plan
// makes it (a tmpfs) or shows it with its owner as root (a bind).
func withinAny(d string, mounts []proto.Mount) bool {
	for _, mt := range mounts {
		t := filepath.Clean(mt.Target)
		if t != "/" && (d == t || strings.HasPrefix(d, t+"/")) {
			return true
		}
	}
	return false
}
