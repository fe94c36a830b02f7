package beneath

import "golang.org/x/sys/unix"

// Root is how a root to open beneath is opened: only to name it (no read
// permission needed).
const Root = unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC

func open(root int, rel string, flags int, r Rules) (int, error) {
	how := &unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS}
	if r&NoSymlinks != 0 {
		how.Resolve |= unix.RESOLVE_NO_SYMLINKS
	}
	if r&NoXDev != 0 {
		how.Resolve |= unix.RESOLVE_NO_XDEV
	}
	for {
		fd, err := unix.Openat2(root, rel, how)
		if err != unix.EINTR && err != unix.EAGAIN {
			return fd, err
		}
	}
}
