package agents

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// openBeneath opens rel beneath home with openat2: no symlink on the way
// is followed (RESOLVE_NO_SYMLINKS), nothing outside home is reached
// (RESOLVE_BENEATH), and O_NONBLOCK keeps a FIFO from blocking the open.
func openBeneath(home, rel string, dir bool) (*os.File, error) {
	root, err := unix.Open(home, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: home, Err: err}
	}
	defer unix.Close(root)
	flags := unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOFOLLOW | unix.O_NOCTTY | unix.O_CLOEXEC
	if dir {
		flags |= unix.O_DIRECTORY
	}
	how := &unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV}
	for {
		fd, err := unix.Openat2(root, rel, how)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: filepath.Join(home, rel), Err: err}
		}
		return os.NewFile(uintptr(fd), filepath.Join(home, rel)), nil
	}
}
