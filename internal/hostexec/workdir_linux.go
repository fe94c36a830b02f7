package hostexec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// workdirBeneath opens p beneath the workspace with openat2 (RESOLVE_BENEATH,
// no magic links) and returns the directory that fd names.
func (h *handler) workdirBeneath(rel, p string) (string, error) {
	root, err := unix.Open(h.root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("the workspace: %w", err)
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, p, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case errors.Is(err, unix.ENOSYS):
		return h.workdirByPath(rel, p) // a kernel before 5.6
	case errors.Is(err, unix.EXDEV), errors.Is(err, unix.ELOOP):
		return "", fmt.Errorf("dir %q leads out of the workspace", rel)
	case errors.Is(err, unix.ENOTDIR):
		return "", fmt.Errorf("dir %q is not a directory", rel)
	case err != nil:
		return "", fmt.Errorf("dir %q: %w", rel, err)
	}
	defer unix.Close(fd)
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", fmt.Errorf("dir %q: %w", rel, err)
	}
	if r, err := filepath.Rel(h.root, real); err != nil || !filepath.IsLocal(r) && r != "." {
		return "", fmt.Errorf("dir %q leads out of the workspace", rel)
	}
	return real, nil
}
