//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package audit

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive flock on f, waiting for it, and returns its release.
// Without flock (an odd file system) rotation goes on unserialized.
func lockFile(f *os.File) func() {
	fd := int(f.Fd())
	if syscall.Flock(fd, syscall.LOCK_EX) != nil {
		return func() {}
	}
	return func() { syscall.Flock(fd, syscall.LOCK_UN) }
}
