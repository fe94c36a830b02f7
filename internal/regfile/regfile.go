// Package regfile reads a file that must be a regular file: opened without
// blocking (a FIFO put in its place waits for no writer), checked with
// fstat, and size-bounded. It imports nothing of ours, so every package
// that reads a file someone else may have placed can use it.
package regfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// ErrNotRegular is wrapped by Read's error for anything but a regular file
// (a symbolic link too, when links are not followed).
var ErrNotRegular = errors.New("not a regular file")

// TooLargeError is Read's error for a file over its bound.
type TooLargeError struct {
	Path string
	Max  int64
}

func (e *TooLargeError) Error() string { return fmt.Sprintf("%s: larger than %d bytes", e.Path, e.Max) }

// Read returns the contents of path, at most max bytes. With follow false a
// symbolic link at path is refused (O_NOFOLLOW); with follow true it is
// followed, but what it names must be a regular file.
func Read(path string, max int64, follow bool) ([]byte, error) {
	flags := syscall.O_RDONLY | syscall.O_NONBLOCK | syscall.O_CLOEXEC | syscall.O_NOCTTY
	if !follow {
		flags |= syscall.O_NOFOLLOW
	}
	fd, err := syscall.Open(path, flags, 0)
	if err == syscall.ELOOP && !follow {
		return nil, fmt.Errorf("%s: a symbolic link: %w", path, ErrNotRegular)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %s: %w", path, kind(st.Mode()), ErrNotRegular)
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, &TooLargeError{Path: path, Max: max}
	}
	return data, nil
}

// kind names a file type that is not a regular file.
func kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return "not a regular file"
}
