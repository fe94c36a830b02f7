package vfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// serve mounts p on a fresh directory the way the VM does, minus QEMU: the
// kernel's /dev/fuse, GuestRelay, a stream socketpair standing for the
// virtio-serial port, ServeStream. It skips without root or /dev/fuse.
func serve(t testing.TB, p Provider, o ServeOptions) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount FUSE")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse: ", err)
	}
	mnt := t.TempDir()
	dev, err := MountFUSE(mnt)
	if err != nil {
		t.Skipf("cannot mount FUSE here: %v", err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Blocking, not in Go's netpoller: opening a file on the mount makes
	// the runtime's epoll ask this same process's FUSE server to poll it,
	// which must not wait for the netpoller (what go-fuse's pollHack is
	// about). In the VM the two sides are different kernels.
	guest, host := os.NewFile(uintptr(fds[0]), "guest"), os.NewFile(uintptr(fds[1]), "host")
	gerr, herr := make(chan error, 1), make(chan error, 1)
	go func() { gerr <- GuestRelay(dev, guest) }()
	go func() { herr <- ServeStream(context.Background(), host, p, o) }()
	var st unix.Stat_t
	must2(t, unix.Stat(mnt, &st))
	conn := fmt.Sprintf("/sys/fs/fuse/connections/%d/abort", unix.Minor(st.Dev))
	// go-fuse's poll hack, which a /dev/fd/N mount does not get: have the
	// kernel ask POLL once, from a thread in a system call, so it learns
	// ENOSYS. Otherwise the first os.Open of a file on the mount registers
	// it with the runtime's epoll outside a system call; the kernel then
	// asks this process's server, whose goroutines cannot run while a GC
	// waits for that thread: a deadlock, and a process that cannot exit.
	hack, err := unix.Open(filepath.Join(mnt, ".go-fuse-epoll-hack"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("poll hack: %v", err)
	}
	unix.Poll([]unix.PollFd{{Fd: int32(hack), Events: unix.POLLIN | unix.POLLOUT}}, 0)
	unix.Close(hack)
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount: %v", err)
		}
		select {
		case err := <-gerr:
			if err != nil {
				t.Errorf("guest relay: %v", err)
			}
		case <-time.After(5 * time.Second):
			// A lazily detached mount ends when its last user lets go;
			// abort the connection (fusectl, if mounted) so the test ends.
			t.Logf("the connection outlived the unmount; aborting it")
			os.WriteFile(conn, []byte("1"), 0)
			select {
			case <-gerr:
			case <-time.After(5 * time.Second):
				t.Error("guest relay did not end after unmount")
			}
		}
		dev.Close()
		unix.Shutdown(fds[0], unix.SHUT_RDWR) // wakes the blocked reads Close would not
		guest.Close()
		select {
		case err := <-herr:
			if err != nil {
				t.Errorf("ServeStream: %v", err)
			}
		case <-time.After(10 * time.Second):
			buf := make([]byte, 1<<20)
			t.Errorf("ServeStream did not end after the guest closed the port\n%s", buf[:runtime.Stack(buf, true)])
		}
	})
	return mnt
}

