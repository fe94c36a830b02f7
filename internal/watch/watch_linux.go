package watch

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxWatches bounds the directories watched per sandbox: a sandbox making
// more directories than that gets no events for the ones beyond.
const maxWatches = 8192

// Watcher turns inotify events on the host side of the writable mounts into
// file events: creates, writes (on close after writing) and deletes, by any
// process inside or by write_file. It sees what lands in host directories:
// bind and memory mounts fully; an overlay workspace's writes and creates
// (its deletions are whiteouts, reported as creates of the name). One gap is
// inotify's: it watches directories, not trees, so a new directory is
// watched only once its create event is read; a file made and removed in it
// before then is not seen at all, and one removed while the new directory
// is being walked is seen created, not written.
type Watcher struct {
	f      *os.File
	emit   func(op, path string, size int64)
	mu     sync.Mutex
	dirs   map[int]Mount // watch descriptor → host dir and its path inside
	full   bool
	done   chan struct{}
	closer func()
}

// New watches mounts and calls emit for each file event (op is create,
// write or delete; path is the file's inside); nil without mounts. Close
// it to stop.
func New(mounts []Mount, emit func(op, path string, size int64)) (*Watcher, error) {
	if len(mounts) == 0 {
		return nil, nil
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	w := &Watcher{f: os.NewFile(uintptr(fd), "inotify"), emit: emit, dirs: map[int]Mount{}, done: make(chan struct{})}
	var once sync.Once
	w.closer = func() {
		once.Do(func() {
			// The deadline wakes run, which reads what is queued still (a
			// command that has just ended left its events unread) and ends.
			// Without one (no poller), closing is what ends the read.
			if w.f.SetReadDeadline(time.Now()) != nil {
				w.f.Close()
			}
			<-w.done
			w.f.Close()
		})
	}
	for _, m := range mounts {
		if err := w.addTree(m, false); err != nil {
			w.f.Close()
			return nil, err
		}
	}
	go w.run()
	return w, nil
}

// Close stops the watch once the events queued so far are reported. A nil
// Watcher's Close does nothing; it may be called more than once.
func (w *Watcher) Close() {
	if w != nil {
		w.closer()
	}
}

const watchMask = unix.IN_CREATE | unix.IN_CLOSE_WRITE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW | unix.IN_EXCL_UNLINK

// addTree watches dir and the directories below it; announce reports the
// files already there (made before the watch caught up with a new dir).
func (w *Watcher) addTree(m Mount, announce bool) error {
	return filepath.WalkDir(m.Host, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		inside := path.Join(m.Inside, strings.TrimPrefix(p, m.Host))
		if !d.IsDir() {
			if announce {
				// Made before the new directory's watch was in place: its
				// close-after-write may be gone unseen, so a file with
				// content counts as written too (possibly twice).
				w.file("create", p, inside)
				if info, err := d.Info(); err == nil && info.Size() > 0 {
					w.file("write", p, inside)
				}
			}
			return nil
		}
		w.mu.Lock()
		if len(w.dirs) >= maxWatches {
			w.full = true
			w.mu.Unlock()
			return filepath.SkipAll
		}
		wd, werr := unix.InotifyAddWatch(int(w.f.Fd()), p, watchMask)
		if werr == nil {
			w.dirs[wd] = Mount{Host: p, Inside: inside}
		}
		w.mu.Unlock()
		if werr != nil && p == m.Host {
			return fmt.Errorf("inotify watch %s: %w", p, werr)
		}
		if announce && p != m.Host {
			w.emit("create", inside, 0)
		}
		return nil
	})
}

func (w *Watcher) file(op, host, inside string) {
	var size int64
	if op != "delete" {
		if st, err := os.Lstat(host); err == nil {
			size = st.Size()
		}
	}
	w.emit(op, inside, size)
}

func (w *Watcher) run() {
	defer close(w.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			w.drain(buf)
			return
		}
		if err != nil {
			return
		}
		w.events(buf[:n])
	}
}

// drain handles the events queued when close was called: a read past the
// deadline would not look, so it reads the descriptor itself until it is
// empty (it is non-blocking), bounded as the sandbox may still be writing.
func (w *Watcher) drain(buf []byte) {
	rc, err := w.f.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		for range 64 {
			n, err := unix.Read(int(fd), buf)
			if err != nil || n <= 0 {
				return
			}
			w.events(buf[:n])
		}
	})
}

// events turns one read's inotify events into file events.
func (w *Watcher) events(buf []byte) {
	n := len(buf)
	for off := 0; off+unix.SizeofInotifyEvent <= n; {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		name := ""
		if ev.Len > 0 {
			end := off + unix.SizeofInotifyEvent + int(ev.Len)
			if end > n {
				break
			}
			name = strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:end]), "\x00")
		}
		off += unix.SizeofInotifyEvent + int(ev.Len)
		w.mu.Lock()
		dir, ok := w.dirs[int(ev.Wd)]
		if ev.Mask&unix.IN_IGNORED != 0 {
			delete(w.dirs, int(ev.Wd))
		}
		w.mu.Unlock()
		if !ok || name == "" {
			continue
		}
		host, inside := filepath.Join(dir.Host, name), path.Join(dir.Inside, name)
		isDir := ev.Mask&unix.IN_ISDIR != 0
		switch {
		case ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
			if isDir {
				w.emit("create", inside, 0)
				w.addTree(Mount{Host: host, Inside: inside}, true)
			} else {
				w.file("create", host, inside)
			}
		case ev.Mask&unix.IN_CLOSE_WRITE != 0:
			w.file("write", host, inside)
		case ev.Mask&(unix.IN_DELETE|unix.IN_MOVED_FROM) != 0:
			w.file("delete", host, inside)
		}
	}
}
