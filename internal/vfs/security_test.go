package vfs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/workspace"
	"golang.org/x/sys/unix"
)

// The host must never act outside a RealDir's root, whatever symlinks or
// dot-dots the tree holds. The target outside is our own file, so a broken
// check changes nothing that matters.
func TestRealDirStaysBeneath(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	must(t, os.WriteFile(outside+"/secret", []byte("outside"), 0o600))
	must(t, os.Symlink(outside, root+"/out"))
	must(t, os.Symlink(outside+"/secret", root+"/pw"))
	must(t, os.Symlink("../../../../../../../../"+outside, root+"/up"))
	must(t, os.Symlink("../inside", root+"/rel")) // a relative link out
	p, err := NewRealDir(root)
	must(t, err)
	defer p.Close()

	for _, path := range []string{"/out/secret", "/up/secret", "/rel/x"} {
		if _, err := p.Lstat(path); err == nil {
			t.Errorf("Lstat %s reached outside", path)
		}
		if f, err := p.Open(path, unix.O_RDONLY); err == nil {
			f.Close()
			t.Errorf("Open %s reached outside", path)
		}
		if f, err := p.Create(path+"-new", unix.O_WRONLY, 0o644); err == nil {
			f.Close()
			t.Errorf("Create under %s reached outside", path)
		}
		if err := p.Mkdir(path+"-dir", 0o755); err == nil {
			t.Errorf("Mkdir under %s reached outside", path)
		}
	}
	if f, err := p.Open("/pw", unix.O_RDONLY); !errors.Is(err, unix.ELOOP) {
		if f != nil {
			f.Close()
		}
		t.Errorf("Open of a symlink: %v, want ELOOP", err)
	}
	if _, err := p.Stat("/pw"); err == nil {
		t.Error("Stat followed a symlink out of the root")
	}
	mode := uint32(0o666)
	if _, err := p.Setattr("/pw", SetAttr{Mode: &mode}); err == nil {
		t.Error("chmod through a symlink succeeded")
	}
	size := int64(0)
	if _, err := p.Setattr("/pw", SetAttr{Size: &size}); err == nil {
		t.Error("truncate through a symlink succeeded")
	}
	if _, err := p.Lstat("/../../../../" + outside + "/secret"); !errors.Is(err, unix.ENOENT) {
		t.Errorf("dot-dots: %v, want ENOENT (clean paths cannot climb)", err)
	}
	st, err := os.Stat(outside + "/secret")
	must(t, err)
	if b, _ := os.ReadFile(outside + "/secret"); string(b) != "outside" || st.Mode().Perm() != 0o600 {
		t.Fatalf("the file outside changed: %q %v", b, st.Mode())
	}
	for _, name := range []string{"..", ".", "a/b", "", "x\x00"} {
		if validName(name) == nil {
			t.Errorf("name %q accepted", name)
		}
	}
}

// A directory swapped for a symlink behind the guest kernel's back (its
// cache still says directory) must not lead the host outside the root.
func TestFUSESwappedDirStaysBeneath(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	must(t, os.WriteFile(outside+"/secret", []byte("outside"), 0o600))
	p, err := NewRealDir(root)
	must(t, err)
	defer p.Close()
	mnt := serve(t, p, ServeOptions{CacheTimeout: time.Hour})
	must(t, os.Mkdir(mnt+"/d", 0o755))
	if _, err := os.Stat(mnt + "/d"); err != nil {
		t.Fatal(err)
	}
	must(t, os.Remove(root+"/d"))
	must(t, os.Symlink(outside, root+"/d"))
	if b, err := os.ReadFile(mnt + "/d/secret"); err == nil {
		t.Fatalf("read %q from outside the root through a swapped directory", b)
	}
	if err := os.WriteFile(mnt+"/d/planted", nil, 0o644); err == nil {
		t.Fatal("created a file outside the root through a swapped directory")
	}
	if _, err := os.Stat(outside + "/planted"); err == nil {
		t.Fatal("planted a file outside the root")
	}
}

