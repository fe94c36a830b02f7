package credentials

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// lockPoll is how often a waiting refresher tries a lock again.
const lockPoll = 50 * time.Millisecond

// lockFile takes an exclusive flock on path (created 0600 if missing), waiting
// until ctx is done. The lock is the open file's: it goes with the process, so
// a crashed refresher never leaves it held. Two openings in one process exclude
// each other too (flock locks belong to the open file description).
// busy, if not nil, is called once when the lock is found held.
func lockFile(ctx context.Context, path string, busy func()) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the lock file %s: %w", path, err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing releases the lock
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if busy != nil {
			busy()
			busy = nil
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for another refresher's lock on %s: %w", path, context.Cause(ctx))
		case <-time.After(lockPoll):
		}
	}
}

// Claude Code's own refresh lock (proper-lockfile in claude 2.1.330): the
// directory ~/.claude/.oauth_refresh.lock, made with mkdir, held while its
// mtime is fresh (claude touches it every 5 s and takes over one older than
// 60 s). Holding it too keeps the real CLI from spending the refresh token
// airlock is about to spend.
const (
	claudeLockName  = ".oauth_refresh.lock"
	claudeLockStale = 60 * time.Second
	claudeLockTouch = 5 * time.Second
)

// lockClaude takes Claude Code's refresh lock in dir, waiting until ctx is done.
// busy is as for lockFile.
func lockClaude(ctx context.Context, dir string, busy func()) (unlock func(), err error) {
	p := filepath.Join(dir, claudeLockName)
	for {
		err := os.Mkdir(p, 0o700)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("take Claude Code's refresh lock %s: %w", p, err)
		}
		if fi, err := os.Lstat(p); err == nil && time.Since(fi.ModTime()) > claudeLockStale {
			// A holder that stopped touching it is gone; claude does the same.
			os.Remove(p)
			continue
		}
		if busy != nil {
			busy()
			busy = nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for Claude Code's refresh lock %s (a claude on this machine is refreshing; if none is, remove the directory): %w", p, context.Cause(ctx))
		case <-time.After(lockPoll * 4):
		}
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(claudeLockTouch)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				os.Chtimes(p, now, now)
			}
		}
	}()
	return func() {
		close(stop)
		<-done
		os.Remove(p)
	}, nil
}

// writeAtomic replaces path's content with b by renaming a new file over it, so
// a reader sees the old file or the new one, never half of one. The new file
// gets the old one's mode and owner. A symlinked path is written at its target.
func writeAtomic(path string, b []byte) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return err
	}
	dir := filepath.Dir(real)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(real)+".airlock-*")
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(fi.Mode().Perm()); err != nil {
		return err
	}
	if st, isUnix := fi.Sys().(*syscall.Stat_t); isUnix && (int(st.Uid) != os.Geteuid() || int(st.Gid) != os.Getegid()) {
		if err := tmp.Chown(int(st.Uid), int(st.Gid)); err != nil {
			return fmt.Errorf("keep the file's owner: %w", err)
		}
	}
	if _, err := tmp.Write(b); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), real); err != nil {
		return err
	}
	ok = true
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
