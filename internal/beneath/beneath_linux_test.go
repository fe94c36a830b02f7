package beneath

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Walk (the open used where there is no openat2) opens what openat2's
// rules open and refuses what they refuse: a symlink anywhere, "..", an
// absolute path. Here, on Linux, each case runs through both.
func TestTheWalkBeneathRefusesWhatOpenat2Refuses(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "d/e"), 0o755))
	must(os.WriteFile(filepath.Join(root, "d/e/f"), []byte("x"), 0o644))
	must(os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644))
	must(os.Symlink(outside, filepath.Join(root, "d/out")))
	must(os.Symlink("e/f", filepath.Join(root, "d/lf")))
	rfd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(err)
	defer unix.Close(rfd)
	for _, c := range []struct {
		rel   string
		flags int
		ok    bool
	}{
		{"d/e/f", unix.O_RDONLY, true},
		{"d/e", unix.O_RDONLY | unix.O_DIRECTORY, true},
		{"", unix.O_RDONLY | unix.O_DIRECTORY, true},
		{"d/./e/f", unix.O_RDONLY, true},
		{"d/out/secret", unix.O_RDONLY, false}, // a symlink on the way
		{"d/lf", unix.O_RDONLY, false},         // a symlink at the end
		{"d/out", unix.O_RDONLY | unix.O_DIRECTORY, false},
		{"d/../d/e/f", unix.O_RDONLY, false}, // openat2 allows a ".." that stays beneath; the walk refuses every ".."
		{"../" + filepath.Base(outside) + "/secret", unix.O_RDONLY, false},
		{outside + "/secret", unix.O_RDONLY, false},
		{"d/e/f/", unix.O_RDONLY | unix.O_DIRECTORY, false},
	} {
		fd, err := Walk(rfd, c.rel, c.flags)
		if err == nil {
			unix.Close(fd)
		}
		if (err == nil) != c.ok {
			t.Errorf("Walk(%q) = %v, want ok %v", c.rel, err, c.ok)
		}
		lfd, lerr := Open(rfd, c.rel, c.flags, Strict)
		if lerr == nil {
			unix.Close(lfd)
		}
		if lerr != nil && err == nil {
			t.Errorf("%q: openat2 refuses (%v) what the walk opens", c.rel, lerr)
		}
	}
}

// A mount inside the root is another device: both opens refuse to cross it.
func TestTheWalkBeneathDoesNotCrossAMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	root := t.TempDir()
	m := filepath.Join(root, "m")
	if err := os.Mkdir(m, 0o755); err != nil {
		t.Fatal(err)
	}
	rfd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rfd)
	fd, err := Walk(rfd, "m", unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		t.Fatalf("before the mount: %v", err) // the positive control
	}
	unix.Close(fd)
	if err := unix.Mount("tmpfs", m, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	defer unix.Unmount(m, unix.MNT_DETACH)
	if fd, err := Walk(rfd, "m", unix.O_RDONLY|unix.O_DIRECTORY); err != unix.EXDEV {
		if err == nil {
			unix.Close(fd)
		}
		t.Fatalf("Walk across a mount: %v, want EXDEV", err)
	}
	if fd, err := Open(rfd, "m", unix.O_RDONLY|unix.O_DIRECTORY, Strict); err == nil {
		unix.Close(fd)
		t.Fatal("openat2 crossed the mount")
	}
}

// Without NoSymlinks a symlink that stays beneath the root is followed (a
// host command's directory may be one); one that leaves is refused.
func TestSymlinksBeneathAreFollowedWhenAllowedButNeverOut(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(root, "real/sub"), 0o755)
	os.Symlink("real", filepath.Join(root, "in"))
	os.Symlink(outside, filepath.Join(root, "out"))
	rfd, err := unix.Open(root, Root, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rfd)
	fd, err := Open(rfd, "in/sub", unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatalf("a symlink beneath, allowed: %v", err)
	}
	unix.Close(fd)
	if fd, err := Open(rfd, "in/sub", unix.O_PATH|unix.O_DIRECTORY, NoSymlinks); err == nil {
		unix.Close(fd)
		t.Error("NoSymlinks followed a symlink")
	}
	for _, rel := range []string{"out", "real/../../" + filepath.Base(outside), outside, "/proc/self/root"} {
		if fd, err := Open(rfd, rel, unix.O_PATH|unix.O_DIRECTORY, 0); err == nil {
			unix.Close(fd)
			t.Errorf("Open(%q) left the root", rel)
		}
	}
}
