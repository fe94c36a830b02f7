//go:build !linux

package beneath

import "golang.org/x/sys/unix"

// Root is how a root to open beneath is opened (there is no O_PATH here).
const Root = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC

func open(root int, rel string, flags int, r Rules) (int, error) {
	if r&NoSymlinks == 0 {
		return -1, unix.ENOSYS // symlinks resolved beneath: no openat2 here
	}
	return Walk(root, rel, flags)
}
