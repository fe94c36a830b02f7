package hostexec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/beneath"
)

// workdirBeneath opens p beneath the workspace (internal/beneath: symlinks
// followed only while they stay beneath, no magic links) and returns the
// directory that fd names.
func (h *handler) workdirBeneath(rel, p string) (string, error) {
	root, err := unix.Open(h.root, beneath.Root, 0)
	if err != nil {
		return "", fmt.Errorf("the workspace: %w", err)
	}
	defer unix.Close(root)
	fd, err := beneath.Open(root, p, unix.O_PATH|unix.O_DIRECTORY, 0)
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
