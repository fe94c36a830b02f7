package agents

import (
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/beneath"
)

// openBeneath opens rel beneath home (internal/beneath's Strict rules: no
// symlink on the way, nothing outside home, no mount crossed), O_NONBLOCK
// so a FIFO cannot block the open.
func openBeneath(home, rel string, dir bool) (*os.File, error) {
	root, err := unix.Open(home, beneath.Root|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: home, Err: err}
	}
	defer unix.Close(root)
	flags := unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY
	if dir {
		flags |= unix.O_DIRECTORY
	}
	fd, err := beneath.Open(root, rel, flags, beneath.Strict)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: filepath.Join(home, rel), Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(home, rel)), nil
}
