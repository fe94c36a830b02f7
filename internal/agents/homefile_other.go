//go:build !linux

package agents

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// openBeneath opens rel beneath home, refusing a link at every component
// (checked, then opened with O_NOFOLLOW) and never blocking on a FIFO.
func openBeneath(home, rel string, dir bool) (*os.File, error) {
	p := home
	for _, c := range strings.Split(filepath.ToSlash(rel), "/") {
		if c == "" || c == "." {
			continue
		}
		if c == ".." {
			return nil, &fs.PathError{Op: "open", Path: rel, Err: fs.ErrInvalid}
		}
		p = filepath.Join(p, c)
		st, err := os.Lstat(p)
		if err != nil {
			return nil, err
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			return nil, &fs.PathError{Op: "open", Path: p, Err: syscall.ELOOP}
		}
	}
	return os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
}
