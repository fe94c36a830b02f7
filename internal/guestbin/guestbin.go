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
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// bin holds the generated guest and guest.id, or only the committed README.
//
//go:embed all:bin
var bin embed.FS

const (
	guestFile = "bin/guest"
	idFile    = "bin/guest.id"
)

// built is what is embedded, read once.
var built = sync.OnceValues(func() (id string, size int64) {
	b, err := bin.ReadFile(idFile)
	if err != nil {
		return "", 0
	}
	fi, err := fs.Stat(bin, guestFile)
	if err != nil {
		return "", 0
	}
	return strings.TrimSpace(string(b)), fi.Size()
})

// ID is the identity of the sources the built-in guest was made from, a
// sha256 and the target ("linux/amd64"; see gen's Identity), or "" when
// none is built in.
func ID() string {
	id, _ := built()
	return id
}

// Missing says why this binary cannot run a lean guest, or "" when it can.
func Missing() string {
	id, _ := built()
	if id == "" {
		return "not built in (go generate ./internal/guestbin before go build)"
	}
	if _, target, _ := strings.Cut(id, " "); target != runtime.GOOS+"/"+runtime.GOARCH {
		return "built for " + target + ", not " + runtime.GOOS + "/" + runtime.GOARCH
	}
	return ""
}

// MinFD is the lowest descriptor Open returns. A child's start (Go's fork)
// writes descriptors 0..n-1 for its n files and moves some up to 2n+1
// before its execve: the path /proc/self/fd/N must still name the guest
// there, so n must stay below MinFD/2 - 1.
const MinFD = 64

// Open returns the lean guest, cached under dir (written there first if
// needed), opened for a child to execute as Path(f): close-on-exec, at a
// descriptor of at least MinFD. The file is checked on the descriptor
// returned, which is what runs: a regular file of this process's owner,
// writable by nobody, of the embedded guest's size. A file by its name that
// fails the check is replaced; one that passes is trusted without reading
// it, so dir must be writable by this user only, and seen by no sandbox.
func Open(dir string) (*os.File, error) {
	if m := Missing(); m != "" {
		return nil, fmt.Errorf("guestbin: the lean guest is %s", m)
	}
	fd, err := openCached(dir)
	if err != nil {
		return nil, err
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
func CachePath(dir string) string {
	sum, _, _ := strings.Cut(ID(), " ")
	if len(sum) > 32 {
		sum = sum[:32]
	}
	return filepath.Join(dir, "guest-"+sum)
}

func openCached(dir string) (int, error) {
	_, size := built()
	name := CachePath(dir)
	for wrote := false; ; wrote = true {
		fd, err := unix.Open(name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		switch {
		case err == nil:
			if trusted(fd, size) {
				return fd, nil
			}
			unix.Close(fd)
			if wrote {
				return -1, fmt.Errorf("guestbin: %s, just written, is not the guest this binary holds", name)
			}
		case (errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP)) && !wrote: // ELOOP: a symlink
		default:
			return -1, fmt.Errorf("guestbin: open %s: %w", name, err)
		}
		if err := write(dir, name, size); err != nil {
			return -1, err
		}
	}
}

// trusted reports whether fd is a guest as write leaves it.
func trusted(fd int, size int64) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&0o7222 == 0 &&
		st.Uid == uint32(os.Geteuid()) && st.Size == size
}

// write puts the embedded guest at name atomically, mode 0555, and removes
// the guests of other builds that have not been written for a day.
func write(dir, name string, size int64) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("guestbin: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".guest-*")
	if err != nil {
		return fmt.Errorf("guestbin: %w", err)
	}
	defer os.Remove(tmp.Name())
	src, err := bin.Open(guestFile)
	if err == nil {
		_, err = io.Copy(tmp, src)
		src.Close()
	}
	if err == nil {
		err = tmp.Chmod(0o555)
	}
	if err == nil {
		err = tmp.Sync() // a crash must not leave a guest of the right size but wrong bytes
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), name)
	}
	if err != nil {
		return fmt.Errorf("guestbin: cache the guest in %s: %w", dir, err)
	}
	old, _ := filepath.Glob(filepath.Join(dir, "guest-*"))
	for _, p := range old {
		if fi, err := os.Lstat(p); err == nil && p != name && time.Since(fi.ModTime()) > 24*time.Hour {
			os.Remove(p) // a sandbox running it keeps it until it ends
		}
	}
	return nil
}