// What the guest sees through an Overlay is what the workspace review
// computes from the upper dir it leaves (workspace.Scan + MergeUpper).
func TestFUSEOverlayUpperIsWhatReviewReads(t *testing.T) {
	lower, upper := t.TempDir(), t.TempDir()
	for _, d := range []string{"keep", "gone", "redo", "edit"} {
		must(t, os.MkdirAll(lower+"/"+d+"/sub", 0o755))
		must(t, os.WriteFile(lower+"/"+d+"/sub/f", []byte("lower "+d), 0o644))
		must(t, os.WriteFile(lower+"/"+d+"/top", []byte("top "+d), 0o644))
	}
	must(t, os.Symlink("keep/top", lower+"/link"))
	must(t, os.WriteFile(lower+"/h1", []byte("linked"), 0o644))
	must(t, os.Link(lower+"/h1", lower+"/h2"))
	lp, err := NewRealDir(lower)
	must(t, err)
	o, err := NewOverlay(ReadOnly(lp), upper)
	must(t, err)
	defer o.Close()
	mnt := serve(t, o, ServeOptions{})

	must(t, os.WriteFile(mnt+"/edit/top", []byte("edited"), 0o644)) // copy-up
	must(t, os.RemoveAll(mnt+"/gone"))                              // whiteouts
	must(t, os.RemoveAll(mnt+"/redo"))                              // deleted, then
	must(t, os.MkdirAll(mnt+"/redo/sub", 0o755))                    // made again: opaque
	must(t, os.WriteFile(mnt+"/redo/new", []byte("new"), 0o644))
	must(t, os.Rename(mnt+"/edit/sub/f", mnt+"/moved"))
	must(t, os.Remove(mnt+"/link"))
	must(t, os.Symlink("moved", mnt+"/link"))
	must(t, os.Chmod(mnt+"/keep/top", 0o600))
	for _, h := range []string{"/h1", "/h2"} { // open both before writing one
		if got := readFile(t, mnt+h); got != "linked" {
			t.Fatalf("%s: %q", h, got)
		}
	}
	must(t, os.WriteFile(mnt+"/h2", []byte("h2 only"), 0o644))
	if a, b := readFile(t, mnt+"/h1"), readFile(t, mnt+"/h2"); a != "linked" || b != "h2 only" {
		t.Fatalf("lower hard links after a write to one: h1 %q, h2 %q", a, b)
	}
	if b, _ := os.ReadFile(lower + "/edit/top"); string(b) != "top edit" {
		t.Fatalf("the lower changed: %q", b)
	}
	var st unix.Stat_t
	must(t, unix.Lstat(upper+"/gone", &st))
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Fatalf("upper/gone is not a whiteout: mode %o rdev %d", st.Mode, st.Rdev)
	}
	if err := unix.Rename(mnt+"/keep", mnt+"/kept"); !errors.Is(err, unix.EXDEV) {
		t.Fatalf("renaming a lower dir: %v, want EXDEV (as overlayfs)", err)
	}

	base, err := workspace.Scan(lower, workspace.ScanOptions{})
	must(t, err)
	up, err := workspace.Scan(upper, workspace.ScanOptions{Opaque: true})
	must(t, err)
	if !up["redo"].Opaque {
		t.Error("upper/redo is not marked opaque")
	}
	merged, _ := workspace.MergeUpper(base, up)
	seen, err := workspace.Scan(mnt, workspace.ScanOptions{})
	must(t, err)
	if len(merged) != len(seen) {
		t.Errorf("review sees %d entries, the guest %d", len(merged), len(seen))
	}
	for path, g := range seen {
		m, ok := merged[path]
		if !ok || m.Type != g.Type || m.SHA256 != g.SHA256 || m.Link != g.Link || m.Mode != g.Mode {
			t.Errorf("%s: guest sees %+v, review %+v", path, g, m)
		}
	}
	changes := workspace.Compare(base, merged, nil)
	t.Logf("review finds %d changes", len(changes))
}

// fakeGuest speaks raw FUSE to ServeStream over a stream socketpair.
func fakeGuest(t *testing.T, p Provider, o ServeOptions) (guest *os.File, done chan error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	must(t, err)
	// The host end is pollable, so ServeStream's Close interrupts its reads.
	unix.SetNonblock(fds[1], true)
	guest, host := os.NewFile(uintptr(fds[0]), "guest"), os.NewFile(uintptr(fds[1]), "host")
	done = make(chan error, 1)
	go func() { done <- ServeStream(context.Background(), host, p, o) }()
	t.Cleanup(func() { hangUp(guest) })
	return guest, done
}

// hangUp closes the guest's end even while a write to it is blocked.
func hangUp(guest *os.File) {
	if c, err := guest.SyscallConn(); err == nil {
		c.Control(func(fd uintptr) { unix.Shutdown(int(fd), unix.SHUT_RDWR) })
	}
	guest.Close()
}

