package vm

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/vmimage"
)

// Assets are what a VM boots: a bzImage, a newc cpio of the modules it
// loads, and the root image.
type Assets = vmimage.Assets

// Variant is the root image a VM boots (airlock images build --format vm).
const Variant = "minimal"

// FindAssets finds the newest kernel and the root image under dataDir.
func FindAssets(dataDir string) (Assets, error) { return vmimage.Find(dataDir, Variant) }

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
	b, err := io.ReadAll(bin)
	if err != nil {
		return err
	}
	return vmimage.WriteCPIO(w, []vmimage.CPIOFile{{Name: "init", Mode: 0o755, Data: b}})
}
