// Package beneath opens a path beneath a directory without leaving it, the
// one way airlock opens what a sandbox could have placed (a workspace's
// tree, an agent's home, a host command's directory): openat2's
// RESOLVE_BENEATH on Linux, a walk one component at a time elsewhere.
package beneath

import (
	"strings"

	"golang.org/x/sys/unix"
)

// Rules say what the path may not do besides leave the root (always
// refused, as are /proc's magic links).
type Rules int

const (
	NoSymlinks Rules = 1 << iota // follow no symlink in any component
	NoXDev                       // cross no mount
	// Strict is both: what a tree someone else writes is opened with.
	Strict = NoSymlinks | NoXDev
)

// Open opens rel beneath the directory root with flags (O_CLOEXEC always,
// O_NOFOLLOW too under NoSymlinks), retrying EINTR and EAGAIN. On Linux it
// is openat2 (ENOSYS before 5.6); elsewhere, under NoSymlinks, Walk, and
// ENOSYS when symlinks inside may be followed: the caller then resolves the
// path itself and checks where it lands.
func Open(root int, rel string, flags int, r Rules) (int, error) {
	if rel == "" {
		rel = "."
	}
	flags |= unix.O_CLOEXEC
	if r&NoSymlinks != 0 {
		flags |= unix.O_NOFOLLOW
	}
	return open(root, rel, flags, r)
}

// Walk opens rel under the directory root as openat2 with the Strict
// rules would, without openat2: one component at a time, each opened with
// O_NOFOLLOW, none of them "..", none on another device than root. It asks
// more than O_PATH would (read permission on each directory on the way),
// so it refuses more, never less.
func Walk(root int, rel string, flags int) (int, error) {
	var st unix.Stat_t
	if err := unix.Fstat(root, &st); err != nil {
		return -1, err
	}
	dev := st.Dev
	if strings.HasPrefix(rel, "/") {
		return -1, unix.EXDEV
	}
	var parts []string
	for _, p := range strings.Split(rel, "/") {
		switch p {
		case "", ".":
		case "..":
			return -1, unix.EXDEV
		default:
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		parts = []string{"."}
	}
	dir := root
	for i, p := range parts {
		f := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
		if i == len(parts)-1 {
			f = flags | unix.O_NOFOLLOW | unix.O_CLOEXEC
		}
		fd, err := openatRetry(dir, p, f)
		if dir != root {
			unix.Close(dir)
		}
		if err != nil {
			return -1, err
		}
		if err := unix.Fstat(fd, &st); err != nil || st.Dev != dev {
			unix.Close(fd)
			if err == nil {
				err = unix.EXDEV
			}
			return -1, err
		}
		dir = fd
	}
	return dir, nil
}

func openatRetry(dir int, name string, flags int) (int, error) {
	for {
		fd, err := unix.Openat(dir, name, flags, 0)
		if err != unix.EINTR && err != unix.EAGAIN {
			return fd, err
		}
	}
}
