package workspace

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// CopyIn copies the entries of m from the host directory src into dst (which
// must exist and be empty), keeping modes and modification times, and
// returns the copy's own manifest (new inodes, same hashes) so that a later
// scan of the copy rehashes only what the sandbox touched. It refuses
// devices, fifos and sockets, and files it cannot read, by name.
func CopyIn(src, dst string, m Manifest, progress func(done, total, bytes int64)) (Manifest, error) {
	sfd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", src, err)
	}
	defer unix.Close(sfd)
	dfd, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dst, err)
	}
	defer unix.Close(dfd)
	entries := m.Sorted()
	for _, e := range entries {
		switch {
		case e.Type == TypeOther:
			return nil, fmt.Errorf("%s is a %s: a copy holds only files, directories and links (--exclude it)", Quote(e.Path), e.Other)
		case e.Unreadable != "":
			return nil, fmt.Errorf("cannot read %s (%s): fix its permissions or --exclude it", Quote(e.Path), e.Unreadable)
		}
	}
	// Directories first, in order, writable for now; modes are set last.
	for _, e := range entries {
		if e.Type != TypeDir {
			continue
		}
		if err := mkdirBeneath(dfd, e.Path, 0o700); err != nil {
			return nil, fmt.Errorf("copy %s: %w", Quote(e.Path), err)
		}
	}
	var total int64
	for _, e := range entries {
		if e.Type != TypeDir {
			total++
		}
	}
	var done, bytes atomic.Int64
	if progress != nil {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := newTicker()
			defer t.Stop()
			for {
				select {
				case <-stop:
					progress(done.Load(), total, bytes.Load())
					return
				case <-t.C:
					progress(done.Load(), total, bytes.Load())
				}
			}
		}()
		defer func() { close(stop); wg.Wait() }()
	}
	jobs := make(chan Entry)
	var (
		mu      sync.Mutex
		firstEr error
		wg      sync.WaitGroup
	)
	for range max(2, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range jobs {
				err := copyOne(sfd, dfd, e)
				if err != nil {
					mu.Lock()
					if firstEr == nil {
						firstEr = err
					}
					mu.Unlock()
				}
				done.Add(1)
				bytes.Add(e.Size)
			}
		}()
	}
	for _, e := range entries {
		if e.Type != TypeDir {
			jobs <- e
		}
	}
	close(jobs)
	wg.Wait()
	if firstEr != nil {
		return nil, firstEr
	}
	// Directory modes and times, deepest first (setting times in a parent
	// after its children were made).
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		if e.Type != TypeDir {
			continue
		}
		if err := setMeta(dfd, e, true); err != nil {
			return nil, fmt.Errorf("copy %s: %w", Quote(e.Path), err)
		}
	}
	// The copy's manifest: the same hashes, the copy's identities.
	out := make(Manifest, len(m))
	now := time.Now().UnixNano()
	for _, e := range entries {
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, e.Path, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return nil, fmt.Errorf("copy %s: %w", Quote(e.Path), err)
		}
		c := entryOf(e.Path, &st)
		c.SHA256, c.Link, c.Stamp = e.SHA256, e.Link, now
		out[e.Path] = c
	}
	return out, nil
}

// mkdirBeneath makes directory rel under root unless it exists, its
// parent reached without following a link.
func mkdirBeneath(root int, rel string, mode uint32) error {
	pfd, err := openBeneath(root, parent(rel), oPath|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := unix.Mkdirat(pfd, baseName(rel), mode); err != nil && !errors.Is(err, unix.EEXIST) {
		return describeWrite(err)
	}
	return nil
}

func baseName(rel string) string {
	for i := len(rel) - 1; i >= 0; i-- {
		if rel[i] == '/' {
			return rel[i+1:]
		}
	}
	return rel
}

func copyOne(sroot, droot int, e Entry) error {
	dpfd, err := openBeneath(droot, parent(e.Path), oPath|unix.O_DIRECTORY)
	if err != nil {
		return fmt.Errorf("copy %s: %w", Quote(e.Path), err)
	}
	defer unix.Close(dpfd)
	name := baseName(e.Path)
	if e.Type == TypeSymlink {
		if err := unix.Symlinkat(e.Link, dpfd, name); err != nil {
			return fmt.Errorf("copy %s: %w", Quote(e.Path), describeWrite(err))
		}
		return setMeta(droot, e, false)
	}
	sfd, err := openBeneath(sroot, e.Path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return fmt.Errorf("copy %s: %w (fix its permissions or --exclude it)", Quote(e.Path), err)
	}
	src := os.NewFile(uintptr(sfd), e.Path)
	defer src.Close()
	dfd, err := unix.Openat(dpfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("copy %s: %w", Quote(e.Path), describeWrite(err))
	}
	dst := os.NewFile(uintptr(dfd), e.Path)
	defer dst.Close()
	// io.Copy between files uses copy_file_range: a reflink or an in-kernel copy.
	n, err := io.Copy(dst, io.LimitReader(src, e.Size))
	if err != nil {
		return fmt.Errorf("copy %s: %w", Quote(e.Path), describeWrite(err))
	}
	if n != e.Size {
		return fmt.Errorf("copy %s: it changed while being copied; try again", Quote(e.Path))
	}
	if err := unix.Fchmod(dfd, e.Mode&0o7777); err != nil {
		return fmt.Errorf("copy %s: %w", Quote(e.Path), err)
	}
	ts := []unix.Timespec{unix.NsecToTimespec(e.Mtime), unix.NsecToTimespec(e.Mtime)}
	return unix.UtimesNanoAt(dpfd, name, ts, unix.AT_SYMLINK_NOFOLLOW)
}

func setMeta(root int, e Entry, dir bool) error {
	pfd, err := openBeneath(root, parent(e.Path), oPath|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	name := baseName(e.Path)
	if dir {
		if err := unix.Fchmodat(pfd, name, e.Mode&0o7777, 0); err != nil {
			return err
		}
	}
	ts := []unix.Timespec{unix.NsecToTimespec(e.Mtime), unix.NsecToTimespec(e.Mtime)}
	return unix.UtimesNanoAt(pfd, name, ts, unix.AT_SYMLINK_NOFOLLOW)
}