func must2(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErrno(t *testing.T, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("got %v, want %v", err, want)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	must(t, err)
	return string(b)
}

// posixCases run against a mounted tree; each gets its own directory d.
var posixCases = []struct {
	name string
	run  func(t *testing.T, d string)
}{
	{"create write read", func(t *testing.T, d string) {
		must(t, os.WriteFile(d+"/f", []byte("hello"), 0o644))
		if got := readFile(t, d+"/f"); got != "hello" {
			t.Fatalf("read %q", got)
		}
		big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB: several max writes
		must(t, os.WriteFile(d+"/big", big, 0o644))
		if got := readFile(t, d+"/big"); got != string(big) {
			t.Fatalf("big file: %d bytes back", len(got))
		}
	}},
	{"overwrite with O_TRUNC", func(t *testing.T, d string) {
		must(t, os.WriteFile(d+"/f", []byte("long content"), 0o644))
		must(t, os.WriteFile(d+"/f", []byte("short"), 0o644))
		if got := readFile(t, d+"/f"); got != "short" {
			t.Fatalf("read %q", got)
		}
	}},
	{"append", func(t *testing.T, d string) {
		must(t, os.WriteFile(d+"/f", []byte("a"), 0o644))
		for _, s := range []string{"b", "c"} {
			f, err := os.OpenFile(d+"/f", os.O_WRONLY|os.O_APPEND, 0)
			must(t, err)
			_, err = f.WriteString(s)
			must(t, err)
			must(t, f.Close())
		}
		if got := readFile(t, d+"/f"); got != "abc" {
			t.Fatalf("read %q", got)
		}
	}},
	{"truncate", func(t *testing.T, d string) {
		must(t, os.WriteFile(d+"/f", []byte("hello world"), 0o644))
		must(t, os.Truncate(d+"/f", 5))
		if got := readFile(t, d+"/f"); got != "hello" {
			t.Fatalf("read %q", got)
		}
		f, err := os.OpenFile(d+"/f", os.O_RDWR, 0)
		must(t, err)
		must(t, f.Truncate(8))
		f.Close()
		if got := readFile(t, d+"/f"); got != "hello\x00\x00\x00" {
			t.Fatalf("read %q", got)
		}
	}},
	{"mkdir rmdir", func(t *testing.T, d string) {
		must(t, os.Mkdir(d+"/sub", 0o755))
		must(t, os.WriteFile(d+"/sub/f", nil, 0o644))
		wantErrno(t, unix.Rmdir(d+"/sub"), unix.ENOTEMPTY)
		must(t, os.Remove(d+"/sub/f"))
		must(t, unix.Rmdir(d+"/sub"))
		wantErrno(t, unix.Access(d+"/sub", unix.F_OK), unix.ENOENT)
	}},
	{"rename over file", func(t *testing.T, d string) {
		must(t, os.WriteFile(d+"/a", []byte("A"), 0o644))
		must(t, os.WriteFile(d+"/b", []byte("B"), 0o644))
		must(t, os.Rename(d+"/a", d+"/b"))
		if got := readFile(t, d+"/b"); got != "A" {
			t.Fatalf("read %q", got)
		}
		wantErrno(t, unix.Access(d+"/a", unix.F_OK), unix.ENOENT)
	}},
	{"rename over dir", func(t *testing.T, d string) {
		must(t, os.MkdirAll(d+"/x/in", 0o755))
		must(t, os.Mkdir(d+"/y", 0o755))
		must(t, unix.Rename(d+"/x", d+"/y")) // os.Rename refuses an existing dir itself
		if _, err := os.Stat(d + "/y/in"); err != nil {
			t.Fatal(err)
		}
		must(t, os.Mkdir(d+"/z", 0o755))
		wantErrno(t, unix.Rename(d+"/z", d+"/y"), unix.ENOTEMPTY)
		must(t, os.WriteFile(d+"/f", nil, 0o644))
		wantErrno(t, unix.Rename(d+"/f", d+"/z"), unix.EISDIR)
		wantErrno(t, unix.Rename(d+"/z", d+"/f"), unix.ENOTDIR)
	}},
	{"rename across dirs", func(t *testing.T, d string) {
		must(t, os.MkdirAll(d+"/p/q", 0o755))
		must(t, os.Mkdir(d+"/r", 0o755))
		must(t, os.WriteFile(d+"/p/q/f", []byte("moved"), 0o644))
		must(t, os.Rename(d+"/p/q/f", d+"/r/g"))
		if got := readFile(t, d+"/r/g"); got != "moved" {
			t.Fatalf("read %q", got)
		}
		must(t, os.Rename(d+"/p/q", d+"/r/q"))
		if _, err := os.Stat(d + "/r/q"); err != nil {
			t.Fatal(err)
		}
	}},
	{"unlinked open file still readable", func(t *testing.T, d string) {
		must(t, os.WriteFile(d+"/f", []byte("still here"), 0o644))
		f, err := os.OpenFile(d+"/f", os.O_RDWR, 0)
		must(t, err)
		defer f.Close()
		must(t, os.Remove(d+"/f"))
		b := make([]byte, 64)
		n, err := f.ReadAt(b, 0)
		if string(b[:n]) != "still here" {
			t.Fatalf("read %q, %v", b[:n], err)
		}
		_, err = f.WriteAt([]byte("STILL"), 0)
		must(t, err)
		st, err := f.Stat()
		must(t, err)
		if st.Size() != 10 {
			t.Fatalf("size %d", st.Size())
		}
	}},
	{"symlink readlink", func(t *testing.T, d string) {
		must(t, os.WriteFile(d+"/target", []byte("via link"), 0o644))
		must(t, os.Symlink("target", d+"/link"))
		if got, err := os.Readlink(d + "/link"); err != nil || got != "target" {
			t.Fatalf("readlink %q %v", got, err)
		}
		if got := readFile(t, d+"/link"); got != "via link" {
			t.Fatalf("read %q", got)
		}
		st, err := os.Lstat(d + "/link")
		must(t, err)
		if st.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("lstat mode %v", st.Mode())
		}
		must(t, os.Symlink("nowhere", d+"/dangling"))
		wantErrno(t, unix.Access(d+"/dangling", unix.F_OK), unix.ENOENT)
	}},
	{"hard link", func(t *testing.T, d string) {
		must(t, os.WriteFile(d+"/a", []byte("one"), 0o644))
		must(t, os.Link(d+"/a", d+"/b"))
		var sa, sb unix.Stat_t
		must(t, unix.Stat(d+"/a", &sa))
		must(t, unix.Stat(d+"/b", &sb))
		if sa.Ino != sb.Ino || sb.Nlink != 2 {
			t.Fatalf("ino %d vs %d, nlink %d", sa.Ino, sb.Ino, sb.Nlink)
		}
		must(t, os.WriteFile(d+"/b", []byte("two"), 0o644))
		if got := readFile(t, d+"/a"); got != "two" {
			t.Fatalf("read through the other name %q", got)
		}
		must(t, os.Remove(d+"/a"))
		must(t, unix.Stat(d+"/b", &sb))
		if sb.Nlink != 1 {
			t.Fatalf("nlink after unlink %d", sb.Nlink)
		}
		wantErrno(t, os.Link(d, d+"/dirlink"), unix.EPERM)
	}},
	{"stable inode", func(t *testing.T, d string) {
		must(t, os.WriteFile(d+"/f", nil, 0o644))
		var s1, s2 unix.Stat_t
		must(t, unix.Stat(d+"/f", &s1))
		must(t, os.WriteFile(d+"/f", []byte("x"), 0o644))
		must(t, unix.Stat(d+"/f", &s2))
		if s1.Ino != s2.Ino {
			t.Fatalf("ino changed %d → %d", s1.Ino, s2.Ino)
		}
	}},
	{"chmod utimes", func(t *testing.T, d string) {
		must(t, os.WriteFile(d+"/f", nil, 0o644))
		must(t, os.Chmod(d+"/f", 0o600))
		when := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
		must(t, os.Chtimes(d+"/f", when, when))
		st, err := os.Stat(d + "/f")
		must(t, err)
		if st.Mode().Perm() != 0o600 || !st.ModTime().Equal(when) {
			t.Fatalf("mode %v mtime %v", st.Mode(), st.ModTime())
		}
	}},
	{"statfs", func(t *testing.T, d string) {
		var s unix.Statfs_t
		must(t, unix.Statfs(d, &s))
		if s.Bsize == 0 || s.Blocks == 0 {
			t.Fatalf("statfs %+v", s)
		}
	}},
	{"readdir many", func(t *testing.T, d string) {
		for i := range 600 {
			must(t, os.WriteFile(fmt.Sprintf("%s/file-with-a-longish-name-%04d", d, i), nil, 0o644))
		}
		es, err := os.ReadDir(d)
		must(t, err)
		if len(es) != 600 {
			t.Fatalf("%d entries", len(es))
		}
	}},
	{"O_EXCL", func(t *testing.T, d string) {
		f, err := os.OpenFile(d+"/f", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		must(t, err)
		f.Close()
		_, err = os.OpenFile(d+"/f", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		wantErrno(t, err, unix.EEXIST)
	}},
	{"errnos", func(t *testing.T, d string) {
		must(t, os.WriteFile(d+"/f", nil, 0o644))
		must(t, os.Mkdir(d+"/dir", 0o755))
		_, err := os.Open(d + "/none")
		wantErrno(t, err, unix.ENOENT)
		wantErrno(t, os.Mkdir(d+"/dir", 0o755), unix.EEXIST)
		_, err = os.Open(d + "/f/x")
		wantErrno(t, err, unix.ENOTDIR)
		_, err = os.OpenFile(d+"/dir", os.O_WRONLY, 0)
		wantErrno(t, err, unix.EISDIR)
		wantErrno(t, unix.Unlink(d+"/dir"), unix.EISDIR)
		wantErrno(t, unix.Rmdir(d+"/f"), unix.ENOTDIR)
		wantErrno(t, unix.Symlink("x", d+"/f"), unix.EEXIST)
	}},
	{"permissions as another user", func(t *testing.T, d string) {
		must(t, os.WriteFile(d+"/secret", []byte("s"), 0o600))
		must(t, os.Chmod(d, 0o755))
		// default_permissions: the kernel checks modes against served attributes.
		err := asUser(65534, func() error { _, err := os.ReadFile(d + "/secret"); return err })
		wantErrno(t, err, unix.EACCES)
	}},
}

// asUser runs f on a locked thread whose fs uid is uid (the FUSE client's
// credentials are per thread).
func asUser(uid int, f func() error) error {
	done := make(chan error)
	go func() {
		// The thread is left locked and so dies with the goroutine.
		lockOSThread()
		if _, _, e := unix.RawSyscall(unix.SYS_SETFSUID, uintptr(uid), 0, 0); e != 0 {
			done <- e
			return
		}
		done <- f()
	}()
	return <-done
}

func runPOSIX(t *testing.T, mnt string) {
	passed := 0
	for i, c := range posixCases {
		ok := t.Run(c.name, func(t *testing.T) {
			d := filepath.Join(mnt, fmt.Sprintf("case%02d", i))
			must(t, os.Mkdir(d, 0o755))
			c.run(t, d)
		})
		if ok {
			passed++
		}
	}
	t.Logf("POSIX cases passed: %d/%d", passed, len(posixCases))
}

func TestFUSERealDir(t *testing.T) {
	root := t.TempDir()
	p, err := NewRealDir(root)
	must(t, err)
	t.Cleanup(func() { p.Close() }) // after serve's cleanup has ended the session: a late request must not find its root fd closed (and its number reused)
	runPOSIX(t, serve(t, p, ServeOptions{}))
}

func TestFUSEMemory(t *testing.T) {
	runPOSIX(t, serve(t, NewMemory(0, 0), ServeOptions{}))
}

func TestFUSEOverlay(t *testing.T) {
	lower, upper := t.TempDir(), t.TempDir()
	lp, err := NewRealDir(lower)
	must(t, err)
	o, err := NewOverlay(ReadOnly(lp), upper)
	must(t, err)
	t.Cleanup(func() { o.Close() }) // after the session ends, as above
	runPOSIX(t, serve(t, o, ServeOptions{}))
}

func TestFUSERouter(t *testing.T) {
	ws, data := t.TempDir(), t.TempDir()
	must(t, os.WriteFile(data+"/ro", []byte("read only"), 0o644))
	wp, err := NewRealDir(ws)
	must(t, err)
	dp, err := NewRealDir(data)
	must(t, err)
	r, err := NewRouter(Mount{"/workspace", wp}, Mount{"/data", ReadOnly(dp)}, Mount{"/tmp", NewMemory(0, 0)})
	must(t, err)
	mnt := serve(t, r, ServeOptions{})
	es, err := os.ReadDir(mnt)
	must(t, err)
	if len(es) != 3 {
		t.Fatalf("root lists %v", es)
	}
	must(t, os.WriteFile(mnt+"/workspace/f", []byte("w"), 0o644))
	if got := readFile(t, ws+"/f"); got != "w" {
		t.Fatalf("host sees %q", got)
	}
	if got := readFile(t, mnt+"/data/ro"); got != "read only" {
		t.Fatalf("read %q", got)
	}
	wantErrno(t, os.WriteFile(mnt+"/data/ro", nil, 0o644), unix.EROFS)
	wantErrno(t, os.Rename(mnt+"/workspace/f", mnt+"/tmp/f"), unix.EXDEV)
	wantErrno(t, os.Mkdir(mnt+"/new", 0o755), unix.EROFS)
	runPOSIX(t, mnt+"/tmp")
}

func TestFUSEListsDotAndDotDot(t *testing.T) {
	mnt := serve(t, NewMemory(0, 0), ServeOptions{})
	d := filepath.Join(mnt, "d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 4096)
	n, err := unix.Getdents(fd, buf)
	if err != nil {
		t.Fatal(err)
	}
	// linux_dirent64: ino u64, off s64, reclen u16, type u8, name (x/sys's
	// ParseDirent would drop . and .., which is what is tested).
	var names []string
	for b := buf[:n]; len(b) >= 19; {
		reclen := int(b[16]) | int(b[17])<<8
		if reclen < 19 || reclen > len(b) {
			t.Fatalf("bad dirent length %d", reclen)
		}
		name := b[19:reclen]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		names = append(names, string(name))
		b = b[reclen:]
	}
	if strings.Join(names, " ") != ". .. f" {
		t.Errorf("getdents listed %q, want . .. f", names)
	}
}
