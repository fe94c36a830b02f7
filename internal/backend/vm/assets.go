package vm

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"
)

// Assets are what a VM boots: a bzImage, a newc cpio of the modules it
// loads (with /lib/modules/<version>/airlock.order), and the root image.
type Assets struct {
	Kernel, Modules, Root string
	RootFormat            string // ext4 or erofs
	KernelVersion         string
}

// ErrNoAssets says the kernel or root image has not been built.
var ErrNoAssets = errors.New("no VM kernel or root image: run `airlock images build --variant vm` first")

// FindAssets finds the newest kernel and a root image under dataDir/vm
// (kernels/<version>/{vmlinuz,modules.cpio}, roots/<variant>/root.{erofs,ext4}).
func FindAssets(dataDir string) (Assets, error) {
	var a Assets
	kernels, _ := filepath.Glob(filepath.Join(dataDir, "vm", "kernels", "*", "vmlinuz"))
	sort.Strings(kernels)
	if len(kernels) == 0 {
		return a, fmt.Errorf("%w (looked in %s)", ErrNoAssets, filepath.Join(dataDir, "vm"))
	}
	a.Kernel = kernels[len(kernels)-1]
	a.KernelVersion = filepath.Base(filepath.Dir(a.Kernel))
	a.Modules = filepath.Join(filepath.Dir(a.Kernel), "modules.cpio")
	if _, err := os.Stat(a.Modules); err != nil {
		a.Modules = "" // a kernel with its drivers built in
	}
	for _, f := range []string{"erofs", "ext4"} {
		roots, _ := filepath.Glob(filepath.Join(dataDir, "vm", "roots", "*", "root."+f))
		if len(roots) > 0 {
			sort.Strings(roots)
			a.Root, a.RootFormat = roots[0], f
			return a, nil
		}
	}
	return a, fmt.Errorf("%w (no root image in %s)", ErrNoAssets, filepath.Join(dataDir, "vm", "roots"))
}

// Initrd is the initramfs for a boot: the modules' cpio followed by one
// holding exe as /init (the kernel unpacks concatenated archives in turn).
// It is cached in dataDir by the identity of both, so a rebuilt binary or
// kernel makes a new one.
func Initrd(dataDir string, a Assets, exe string) (string, error) {
	bin, err := os.Open(exe)
	if err != nil {
		return "", err
	}
	defer bin.Close()
	// The binary's identity: any rewrite changes its inode or ctime.
	var st unix.Stat_t
	if err := unix.Fstat(int(bin.Fd()), &st); err != nil {
		return "", err
	}
	h := sha256.New()
	binary.Write(h, binary.LittleEndian, []int64{int64(st.Dev), int64(st.Ino), st.Size, st.Ctim.Nano(), st.Mtim.Nano()})
	var modSize int64
	if a.Modules != "" {
		st, err := os.Stat(a.Modules)
		if err != nil {
			return "", err
		}
		modSize = st.Size()
		fmt.Fprintf(h, "%s %d %d", a.Modules, st.Size(), st.ModTime().UnixNano())
	}
	dir := filepath.Join(dataDir, "vm", "initrd")
	out := filepath.Join(dir, hex.EncodeToString(h.Sum(nil)[:12])+".img")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, ".initrd-")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if a.Modules != "" {
		m, err := os.Open(a.Modules)
		if err != nil {
			return "", err
		}
		_, err = io.Copy(tmp, io.LimitReader(m, modSize))
		m.Close()
		if err != nil {
			return "", err
		}
	}
	if _, err := bin.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	if err := writeInitCPIO(tmp, bin); err != nil {
		return "", err
	}
	if err := tmp.Chmod(0o644); err != nil {
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	return out, os.Rename(tmp.Name(), out)
}

// writeInitCPIO writes a newc archive holding bin as /init.
func writeInitCPIO(w io.Writer, bin *os.File) error {
	st, err := bin.Stat()
	if err != nil {
		return err
	}
	entry := func(name string, mode uint32, size int64) error {
		hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X", 1, mode, 0, 0, 1, 0, size, 0, 0, 0, 0, len(name)+1, 0)
		b := append([]byte(hdr+name), 0)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		_, err := w.Write(b)
		return err
	}
	pad := func(n int64) error {
		_, err := w.Write(make([]byte, (4-n%4)%4))
		return err
	}
	if err := entry("init", 0o100755, st.Size()); err != nil {
		return err
	}
	n, err := io.Copy(w, bin)
	if err != nil {
		return err
	}
	if err := pad(n); err != nil {
		return err
	}
	return entry("TRAILER!!!", 0, 0)
}
