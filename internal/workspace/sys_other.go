//go:build !linux

package workspace

import (
	"golang.org/x/sys/unix"
)

// oPath stands for Linux's O_PATH where there is none: read-only, and
// non-blocking so that naming a FIFO does not wait for a writer.
const oPath = unix.O_RDONLY | unix.O_NONBLOCK

// chmodFD sets the mode of what fd names (a real descriptor here).
func chmodFD(fd int, mode uint32) error { return unix.Fchmod(fd, mode) }
