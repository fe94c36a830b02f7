package workspace

import (
	"strings"

	"golang.org/x/sys/unix"
)

// walkBeneath opens rel under the directory root as openat2 with
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_XDEV would, where there
// is no openat2 (sys_other.go): one component at a time, each opened with
// O_NOFOLLOW, none of them "..", none on another device than root. It
// asks more than O_PATH would (read permission on each directory on the
// way), so it refuses more, never less.
func walkBeneath(root int, rel string, flags int) (int, error) {
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
