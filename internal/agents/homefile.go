package agents

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// An agent's home is the sandbox's to write: whatever airlock reads there
// may be a FIFO (an open would block forever), a device, a link out of the
// home or a file of any size. These open one path component at a time
// beneath the home (openBeneath: no link followed, nothing outside), never
// block, take regular files and directories only, and bound what they read.

// maxHomeEntries bounds one directory listing in an agent's home.
const maxHomeEntries = 10000

// openHomeFile opens rel (slash-separated, relative) beneath home for
// reading: a regular file only.
func openHomeFile(home, rel string) (*os.File, error) {
	f, err := openBeneath(home, rel, false)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file", rel)
	}
	return f, nil
}

// readHomeFile reads at most max bytes of rel beneath home.
func readHomeFile(home, rel string, max int64) ([]byte, error) {
	f, err := openHomeFile(home, rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, max))
}

// homeEntry is a directory entry with what a session search needs.
type homeEntry struct {
	Name    string
	Mode    fs.FileMode // the entry itself: a link is a link
	ModTime time.Time
}

// readHomeDir lists rel beneath home (at most maxHomeEntries entries, in
// directory order), each entry lstat'ed.
func readHomeDir(home, rel string) ([]homeEntry, error) {
	d, err := openBeneath(home, rel, true)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(maxHomeEntries)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	out := make([]homeEntry, 0, len(names))
	for _, n := range names {
		// By path: an lstat never blocks, and what it says is only a hint;
		// the file is opened beneath the home again before it is read.
		st, err := os.Lstat(filepath.Join(d.Name(), n))
		if err != nil {
			continue // removed meanwhile
		}
		out = append(out, homeEntry{Name: n, Mode: st.Mode(), ModTime: st.ModTime()})
	}
	return out, nil
}

// homeRel joins slash-separated parts of a path relative to the home.
func homeRel(parts ...string) string { return filepath.ToSlash(filepath.Join(parts...)) }
