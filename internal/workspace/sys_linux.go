package workspace

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// oPath opens a path only to name it (no read permission needed, a FIFO
// does not block).
const oPath = unix.O_PATH

// openNoSymlinks opens the directory at absolute path p, refusing a
// symlink in any component.
func openNoSymlinks(p string) (int, error) {
	return unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
}

// chmodFD sets the mode of what fd (an oPath descriptor) names.
func chmodFD(fd int, mode uint32) error {
	// fchmod refuses O_PATH descriptors; its /proc link names this very inode.
	return unix.Fchmodat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), mode, 0)
}

// renameNoReplace renames, failing with EEXIST where the target exists.
func renameNoReplace(fromfd int, from string, tofd int, to string) error {
	return unix.Renameat2(fromfd, from, tofd, to, unix.RENAME_NOREPLACE)
}
