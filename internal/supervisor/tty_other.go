//go:build !linux

package supervisor

import "golang.org/x/sys/unix"

const (
	ioctlGetTermios = unix.TIOCGETA
	ioctlSetTermios = unix.TIOCSETA
)

// flushInput drops what was typed and not yet read.
func flushInput(fd int) { unix.IoctlSetPointerInt(fd, unix.TIOCFLUSH, 1) } // FREAD

// streamPair is a close-on-exec, non-blocking unix stream socket pair.
func streamPair() ([2]int, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		return fds, err
	}
	for _, fd := range fds {
		unix.CloseOnExec(fd)
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(fds[0])
			unix.Close(fds[1])
			return fds, err
		}
	}
	return fds, nil
}
