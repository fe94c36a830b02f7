// Package guestbin holds the native backend's lean guest: the sandbox's PID
// 1 built from internal/guest's packages alone (./lean), so that it starts
// without the package inits of the rest of airlock, and embedded here so
// that users still get one binary. It runs from a file cached once under a
// directory of the caller's that no sandbox sees. A build without `go
// generate ./internal/guestbin` holds none (Missing says so): the guest is
// then the airlock binary re-executed.
package guestbin

//go:generate go run ./gen

import (
	"embed"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/embedbin"
)

// bin holds the generated guest and guest.id, or only the committed README.
//
//go:embed all:bin
var bin embed.FS

var guest = &embedbin.Bin{FS: bin, File: "bin/guest", Generate: "go generate ./internal/guestbin"}

// ID is the identity of the sources the built-in guest was made from, a
// sha256 and the target ("linux/amd64"; see embedbin/gen's Identity), or ""
// when none is built in.
func ID() string { return guest.ID() }

// Missing says why this binary cannot run a lean guest, or "" when it can.
func Missing() string { return guest.Missing() }

// MinFD is the lowest descriptor Open returns. A child's start (Go's fork)
// writes descriptors 0..n-1 for its n files and moves some up to 2n+1
// before its execve: the path /proc/self/fd/N must still name the guest
// there, so n must stay below MinFD/2 - 1.
const MinFD = 64

// Open returns the lean guest, cached under dir (see embedbin.Bin.Open),
// opened for a child to execute as Path(f): close-on-exec, at a descriptor
// of at least MinFD.
func Open(dir string) (*os.File, error) {
	fd, err := guest.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("guestbin: %w", err)
	}
	high, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, MinFD)
	unix.Close(fd)
	if err != nil {
		return nil, fmt.Errorf("guestbin: %w", err)
	}
	return os.NewFile(uintptr(high), "airlock-guest"), nil
}

// Path is the name under which a child of this process executes f, a file
// Open returned (its /proc/self/fd link: no directory on the way is
// searched, so the child needs no access to dir, only to execute f).
func Path(f *os.File) string { return fmt.Sprintf("/proc/self/fd/%d", f.Fd()) }

// CachePath is where Open keeps this binary's guest under dir.
func CachePath(dir string) string { return guest.CachePath(dir) }
