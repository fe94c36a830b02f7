package vfs

import (
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/audit"
	"golang.org/x/sys/unix"
)

func TestHookRefusesAndAudits(t *testing.T) {
	var mu sync.Mutex
	var recs []audit.Record
	emit := func(r audit.Record) { mu.Lock(); recs = append(recs, r); mu.Unlock() }
	deny := func(e Event) error {
		if strings.HasPrefix(e.Path, "/secret") {
			return errors.New("secret path")
		}
		return nil
	}
	p := WithHook(NewMemory(0, 0), AuditHook("/workspace", emit, deny))
	f, err := p.Create("/a", unix.O_WRONLY, 0o644)
	must(t, err)
	f.Close()
	must(t, p.Rename("/a", "/b"))
	if _, err := p.Create("/secret", unix.O_WRONLY, 0o644); !errors.Is(err, unix.EACCES) {
		t.Fatalf("refused create: %v, want EACCES", err)
	}
	if _, err := p.Lstat("/b"); err != nil { // metadata reads are not hooked
		t.Fatal(err)
	}
	want := []string{"create /workspace/a allow", "rename /workspace/a allow", "create /workspace/secret deny"}
	if len(recs) != len(want) {
		t.Fatalf("records %+v", recs)
	}
	for i, r := range recs {
		if got := r.Op + " " + r.Path + " " + r.Decision; got != want[i] || r.Kind != audit.KindFile {
			t.Errorf("record %d: %q (%s), want %q", i, got, r.Kind, want[i])
		}
	}
	if recs[1].Extra["to"] != "/workspace/b" {
		t.Errorf("rename record: %+v", recs[1])
	}
}

func TestFUSEHookRefuses(t *testing.T) {
	p := WithHook(NewMemory(0, 0), func(e Event) error {
		if e.Op == OpWrite || e.Op == OpRemove {
			return errors.New("no")
		}
		return nil
	})
	mnt := serve(t, p, ServeOptions{})
	must(t, os.WriteFile(mnt+"/f", []byte("x"), 0o644)) // create is allowed
	wantErrno(t, os.WriteFile(mnt+"/f", []byte("y"), 0o644), unix.EACCES)
	wantErrno(t, os.Remove(mnt+"/f"), unix.EACCES)
	if got := readFile(t, mnt+"/f"); got != "x" {
		t.Fatalf("read %q", got)
	}
}

func TestMemoryBounds(t *testing.T) {
	m := NewMemory(1000, 3)
	f, err := m.Create("/a", unix.O_RDWR, 0o644)
	must(t, err)
	_, err = f.WriteAt(make([]byte, 1001), 0)
	wantErrno(t, err, unix.ENOSPC)
	_, err = f.WriteAt(make([]byte, 900), 0)
	must(t, err)
	// An unlinked file still open keeps its bytes counted.
	must(t, m.Remove("/a"))
	g, err := m.Create("/b", unix.O_RDWR, 0o644)
	must(t, err)
	_, err = g.WriteAt(make([]byte, 200), 0)
	wantErrno(t, err, unix.ENOSPC)
	f.Close()
	_, err = g.WriteAt(make([]byte, 200), 0)
	must(t, err)
	must(t, m.Mkdir("/d", 0o755))
	must(t, m.Mkdir("/e", 0o755))
	wantErrno(t, m.Mkdir("/f", 0o755), unix.ENOSPC)
}

func TestFUSEOwner(t *testing.T) {
	mnt := serve(t, NewMemory(0, 0), ServeOptions{Owner: &Owner{UID: 1000, GID: 1001}})
	must(t, os.WriteFile(mnt+"/f", nil, 0o644))
	must(t, os.Chown(mnt+"/f", 0, 0)) // ignored, not refused
	var st unix.Stat_t
	must(t, unix.Stat(mnt+"/f", &st))
	if st.Uid != 1000 || st.Gid != 1001 {
		t.Fatalf("owner %d:%d, want 1000:1001", st.Uid, st.Gid)
	}
}

// Host-side edits show through the guest's kept page cache once the
// attribute timeout has passed.
func TestFUSEHostEditsShow(t *testing.T) {
	root := t.TempDir()
	p, err := NewRealDir(root)
	must(t, err)
	defer p.Close()
	mnt := serve(t, p, ServeOptions{CacheTimeout: 100 * time.Millisecond})
	must(t, os.WriteFile(root+"/f", []byte("before"), 0o644))
	if got := readFile(t, mnt+"/f"); got != "before" {
		t.Fatalf("read %q", got)
	}
	time.Sleep(20 * time.Millisecond)                         // a later mtime
	must(t, os.WriteFile(root+"/f", []byte("after!"), 0o644)) // same size
	time.Sleep(300 * time.Millisecond)
	if got := readFile(t, mnt+"/f"); got != "after!" {
		t.Fatalf("read %q after a host edit", got)
	}
}
