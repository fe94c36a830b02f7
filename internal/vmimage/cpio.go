package vmimage

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
)

// CPIOFile is one entry of an initramfs archive: a regular file (Data is its
// content), a directory (Mode has fs.ModeDir) or a symbolic link (Mode has
// fs.ModeSymlink, Data is the target).
type CPIOFile struct {
	Name string // slash-separated, relative to the archive's root ("init", "lib/modules/x")
	Mode fs.FileMode
	Data []byte
}

// WriteCPIO writes files as a newc ("070701") cpio archive, the format the
// kernel unpacks as an initramfs (Documentation/driver-api/early-userspace/
// buffer-format.rst), ending with the TRAILER!!! entry. Parent directories
// not listed are written first (mode 0755), so the kernel never meets a file
// whose directory does not exist yet. Owners are root and times zero, so
// the same input gives the same bytes. Archives written this way may be
// concatenated: the kernel unpacks each in turn.
func WriteCPIO(w io.Writer, files []CPIOFile) error {
	bw := bufio.NewWriter(w)
	cw := &cpioWriter{w: bw, dirs: map[string]bool{".": true}}
	for _, f := range files {
		name := path.Clean(strings.TrimPrefix(f.Name, "/"))
		if name == "." || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("cpio: bad name %q", f.Name)
		}
		if err := cw.parents(path.Dir(name)); err != nil {
			return err
		}
		var err error
		switch {
		case f.Mode.IsDir():
			if cw.dirs[name] {
				continue
			}
			cw.dirs[name] = true
			err = cw.entry(name, 0o040000|uint32(f.Mode.Perm()), 2, nil)
		case f.Mode&fs.ModeSymlink != 0:
			err = cw.entry(name, 0o120000|0o777, 1, f.Data)
		case f.Mode.IsRegular():
			err = cw.entry(name, 0o100000|unixPerm(f.Mode), 1, f.Data)
		default:
			return fmt.Errorf("cpio: %s: only files, directories and symbolic links", f.Name)
		}
		if err != nil {
			return err
		}
	}
	if err := cw.entry("TRAILER!!!", 0, 1, nil); err != nil {
		return err
	}
	return bw.Flush()
}

// unixPerm keeps the permission and setuid/setgid/sticky bits.
func unixPerm(m fs.FileMode) uint32 {
	p := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		p |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		p |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		p |= 0o1000
	}
	return p
}

type cpioWriter struct {
	w    *bufio.Writer
	ino  uint32
	dirs map[string]bool
}

func (c *cpioWriter) parents(dir string) error {
	if c.dirs[dir] {
		return nil
	}
	if err := c.parents(path.Dir(dir)); err != nil {
		return err
	}
	c.dirs[dir] = true
	return c.entry(dir, 0o040755, 2, nil)
}

// entry writes one header (13 eight-digit hex fields after the magic), the
// NUL-terminated name and the data, each padded to four bytes.
func (c *cpioWriter) entry(name string, mode, nlink uint32, data []byte) error {
	if len(data) > 1<<32-1 {
		return fmt.Errorf("cpio: %s is too large", name)
	}
	c.ino++
	ino := c.ino
	if name == "TRAILER!!!" {
		ino = 0
	}
	// magic ino mode uid gid nlink mtime filesize devmajor devminor rdevmajor rdevminor namesize check
	if _, err := fmt.Fprintf(c.w, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0); err != nil {
		return err
	}
	c.w.WriteString(name)
	c.w.WriteByte(0)
	c.pad(110 + len(name) + 1)
	c.w.Write(data)
	c.pad(len(data))
	return nil
}

func (c *cpioWriter) pad(n int) {
	for ; n%4 != 0; n++ {
		c.w.WriteByte(0)
	}
}