func request(op uint32, unique, nodeid uint64, body []byte) []byte {
	b := make([]byte, inHeaderSize+len(body))
	binary.NativeEndian.PutUint32(b[0:], uint32(len(b)))
	binary.NativeEndian.PutUint32(b[4:], op)
	binary.NativeEndian.PutUint64(b[8:], unique)
	binary.NativeEndian.PutUint64(b[16:], nodeid)
	copy(b[inHeaderSize:], body)
	return b
}

func initRequest() []byte {
	body := make([]byte, 64) // fuse_init_in
	binary.NativeEndian.PutUint32(body[0:], 7)
	binary.NativeEndian.PutUint32(body[4:], 31)
	binary.NativeEndian.PutUint32(body[8:], 128<<10)
	return request(26, 1, 0, body)
}

func handshake(t *testing.T, guest *os.File) {
	if err := tryHandshake(guest); err != nil {
		t.Fatal(err)
	}
}

// tryHandshake is handshake returning the failure, for other goroutines
// than the test's.
func tryHandshake(guest *os.File) error {
	if _, err := guest.Write(initRequest()); err != nil {
		return err
	}
	m, err := newSplitter(guest, outHeaderSize, MaxMessage).next()
	if err != nil {
		return err
	}
	if e := int32(binary.NativeEndian.Uint32(m[4:])); e != 0 {
		return fmt.Errorf("INIT answered errno %d", -e)
	}
	return nil
}

func wantEnd(t *testing.T, done chan error, want error) {
	t.Helper()
	select {
	case err := <-done:
		if !errors.Is(err, want) {
			t.Fatalf("ServeStream: %v, want %v", err, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeStream did not end")
	}
}

func TestServeStreamRefusesGarbage(t *testing.T) {
	huge := make([]byte, 8)
	binary.NativeEndian.PutUint32(huge, 0xfffffff0)
	short := make([]byte, 8)
	binary.NativeEndian.PutUint32(short, 8)
	hugeRead := make([]byte, 40) // fuse_read_in with size 4 GiB - 1
	binary.NativeEndian.PutUint32(hugeRead[16:], 0xffffffff)
	hugeXattr := make([]byte, 8)
	binary.NativeEndian.PutUint32(hugeXattr, 0xffffffff)
	for name, b := range map[string][]byte{"huge length": huge, "below header": short,
		"read of 4 GiB": request(15, 2, 1, hugeRead), "getxattr of 4 GiB": request(22, 2, 1, append(hugeXattr, 'a', 0)),
		"over max write": request(16, 2, 1, make([]byte, DefaultMaxWrite+msgSlack))} {
		t.Run(name, func(t *testing.T) {
			guest, done := fakeGuest(t, NewMemory(0, 0), ServeOptions{})
			handshake(t, guest)
			guest.Write(b)
			wantEnd(t, done, ErrBadMessage)
		})
	}
	t.Run("reused request id", func(t *testing.T) {
		guest, done := fakeGuest(t, NewMemory(0, 0), ServeOptions{})
		handshake(t, guest)
		// Unanswered: nobody reads the replies, but two in flight with one id is enough.
		getattr := request(3, 7, 1, make([]byte, 16))
		guest.Write(append(getattr, getattr...))
		select {
		case err := <-done:
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("ServeStream: %v", err)
			}
		case <-time.After(2 * time.Second):
			// The first may have been answered before the second came: not a reuse.
			t.Skip("first request answered before the second arrived")
		}
	})
	t.Run("unknown node", func(t *testing.T) {
		// go-fuse panics on a node id it never gave out; the host survives
		// and the session ends.
		guest, done := fakeGuest(t, NewMemory(0, 0), ServeOptions{})
		handshake(t, guest)
		guest.Write(request(3, 2, 999, make([]byte, 16)))
		wantEnd(t, done, ErrBadMessage)
	})
	t.Run("context cancelled", func(t *testing.T) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		must(t, err)
		unix.SetNonblock(fds[1], true)
		guest, host := os.NewFile(uintptr(fds[0]), "guest"), os.NewFile(uintptr(fds[1]), "host")
		defer guest.Close()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- ServeStream(ctx, host, NewMemory(0, 0), ServeOptions{}) }()
		handshake(t, guest)
		cancel()
		wantEnd(t, done, context.Canceled)
	})
	t.Run("guest closes", func(t *testing.T) {
		guest, done := fakeGuest(t, NewMemory(0, 0), ServeOptions{})
		handshake(t, guest)
		hangUp(guest)
		wantEnd(t, done, nil)
	})
	t.Run("garbage instead of INIT", func(t *testing.T) {
		guest, done := fakeGuest(t, NewMemory(0, 0), ServeOptions{})
		guest.Write(request(3, 1, 1, make([]byte, 16)))
		wantEnd(t, done, ErrBadMessage)
	})
}

