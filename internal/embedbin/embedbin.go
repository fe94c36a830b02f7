// Package embedbin runs an executable embedded in the airlock binary (the
// native backend's lean guest, internal/guestbin) from a file cached once
// per build under a directory of the caller's that no sandbox sees. Its generator,
// ./gen, builds one and names the sources it was built from.
package embedbin

import (
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

// Bin is one embedded executable: File in FS, with its identity (gen's
// Identity) in File+".id". A build without them (go build before go
// generate) holds neither, and Missing says so.
type Bin struct {
	FS   fs.FS
	File string
	// Generate is the command that builds it, for the messages that ask for it.
	Generate string

	once sync.Once
	id   string
	size int64
}

func (b *Bin) built() (id string, size int64) {
	b.once.Do(func() {
		raw, err := fs.ReadFile(b.FS, b.File+".id")
		if err != nil {
			return
		}
		fi, err := fs.Stat(b.FS, b.File)
		if err != nil {
			return
		}
		b.id, b.size = strings.TrimSpace(string(raw)), fi.Size()
	})
	return b.id, b.size
}

// ID is the identity of the sources the embedded executable was built
// from, a sha256 and the target ("linux/amd64"), or "" when none is built in.
func (b *Bin) ID() string {
	id, _ := b.built()
	return id
}

// Missing says why this binary cannot run the embedded executable, or ""
// when it can.
func (b *Bin) Missing() string {
	id, _ := b.built()
	if id == "" {
		return "not built in (" + b.Generate + " before go build)"
	}
	if _, target, _ := strings.Cut(id, " "); target != runtime.GOOS+"/"+runtime.GOARCH {
		return "built for " + target + ", not " + runtime.GOOS + "/" + runtime.GOARCH
	}
	return ""
}

// CachePath is where Open keeps this build's executable under dir: a
// directory of its own, named by its identity, holding a file named as File
// (what ps shows for a process it runs).
func (b *Bin) CachePath(dir string) string {
	sum, _, _ := strings.Cut(b.ID(), " ")
	if len(sum) > 32 {
		sum = sum[:32]
	}
	return filepath.Join(dir, sum, filepath.Base(b.File))
}

// Open returns a read-only, close-on-exec descriptor of the executable
// cached under dir, written there first if needed. The file is checked on
// the descriptor returned: a regular file of this process's owner, writable
// by nobody, of the embedded size. A file by its name that fails the check
// is replaced; one that passes is trusted without reading it, so dir must
// be writable by this user only, and seen by no sandbox.
func (b *Bin) Open(dir string) (int, error) {
	if m := b.Missing(); m != "" {
		return -1, fmt.Errorf("%s is %s", b.File, m)
	}
	_, size := b.built()
	name := b.CachePath(dir)
	for wrote := false; ; wrote = true {
		fd, err := unix.Open(name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		switch {
		case err == nil:
			if trusted(fd, size) {
				return fd, nil
			}
			unix.Close(fd)
			if wrote {
				return -1, fmt.Errorf("%s, just written, is not the executable this binary holds", name)
			}
		case (errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP)) && !wrote: // ELOOP: a symlink
		default:
			return -1, fmt.Errorf("open %s: %w", name, err)
		}
		if err := b.write(dir, name); err != nil {
			return -1, err
		}
	}
}

// trusted reports whether fd is an executable as write leaves it.
func trusted(fd int, size int64) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&0o7222 == 0 &&
		st.Uid == uint32(os.Geteuid()) && st.Size == size
}

// write puts the embedded executable at name atomically, mode 0555, and
// removes the directories of other builds' that have not been written for
// a day.
func (b *Bin) write(dir, name string) error {
	own := filepath.Dir(name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.Mkdir(own, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	// A writer killed half-way (Ctrl-C on a first start) left its file.
	stale, _ := filepath.Glob(filepath.Join(own, ".new-*"))
	for _, p := range stale {
		if fi, err := os.Lstat(p); err == nil && time.Since(fi.ModTime()) > 10*time.Minute {
			os.Remove(p)
		}
	}
	tmp, err := os.CreateTemp(own, ".new-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	src, err := b.FS.Open(b.File)
	if err == nil {
		_, err = io.Copy(tmp, src)
		src.Close()
	}
	if err == nil {
		err = tmp.Chmod(0o555)
	}
	if err == nil {
		err = tmp.Sync() // a crash must not leave a file of the right size but wrong bytes
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), name)
	}
	if err != nil {
		return fmt.Errorf("cache %s in %s: %w", b.File, dir, err)
	}
	old, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, p := range old {
		if fi, err := os.Lstat(p); err == nil && p != own && time.Since(fi.ModTime()) > 24*time.Hour {
			os.RemoveAll(p) // a process running its file keeps it until it ends
		}
	}
	return nil
}
