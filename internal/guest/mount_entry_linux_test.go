package guest

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// The masks a fresh /proc gets go on by name from a descriptor of its root
// (maskEntry, readOnlyEntry): checked here on a directory of the test's, in
// a mount namespace of a thread's own.
func TestProcEntriesAreMaskedAndMadeReadOnlyByName(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts in a mount namespace of its own")
	}
	dir := t.TempDir()
	for _, d := range []string{"sub", "ro"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "file"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "sub", "inside"), []byte("secret"), 0o644)
	os.Symlink("file", filepath.Join(dir, "link"))

	errs := make(chan error, 1)
	go func() {
		// The thread leaves the host's mount namespace and is never given
		// back to the runtime: it ends with this goroutine.
		runtime.LockOSThread()
		errs <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); err != nil {
				return err
			}
			if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
				return err
			}
			scratch, err := newScratch()
			if err != nil {
				return err
			}
			defer unix.Close(scratch)
			d, err := unix.Open(dir, unix.O_PATH|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(d)
			b := &builder{scratch: scratch}
			for _, name := range []string{"file", "sub", "missing"} {
				if err := b.maskEntry(d, name); err != nil {
					return errors.New("mask " + name + ": " + err.Error())
				}
			}
			if err := b.maskEntry(d, "link"); err == nil {
				return errors.New("a symbolic link was masked (followed), not refused")
			}
			for _, name := range []string{"ro", "missing"} {
				if err := readOnlyEntry(d, name); err != nil {
					return errors.New("read-only " + name + ": " + err.Error())
				}
			}
			if b, err := os.ReadFile(filepath.Join(dir, "file")); err != nil || len(b) != 0 {
				return errors.New("the masked file still reads " + string(b))
			}
			if ents, err := os.ReadDir(filepath.Join(dir, "sub")); err != nil || len(ents) != 0 {
				return errors.New("the masked directory still lists its entries")
			}
			if err := os.WriteFile(filepath.Join(dir, "file"), []byte("x"), 0o644); !errors.Is(err, unix.EROFS) && !errors.Is(err, unix.EACCES) {
				return errors.New("the mask over a file is writable")
			}
			// The control: beside them, the directory itself takes a new file.
			if err := os.WriteFile(filepath.Join(dir, "new"), []byte("x"), 0o644); err != nil {
				return errors.New("the unmasked directory refused a new file: " + err.Error())
			}
			if err := os.WriteFile(filepath.Join(dir, "ro", "new"), []byte("x"), 0o644); !errors.Is(err, unix.EROFS) {
				return errors.New("a file could be made in the read-only directory")
			}
			return nil
		}()
	}()
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	// The host's view is untouched.
	if b, err := os.ReadFile(filepath.Join(dir, "sub", "inside")); err != nil || string(b) != "secret" {
		t.Errorf("the host's view changed: %q, %v", b, err)
	}
}
