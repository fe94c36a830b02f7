package childspec

import (
	"os"

	"golang.org/x/sys/unix"
)

// specFile is b in a memfd sealed against every change, read from its
// start: nothing on disk, and nobody holding the descriptor can alter the
// spec between this write and the child's read.
func specFile(b []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate("airlock-childspec", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "airlock-childspec")
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(0, 0); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