// TestAnEndedStreamSessionWritesNoMore: ServeStream closes its sockets
// when it returns, and the process's next sockets get their numbers; no
// part of the ended session may write to them then. Its waker (stopServer)
// once could, and a new session read its INTERRUPTs as the guest's first
// request (TestServeStreamRefusesGarbage's handshakes answered EAGAIN, 4
// runs in 300). Four sessions at a time, as ending one takes a few ticks.
func TestAnEndedStreamSessionWritesNoMore(t *testing.T) {
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range 30 {
				if err := endOneSession(t); err != nil {
					t.Errorf("session %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func endOneSession(t *testing.T) error {
	guest, done := fakeGuest(t, NewMemory(0, 0), ServeOptions{})
	if err := tryHandshake(guest); err != nil {
		return err
	}
	hangUp(guest)
	if err := <-done; err != nil {
		return fmt.Errorf("ServeStream: %w", err)
	}
	// The lowest free numbers, the session's among them.
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for range 3 {
		pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		if err != nil {
			return err
		}
		fds = append(fds, pair[:]...)
	}
	time.Sleep(time.Millisecond)
	for _, fd := range fds {
		if n, _, err := unix.Recvfrom(fd, make([]byte, 64), 0); err != unix.EAGAIN {
			return fmt.Errorf("a socket opened after it ended read %d bytes (%v)", n, err)
		}
	}
	return nil
}

// A guest that writes requests and never reads the replies fills its own
// queue: the host stops reading at MaxInFlight and its memory stays flat.
func TestServeStreamFloodIsBounded(t *testing.T) {
	guest, done := fakeGuest(t, NewMemory(0, 0), ServeOptions{MaxInFlight: 16})
	handshake(t, guest)
	// CREATE /f to get a file handle, then flood it with 128 KiB WRITEs.
	create := make([]byte, 16, 18) // fuse_create_in, then the name
	binary.NativeEndian.PutUint32(create[0:], unix.O_RDWR)
	binary.NativeEndian.PutUint32(create[4:], 0o644)
	_, err := guest.Write(request(35, 2, 1, append(create, 'f', 0)))
	must(t, err)
	m, err := newSplitter(guest, outHeaderSize, MaxMessage).next()
	must(t, err)
	if e := int32(binary.NativeEndian.Uint32(m[4:])); e != 0 || len(m) < outHeaderSize+128+8 {
		t.Fatalf("CREATE: errno %d, %d bytes", -e, len(m))
	}
	fh := binary.NativeEndian.Uint64(m[outHeaderSize+128:])

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var sent atomic.Int64
	write := request(16, 0, 0, make([]byte, 40+DefaultMaxWrite)) // fuse_write_in + data
	binary.NativeEndian.PutUint64(write[16:], 0)                 // nodeid set below
	go func() {
		for i := uint64(3); ; i++ {
			binary.NativeEndian.PutUint64(write[8:], i)
			binary.NativeEndian.PutUint64(write[16:], binary.NativeEndian.Uint64(m[outHeaderSize:])) // the new node
			binary.NativeEndian.PutUint64(write[inHeaderSize:], fh)
			binary.NativeEndian.PutUint32(write[inHeaderSize+16:], DefaultMaxWrite)
			if _, err := guest.Write(write); err != nil {
				return
			}
			sent.Add(1)
		}
	}()
	// Wait for the flood to stall (no request accepted for a second).
	var n1, n2 int64
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		n1 = sent.Load()
		time.Sleep(time.Second)
		if n2 = sent.Load(); n2 == n1 && n2 > 0 {
			break
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("flood: %d WRITEs of %d KiB accepted (%d MiB), then stalled (%d more in 1 s); host heap grew %d KiB",
		n2, len(write)>>10, n2*int64(len(write))>>20, n2-n1, grew>>10)
	select {
	case err := <-done:
		t.Fatalf("the session ended instead of pushing back: %v", err)
	default:
	}
	if n2 != n1 {
		t.Errorf("the host kept reading a guest that reads no replies (%d → %d)", n1, n2)
	}
	if grew > 64<<20 {
		t.Errorf("host heap grew %d MiB", grew>>20)
	}
	hangUp(guest)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("ServeStream did not end after the flooding guest went away")
	}
}
