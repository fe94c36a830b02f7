package guest

import (
	"os"

	"golang.org/x/sys/unix"
)

// A TTY's master stays in the guest when the control channel cannot carry
// descriptors (a VM's virtio-serial port): feed and forward relay it over
// Stdin and Output messages. These keep it usable from two goroutines.

// pollable returns f's descriptor as a non-blocking file, so that closing
// it ends a Read or Write in progress (the pty package hands out blocking
// ones); f is closed. On failure f comes back as it was.
func pollable(f *os.File) *os.File {
	rc, err := f.SyscallConn()
	if err != nil {
		return f
	}
	fd := -1
	rc.Control(func(raw uintptr) { fd, err = unix.FcntlInt(raw, unix.F_DUPFD_CLOEXEC, 0) })
	if err != nil || fd < 0 {
		return f
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return f
	}
	f.Close()
	return os.NewFile(uintptr(fd), f.Name())
}

// setSize sets a pty's window size without f.Fd(), which would put a
// pollable file back into blocking mode.
func setSize(f *os.File, rows, cols uint16) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	if cerr := rc.Control(func(fd uintptr) {
		err = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}); cerr != nil {
		return cerr
	}
	return err
}
