package workspace

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// WriteFileBeneath writes data to rel under the directory root, mode 0600,
// making missing directories (0700). root's content may be a sandbox's to
// write (an agent's home): no link on the way is followed, nothing leaves
// root, and the file is replaced by a rename, never written through.
func WriteFileBeneath(root, rel string, data []byte) error {
	if !validRel(rel) {
		return fmt.Errorf("%s is not a path inside %s", Quote(rel), root)
	}
	rfd, err := unix.Open(root, unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(rfd)
	for i := strings.IndexByte(rel, '/'); i >= 0; i = next(rel, i) {
		if err := mkdirBeneath(rfd, rel[:i], 0o700); err != nil {
			return fmt.Errorf("make %s: %w", Quote(rel[:i]), err)
		}
	}
	dir, err := openBeneath(rfd, parent(rel), oPath|unix.O_DIRECTORY)
	if err != nil {
		return fmt.Errorf("%s is not a plain directory (%v): remove it from %s", Quote(parent(rel)), err, root)
	}
	defer unix.Close(dir)
	name := baseName(rel)
	tmp := "." + name + ".airlock-tmp"
	unix.Unlinkat(dir, tmp, 0)
	fd, err := unix.Openat(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dir, tmp, dir, name)
	}
	if err != nil {
		unix.Unlinkat(dir, tmp, 0)
	}
	return err
}

// next is the index of the '/' after the one at i in rel, -1 if none.
func next(rel string, i int) int {
	if j := strings.IndexByte(rel[i+1:], '/'); j >= 0 {
		return i + 1 + j
	}
	return -1
}
