package state

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestMain doubles as the helper child for crash tests: re-exec'd with
// STATE_TEST_ADOPT=<dir>, it adopts the sandbox via inherited fd 3, marks it
// running, says so, and waits to be killed.
func TestMain(m *testing.M) {
	if dir := os.Getenv("STATE_TEST_ADOPT"); dir != "" {
		h, err := Adopt(dir, 3)
		if err != nil {
			fmt.Println("adopt:", err)
			os.Exit(2)
		}
		if err := h.SetStatus(Status{State: Running}); err != nil {
			fmt.Println("status:", err)
			os.Exit(2)
		}
		if err := h.WriteRecord(Record{Backend: "test", Command: []string{"sleep"}}); err != nil {
			fmt.Println("record:", err)
			os.Exit(2)
		}
		fmt.Println("ok")
		time.Sleep(time.Hour)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func openStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s.tmp = t.TempDir()
	return s
}

func mustCreate(t *testing.T, s *Store, name string) *Handle {
	t.Helper()
	h, err := s.Create(name)
	if err != nil {
		t.Fatalf("Create(%q): %v", name, err)
	}
	t.Cleanup(func() { _ = h.Release() })
	return h
}

// fakeSandbox writes a sandbox dir by hand, to control ids and contents.
func fakeSandbox(t *testing.T, s *Store, id string, rec *Record, st *Status) string {
	t.Helper()
	dir := filepath.Join(s.sandboxes(), id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if rec != nil {
		if err := writeJSONAtomic(dir, recordFile, rec); err != nil {
			t.Fatal(err)
		}
	}
	if st != nil {
		if err := writeJSONAtomic(dir, statusFile, st); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestCreateListResolve(t *testing.T) {
	s := openStore(t)
	a := mustCreate(t, s, "alpha")
	time.Sleep(2 * time.Millisecond)
	b := mustCreate(t, s, "")
	if !validID(a.ID()) || !validID(b.ID()) || a.ID() == b.ID() {
		t.Fatalf("bad ids %q %q", a.ID(), b.ID())
	}
	fi, err := os.Stat(a.Dir())
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode: %v %v", fi, err)
	}
	if err := a.WriteRecord(Record{Backend: "landlock", Workspace: "/w", Command: []string{"sh"}}); err != nil {
		t.Fatal(err)
	}
	if err := a.SetStatus(Status{State: Running}); err != nil {
		t.Fatal(err)
	}

	l, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(l) != 2 || l[0].Record.ID != b.ID() || l[1].Record.ID != a.ID() {
		t.Fatalf("List not newest first: %+v", l)
	}
	if l[1].Status.State != Running || l[1].Record.Name != "alpha" || l[1].Record.Backend != "landlock" || l[1].Record.PID != os.Getpid() {
		t.Fatalf("entry a: %+v", l[1])
	}
	if l[0].Status.State != Creating {
		t.Fatalf("entry b: %+v", l[0])
	}
	if l[1].SocketPath() != a.SocketPath() || a.SocketPath() != filepath.Join(a.Dir(), "ctl.sock") {
		t.Fatalf("socket path %q vs %q", l[1].SocketPath(), a.SocketPath())
	}
	if l[1].LogPath() != a.LogPath() || l[1].Dir != a.Dir() {
		t.Fatalf("paths: %+v", l[1])
	}

	for _, ref := range []string{"alpha", a.ID(), a.ID()[:3], a.ID()[:8]} {
		e, err := s.Resolve(ref)
		if err != nil || e.Record.ID != a.ID() {
			t.Errorf("Resolve(%q) = %v, %v", ref, e.Record.ID, err)
		}
	}
	for _, ref := range []string{"", "nope", a.ID()[:2], a.ID() + "0"} {
		if _, err := s.Resolve(ref); !errors.Is(err, ErrNotFound) {
			t.Errorf("Resolve(%q): want ErrNotFound, got %v", ref, err)
		}
	}
}

func TestResolveAmbiguousAndPrecedence(t *testing.T) {
	s := openStore(t)
	st := &Status{State: Exited}
	fakeSandbox(t, s, "abc000000001", &Record{Name: "one"}, st)
	fakeSandbox(t, s, "abc000000002", &Record{Name: "abc"}, st)
	fakeSandbox(t, s, "abd000000003", &Record{Name: "abc000000001"}, st)

	_, err := s.Resolve("abc0")
	if !errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), "abc000000001 (one)") || !strings.Contains(err.Error(), "abc000000002 (abc)") {
		t.Fatalf("want ambiguous listing candidates, got %v", err)
	}
	// An exact name beats a prefix; an exact id beats a name.
	if e, err := s.Resolve("abc"); err != nil || e.Record.ID != "abc000000002" {
		t.Fatalf("Resolve(abc) = %v, %v", e.Record.ID, err)
	}
	if e, err := s.Resolve("abc000000001"); err != nil || e.Record.ID != "abc000000001" {
		t.Fatalf("Resolve(id) = %v, %v", e.Record.ID, err)
	}
	if e, err := s.Resolve("abd"); err != nil || e.Record.ID != "abd000000003" {
		t.Fatalf("Resolve(abd) = %v, %v", e.Record.ID, err)
	}
}

func TestNames(t *testing.T) {
	s := openStore(t)
	for _, n := range []string{"-x", ".x", "a/b", "../x", "a b", strings.Repeat("a", 64), "é"} {
		if _, err := s.Create(n); err == nil {
			t.Errorf("Create(%q) accepted an invalid name", n)
		}
	}
	mustCreate(t, s, strings.Repeat("a", 63))
	h := mustCreate(t, s, "web.1_x-y")
	if _, err := s.Create("web.1_x-y"); !errors.Is(err, ErrNameTaken) {
		t.Fatalf("want ErrNameTaken, got %v", err)
	}
	// Names stay taken while the sandbox exists, running or not.
	if err := h.SetStatus(Status{State: Exited}); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create("web.1_x-y"); !errors.Is(err, ErrNameTaken) {
		t.Fatalf("want ErrNameTaken after exit, got %v", err)
	}
	if err := s.Delete(h.ID()); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, "web.1_x-y")
	// The name given at Create cannot be changed by WriteRecord.
	if err := h.WriteRecord(Record{Name: "other"}); err == nil {
		t.Fatal("WriteRecord renamed a sandbox")
	}
}

func TestNameTakenConcurrent(t *testing.T) {
	s := openStore(t)
	const n = 20
	var (
		wg              sync.WaitGroup
		mu              sync.Mutex
		won, taken, bad int
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each goroutine gets its own Store, like separate processes would.
			s2, err := Open(s.root)
			if err != nil {
				t.Error(err)
				return
			}
			h, err := s2.Create("same")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
				t.Cleanup(func() { _ = h.Release() })
			case errors.Is(err, ErrNameTaken):
				taken++
			default:
				bad++
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if won != 1 || taken != n-1 || bad != 0 {
		t.Fatalf("won=%d taken=%d bad=%d", won, taken, bad)
	}
	l, _ := s.List()
	if len(l) != 1 {
		t.Fatalf("want 1 sandbox, got %d", len(l))
	}
}

// startAdopter hands h's lock to a re-exec'd child, as a detaching
// supervisor would, and returns the child once it has adopted.
func startAdopter(t *testing.T, h *Handle) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "STATE_TEST_ADOPT="+h.Dir())
	cmd.ExtraFiles = []*os.File{h.LockFile()}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "ok\n" {
		t.Fatalf("child: %q", line)
	}
	return cmd
}

func TestCrashDetection(t *testing.T) {
	s := openStore(t)
	h, err := s.Create("crashy")
	if err != nil {
		t.Fatal(err)
	}
	cmd := startAdopter(t, h)
	// Close, not Release: the child shares the lock's open file description.
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if h.LockFD() != -1 {
		t.Fatal("LockFD after Close")
	}

	e, err := s.Resolve("crashy")
	if err != nil {
		t.Fatal(err)
	}
	if e.Status.State != Running || e.Record.PID != cmd.Process.Pid || e.Record.Backend != "test" {
		t.Fatalf("live child: %+v", e)
	}
	if err := s.Delete(e.Record.ID); !errors.Is(err, ErrRunning) {
		t.Fatalf("Delete of running sandbox: %v", err)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	e, err = s.Resolve("crashy")
	if err != nil {
		t.Fatal(err)
	}
	if e.Status.State != Crashed || e.Status.Error == "" {
		t.Fatalf("after SIGKILL: %+v", e.Status)
	}
	// List corrects the view only; the file still says running for prune to see.
	var raw Status
	if err := readJSON(filepath.Join(e.Dir, statusFile), &raw); err != nil || raw.State != Running {
		t.Fatalf("status.json: %+v %v", raw, err)
	}
	if err := s.Delete(e.Record.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e.Dir); !os.IsNotExist(err) {
		t.Fatalf("dir left behind: %v", err)
	}
}

// flock(1) from util-linux holding the lock counts as alive, too: the lock
// is the protocol, not anything process-specific.
func TestCrashDetectionFlockTool(t *testing.T) {
	flockBin, err := exec.LookPath("flock")
	if err != nil {
		t.Skip("flock(1) not installed")
	}
	s := openStore(t)
	h := mustCreate(t, s, "")
	if err := h.SetStatus(Status{State: Running}); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(h.Dir(), "lock")
	cmd := exec.Command(flockBin, "-n", lock, "sh", "-c", "echo ok; exec sleep 3600")
	// Own process group: flock(1) forks the command, which inherits the lock.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killGroup := func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	t.Cleanup(func() { killGroup(); _ = cmd.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ok\n" {
		t.Fatalf("flock: %q", line)
	}
	e, err := s.Resolve(h.ID())
	if err != nil || e.Status.State != Running {
		t.Fatalf("held by flock(1): %+v %v", e.Status, err)
	}
	killGroup()
	_ = cmd.Wait()
	// The grandchild (sleep) may take a moment to be reaped by init.
	deadline := time.Now().Add(5 * time.Second)
	for {
		e, _ = s.Resolve(h.ID())
		if e.Status.State == Crashed || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if e.Status.State != Crashed {
		t.Fatalf("after SIGKILL: %+v", e.Status)
	}
}

func TestHeldLockIsRunningAndDeleteRefuses(t *testing.T) {
	s := openStore(t)
	h := mustCreate(t, s, "live")
	if err := h.SetStatus(Status{State: Running}); err != nil {
		t.Fatal(err)
	}
	e, err := s.Resolve("live")
	if err != nil || e.Status.State != Running {
		t.Fatalf("%+v %v", e, err)
	}
	if err := s.Delete(h.ID()); !errors.Is(err, ErrRunning) {
		t.Fatalf("want ErrRunning, got %v", err)
	}
	// Release with a non-final status: the sandbox now looks crashed.
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if e, _ := s.Resolve("live"); e.Status.State != Crashed {
		t.Fatalf("released while running: %+v", e.Status)
	}
	if err := s.Delete(h.ID()); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(h.ID()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Delete: %v", err)
	}
	for _, bad := range []string{"../../etc", "ABCDEF012345", "abc", ""} {
		if err := s.Delete(bad); !errors.Is(err, ErrNotFound) {
			t.Errorf("Delete(%q): %v", bad, err)
		}
	}
}

func TestExitedStatus(t *testing.T) {
	s := openStore(t)
	h := mustCreate(t, s, "")
	code := 3
	now := time.Now().UTC().Truncate(time.Second)
	if err := h.SetStatus(Status{State: Exited, ExitCode: &code, FinishedAt: &now}); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	e, err := s.Resolve(h.ID())
	if err != nil || e.Status.State != Exited || e.Status.ExitCode == nil || *e.Status.ExitCode != 3 || !e.Status.FinishedAt.Equal(now) {
		t.Fatalf("%+v %v", e.Status, err)
	}
	if err := h.SetStatus(Status{State: "bogus"}); err == nil {
		t.Fatal("accepted unknown state")
	}
}

func TestRemove(t *testing.T) {
	s := openStore(t)
	h, err := s.Create("gone")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(h.Dir()); !os.IsNotExist(err) {
		t.Fatalf("dir remains: %v", err)
	}
	if ents := Leftovers(s.root); len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
	if h.LockFD() != -1 {
		t.Fatal("lock still held")
	}
	if err := h.WriteRecord(Record{}); err == nil {
		t.Fatal("WriteRecord after Remove")
	}
	mustCreate(t, s, "gone") // the name is free again
}

func TestUnlistHidesAtOnceKeepsWhatIsAsked(t *testing.T) {
	s := openStore(t)
	h, err := s.Create("")
	if err != nil {
		t.Fatal(err)
	}
	listed := h.Dir()
	if err := h.SetStatus(Status{State: Running}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"workspace", "audit"} {
		if err := os.MkdirAll(filepath.Join(listed, d, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Unlist("workspace"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(listed); !os.IsNotExist(err) {
		t.Fatalf("the listed dir remains after Unlist: %v", err)
	}
	if es, err := s.List(); err != nil || len(es) != 0 {
		t.Fatalf("List after Unlist = %v, %v; want nothing", es, err)
	}
	if h.Dir() == listed {
		t.Fatal("Dir did not follow the rename")
	}
	if _, err := os.Stat(filepath.Join(h.Dir(), "workspace", "sub")); err != nil {
		t.Fatalf("a kept entry is gone: %v", err)
	}
	if h.LockFD() == -1 {
		t.Fatal("the lock went with Unlist")
	}
	if err := h.SetStatus(Status{State: Exited}); err == nil {
		t.Fatal("SetStatus after Unlist")
	}
	if err := h.Remove(); err != nil {
		t.Fatal(err)
	}
	if ents := Leftovers(s.root); len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
	if h.LockFD() != -1 {
		t.Fatal("lock still held")
	}
}

func TestAReservedSandboxAppearsOnlyOncePublished(t *testing.T) {
	s := openStore(t)
	h, err := s.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	if h.Published() {
		t.Fatal("a reserved handle says it is published")
	}
	if _, err := os.Lstat(h.Dir()); !os.IsNotExist(err) {
		t.Fatalf("Reserve made the directory: %v", err)
	}
	if es, err := s.List(); err != nil || len(es) != 0 {
		t.Fatalf("List before Publish = %v, %v; want nothing", es, err)
	}
	if err := h.Publish(&Record{Backend: "native", Command: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if r, err := h.ReadRecord(); err != nil || r.ID != h.ID() || r.Backend != "native" || r.PID != os.Getpid() || r.CreatedAt.IsZero() {
		t.Fatalf("the record Publish wrote = %+v, %v; want the one given, filled in", r, err)
	}
	if !h.Published() || h.LockFD() == -1 {
		t.Fatal("Publish left the handle unpublished or unlocked")
	}
	es, err := s.List()
	if err != nil || len(es) != 1 || es[0].Record.ID != h.ID() {
		t.Fatalf("List after Publish = %v, %v; want %s", es, err, h.ID())
	}
	if err := h.SetStatus(Status{State: Running}); err != nil {
		t.Fatal(err)
	}
	if err := h.Publish(nil); err != nil {
		t.Fatalf("a second Publish: %v", err)
	}
	if err := h.Remove(); err != nil {
		t.Fatal(err)
	}
	if ents := Leftovers(s.root); len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}

	// Never published: Remove has nothing to do, and Publish after it fails.
	u, err := s.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	if err := u.Remove(); err != nil {
		t.Fatalf("Remove of an unpublished handle: %v", err)
	}
	if err := u.Publish(nil); err == nil {
		t.Fatal("Publish after Remove succeeded")
	}
	if ents := Leftovers(s.root); len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
}

func TestCorruptAndPartial(t *testing.T) {
	s := openStore(t)
	sb := s.sandboxes()
	garbage := fakeSandbox(t, s, "000000000001", nil, nil)
	if err := os.WriteFile(filepath.Join(garbage, recordFile), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	badStatus := fakeSandbox(t, s, "000000000002", &Record{Name: "bs"}, nil)
	if err := os.WriteFile(filepath.Join(badStatus, statusFile), []byte(`{"state":`), 0o600); err != nil {
		t.Fatal(err)
	}
	old := fakeSandbox(t, s, "000000000003", nil, nil)
	past := time.Now().Add(-2 * time.Minute)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	fakeSandbox(t, s, "000000000004", nil, nil) // young: a create in progress
	fakeSandbox(t, s, "000000000005", &Record{Name: "weird"}, &Status{State: "zombie"})
	fakeSandbox(t, s, "000000000006", &Record{ID: "../../../etc", Name: "liar"}, &Status{State: Exited})
	// Not sandboxes: skipped silently.
	_ = os.Mkdir(filepath.Join(sb, "not-an-id"), 0o700)
	_ = os.Mkdir(filepath.Join(sb, ".new-000000000007"), 0o700)
	_ = os.WriteFile(filepath.Join(sb, "000000000008"), nil, 0o600)
	_ = os.Symlink(t.TempDir(), filepath.Join(sb, "000000000009"))

	l, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Entry{}
	for _, e := range l {
		got[e.Record.ID] = e
	}
	if len(got) != 6 {
		t.Fatalf("want 6 entries, got %v", got)
	}
	for _, id := range []string{"000000000001", "000000000002", "000000000003", "000000000005"} {
		if e := got[id]; e.Status.State != Crashed || e.Status.Error == "" {
			t.Errorf("%s: %+v", id, e.Status)
		}
	}
	if e := got["000000000004"]; e.Status.State != Creating {
		t.Errorf("young partial: %+v", e.Status)
	}
	if e := got["000000000006"]; e.Status.State != Exited || e.Record.Name != "liar" {
		t.Errorf("id from file must not override dir: %+v", e)
	}
	// Create tidies debris of crashed creates.
	mustCreate(t, s, "")
	if _, err := os.Stat(filepath.Join(sb, ".new-000000000007")); !os.IsNotExist(err) {
		t.Errorf(".new- leftover not cleaned: %v", err)
	}
}

func TestAtomicRecordWrites(t *testing.T) {
	s := openStore(t)
	h := mustCreate(t, s, "atom")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			cmd := make([]string, i%50)
			for j := range cmd {
				cmd[j] = strings.Repeat("x", 100)
			}
			if err := h.WriteRecord(Record{Backend: "b", Command: cmd, Config: json.RawMessage(`{"n":` + strconv.Itoa(i) + `}`)}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	path := filepath.Join(h.Dir(), recordFile)
	for range 500 {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var r Record
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("torn read: %v: %q", err, b)
		}
	}
	close(stop)
	wg.Wait()
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("record mode: %v %v", fi, err)
	}
	ents, _ := os.ReadDir(h.Dir())
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temp file left: %s", e.Name())
		}
	}
}

func TestLockIsCloexec(t *testing.T) {
	s := openStore(t)
	h := mustCreate(t, s, "")
	fl, err := fcntlGetfd(h.LockFD())
	if err != nil || fl&syscall.FD_CLOEXEC == 0 {
		t.Fatalf("lock fd flags %#x %v", fl, err)
	}
}

func fcntlGetfd(fd int) (int, error) {
	r, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

func TestAdoptRejectsWrongFD(t *testing.T) {
	s := openStore(t)
	h := mustCreate(t, s, "")
	other := mustCreate(t, s, "")
	if _, err := Adopt(h.Dir(), other.LockFD()); err == nil {
		t.Fatal("adopted with another sandbox's lock fd")
	}
	// A second, separately opened fd on the same lock cannot adopt a held sandbox.
	f, err := os.Open(filepath.Join(h.Dir(), "lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := Adopt(h.Dir(), int(f.Fd())); !errors.Is(err, ErrRunning) {
		t.Fatalf("want ErrRunning, got %v", err)
	}
	if _, err := Adopt(t.TempDir(), int(f.Fd())); err == nil {
		t.Fatal("adopted a non-sandbox dir")
	}
}

func TestLongSocketPathFallback(t *testing.T) {
	base := t.TempDir()
	deep := filepath.Join(base, strings.Repeat("d", 60), strings.Repeat("e", 60))
	s, err := Open(deep)
	if err != nil {
		t.Fatal(err)
	}
	s.tmp = t.TempDir()
	h := mustCreate(t, s, "deep")
	sock := h.SocketPath()
	if len(filepath.Join(h.Dir(), "ctl.sock")) <= maxSocketPath {
		t.Fatal("test path not long enough")
	}
	want := filepath.Join(s.tmp, fmt.Sprintf("airlock-%d", os.Geteuid()), "s", h.ID()+".sock")
	if sock != want {
		t.Fatalf("socket %q, want %q", sock, want)
	}
	fi, err := os.Lstat(filepath.Dir(sock))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("fallback dir: %v %v", fi, err)
	}
	e, err := s.Resolve("deep")
	if err != nil || e.SocketPath() != sock {
		t.Fatalf("Entry.SocketPath %q, want %q (%v)", e.SocketPath(), sock, err)
	}
	// A Reserved sandbox has its socket path before its directory exists,
	// and Publish records the same one.
	r, err := s.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	rwant := filepath.Join(s.tmp, fmt.Sprintf("airlock-%d", os.Geteuid()), "s", r.ID()+".sock")
	if r.SocketPath() != rwant {
		t.Fatalf("reserved socket %q, want %q", r.SocketPath(), rwant)
	}
	if err := r.Publish(nil); err != nil {
		t.Fatal(err)
	}
	if e, err := s.Resolve(r.ID()); err != nil || e.SocketPath() != rwant || r.SocketPath() != rwant {
		t.Fatalf("published: Entry.SocketPath %q, handle %q, want %q (%v)", e.SocketPath(), r.SocketPath(), rwant, err)
	}
	if err := r.Remove(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatalf("bind fallback socket: %v", err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(h.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Fatalf("fallback socket not removed by Delete: %v", err)
	}

	// A planted fallback dir makes Create fail cleanly, leaving nothing.
	s.tmp = t.TempDir()
	if err := os.Symlink(t.TempDir(), filepath.Join(s.tmp, fmt.Sprintf("airlock-%d", os.Geteuid()))); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create("deep2"); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("want symlink refusal, got %v", err)
	}
	if l, _ := s.List(); len(l) != 0 {
		t.Fatalf("left behind: %+v", l)
	}
}

func TestRootPrecedence(t *testing.T) {
	tmp := t.TempDir()
	home := t.TempDir()
	xdg := t.TempDir()
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	check := func(want string) {
		t.Helper()
		got, err := rootFrom(getenv, tmp)
		if err != nil || got != want {
			t.Fatalf("env %v: got %q, %v; want %q", env, got, err, want)
		}
	}
	fallback := filepath.Join(tmp, fmt.Sprintf("airlock-%d", os.Geteuid()))

	check(fallback) // nothing set
	env["HOME"] = home
	check(filepath.Join(home, ".local/state/airlock"))
	env["XDG_STATE_HOME"] = "relative/ignored"
	check(filepath.Join(home, ".local/state/airlock"))
	env["XDG_STATE_HOME"] = xdg
	check(filepath.Join(xdg, "airlock"))
	env["AIRLOCK_STATE_DIR"] = "/some/explicit"
	check("/some/explicit")
	delete(env, "AIRLOCK_STATE_DIR")
	delete(env, "XDG_STATE_HOME")

	// HOME unusable: a file, not a dir (fails even for root).
	f := filepath.Join(t.TempDir(), "file")
	_ = os.WriteFile(f, nil, 0o600)
	env["HOME"] = f
	check(fallback)
	fi, err := os.Lstat(fallback)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("fallback dir: %v %v", fi, err)
	}

	// HOME exists but is not writable by us (nobody with HOME=/root).
	if os.Geteuid() != 0 {
		ro := t.TempDir()
		_ = os.Chmod(ro, 0o500)
		t.Cleanup(func() { _ = os.Chmod(ro, 0o700) })
		env["HOME"] = ro
		check(fallback)
		env["HOME"] = "/root"
		check(fallback)
	}

	// The real Root reads the real environment.
	t.Setenv("AIRLOCK_STATE_DIR", xdg)
	if r, err := Root(); err != nil || r != xdg {
		t.Fatalf("Root() = %q, %v", r, err)
	}
}

func TestRootFallbackRefusesUntrusted(t *testing.T) {
	name := fmt.Sprintf("airlock-%d", os.Geteuid())
	env := func(string) string { return "" }

	// Symlink to a perfectly good dir of ours: still refused.
	tmp := t.TempDir()
	target := filepath.Join(t.TempDir(), "t")
	_ = os.Mkdir(target, 0o700)
	_ = os.Symlink(target, filepath.Join(tmp, name))
	if _, err := rootFrom(env, tmp); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("symlink: %v", err)
	}

	// Too-open mode.
	tmp = t.TempDir()
	_ = os.Mkdir(filepath.Join(tmp, name), 0o700)
	_ = os.Chmod(filepath.Join(tmp, name), 0o777)
	if _, err := rootFrom(env, tmp); err == nil || !strings.Contains(err.Error(), "mode") {
		t.Fatalf("mode: %v", err)
	}

	// A plain file.
	tmp = t.TempDir()
	_ = os.WriteFile(filepath.Join(tmp, name), nil, 0o600)
	if _, err := rootFrom(env, tmp); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("file: %v", err)
	}

	// Owned by someone else.
	if os.Geteuid() == 0 {
		tmp = t.TempDir()
		d := filepath.Join(tmp, name)
		_ = os.Mkdir(d, 0o700)
		if err := os.Chown(d, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := rootFrom(env, tmp); err == nil || !strings.Contains(err.Error(), "owned by") {
			t.Fatalf("foreign owner: %v", err)
		}
	} else if err := secureDir("/root"); err == nil || !strings.Contains(err.Error(), "owned by") {
		// Unprivileged: a root-owned 0700 dir stands in for a planted one.
		t.Fatalf("foreign owner: %v", err)
	}
}

// countReads counts the files readJSON opens until the test ends.
func countReads(t *testing.T) *int {
	t.Helper()
	n := new(int)
	var mu sync.Mutex
	readFile = func(p string) ([]byte, error) {
		mu.Lock()
		*n++
		mu.Unlock()
		return readStateFile(p)
	}
	t.Cleanup(func() { readFile = readStateFile })
	return n
}

func TestLookupsReadOnlyTheSandboxTheyReturn(t *testing.T) {
	s := openStore(t)
	const n = 300
	st := &Status{State: Exited}
	for i := range n {
		fakeSandbox(t, s, fmt.Sprintf("%012x", 0x100000+i), &Record{Name: fmt.Sprintf("sb-%d", i)}, st)
	}
	// The first lookup builds the name index of a state dir that had none.
	if e, err := s.Resolve("sb-7"); err != nil || e.Record.ID != fmt.Sprintf("%012x", 0x100007) {
		t.Fatalf("Resolve(sb-7) = %v, %v", e.Record.ID, err)
	}
	h := mustCreate(t, s, "live")
	if err := h.SetStatus(Status{State: Running}); err != nil {
		t.Fatal(err)
	}
	reads := countReads(t)
	for _, c := range []struct{ ref, want string }{
		{"sb-250", fmt.Sprintf("%012x", 0x100000+250)},
		{fmt.Sprintf("%012x", 0x100000+99), fmt.Sprintf("%012x", 0x100000+99)},
		{"live", h.ID()},
		{h.ID()[:6], h.ID()},
	} {
		*reads = 0
		e, err := s.Resolve(c.ref)
		if err != nil || e.Record.ID != c.want {
			t.Errorf("Resolve(%q) = %v, %v; want %s", c.ref, e.Record.ID, err, c.want)
		}
		// One record and one status, of the sandbox found.
		if *reads > 2 {
			t.Errorf("Resolve(%q) read %d files among %d sandboxes", c.ref, *reads, n+1)
		}
	}
	*reads = 0
	if _, err := s.Create("sb-3"); !errors.Is(err, ErrNameTaken) {
		t.Fatalf("Create of a taken name: %v", err)
	}
	if *reads > 1 {
		t.Errorf("Create checked the name with %d reads among %d sandboxes", *reads, n+1)
	}
	if _, err := s.Resolve("sb-none"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Resolve of an unknown name: %v", err)
	}
}

func TestAStaleNameLinkNamesNothing(t *testing.T) {
	s := openStore(t)
	h := mustCreate(t, s, "old")
	other := mustCreate(t, s, "other")
	if err := h.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(s.names(), "old")); !os.IsNotExist(err) {
		t.Fatalf("Remove left the name's link: %v", err)
	}
	// A crash between removal and unlinking, or a tampered link: the link
	// points at a sandbox that is gone, or at one with another name.
	for _, target := range []string{h.ID(), other.ID()} {
		if err := os.Symlink(target, filepath.Join(s.names(), "stale")); err != nil {
			t.Fatal(err)
		}
		if e, err := s.Resolve("stale"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("a link to %s resolved: %+v, %v", target, e, err)
		}
		n := mustCreate(t, s, "stale")
		if e, err := s.Resolve("stale"); err != nil || e.Record.ID != n.ID() {
			t.Fatalf("Resolve after re-Create = %v, %v", e.Record.ID, err)
		}
		n.Release()
		if err := s.Delete(n.ID()); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(s.names(), "stale")); !os.IsNotExist(err) {
			t.Fatalf("Delete left the name's link: %v", err)
		}
	}
}

func TestListOverManySandboxes(t *testing.T) {
	s := openStore(t)
	const n = 1000
	base := time.Now().UTC().Add(-time.Hour)
	code := 0
	for i := range n {
		rec := &Record{Name: fmt.Sprintf("n%d", i), CreatedAt: base.Add(time.Duration(i) * time.Second), Command: []string{"true"}}
		fakeSandbox(t, s, fmt.Sprintf("%012x", 0xa00000+i), rec, &Status{State: Exited, ExitCode: &code})
	}
	live := mustCreate(t, s, "live")
	if err := live.SetStatus(Status{State: Running}); err != nil {
		t.Fatal(err)
	}
	l, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(l) != n+1 || l[0].Record.ID != live.ID() || l[0].Status.State != Running {
		t.Fatalf("want %d entries, the live one first: %d, %+v", n+1, len(l), l[0])
	}
	for i, e := range l[1:] {
		want := fmt.Sprintf("%012x", 0xa00000+n-1-i)
		if e.Record.ID != want || e.Record.Name != fmt.Sprintf("n%d", n-1-i) || e.Status.State != Exited {
			t.Fatalf("entry %d = %s %q %s, want %s", i+1, e.Record.ID, e.Record.Name, e.Status.State, want)
		}
	}
}

// A state dir where no index can be made (one this user may only read; here
// a file where the index's directory would go) still resolves names.
func TestResolveByNameWithoutAnIndexReadsTheRecords(t *testing.T) {
	s := openStore(t)
	fakeSandbox(t, s, "abc000000001", &Record{Name: "old"}, &Status{State: Exited})
	if err := os.WriteFile(s.names(), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if e, err := s.Resolve("old"); err != nil || e.Record.ID != "abc000000001" {
		t.Fatalf("Resolve(old) = %v, %v", e.Record.ID, err)
	}
}

// A removed sandbox's directory waits, emptied, for the next one: what a
// sandbox wrote never reaches the next, only the directories it named for
// reuse stay (emptied), at most spareSlots wait, and a spare that is not a
// private directory of the store's is not taken.
func TestARemovedSandboxsDirectoryIsReusedEmpty(t *testing.T) {
	s := openStore(t)
	var hs []*Handle
	for range spareSlots + 2 {
		h := mustCreate(t, s, "")
		for _, d := range []string{"workspace", "memws"} { // memws: made with an exclusive mkdir
			if err := os.MkdirAll(filepath.Join(h.Dir(), d, "sub"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(h.Dir(), d, "secret"), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		hs = append(hs, h)
	}
	var inodes []uint64
	for _, h := range hs {
		fi, err := os.Stat(h.Dir())
		if err != nil {
			t.Fatal(err)
		}
		inodes = append(inodes, fi.Sys().(*syscall.Stat_t).Ino)
		if err := h.Remove("workspace"); err != nil {
			t.Fatal(err)
		}
	}
	if l := Leftovers(s.root); len(l) != 0 {
		t.Fatalf("left behind: %v", l)
	}
	spares, _ := filepath.Glob(filepath.Join(s.sandboxes(), sparePrefix+"*"))
	if len(spares) != spareSlots {
		t.Fatalf("want %d spares, got %v", spareSlots, spares)
	}
	for _, sp := range spares {
		if ents, err := os.ReadDir(sp); err != nil || len(ents) != 1 || ents[0].Name() != "workspace" {
			t.Fatalf("spare %s holds %v (%v); want its emptied workspace dir only", sp, ents, err)
		}
	}

	h := mustCreate(t, s, "")
	fi, err := os.Stat(h.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(inodes, fi.Sys().(*syscall.Stat_t).Ino) {
		t.Fatal("a new sandbox did not take a spare (the positive control)")
	}
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("a spare taken has mode %v", fi.Mode())
	}
	if err := os.Mkdir(filepath.Join(h.Dir(), "memws"), 0o755); err != nil {
		t.Fatalf("a directory not named for reuse is still there: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(h.Dir(), "workspace")); len(ents) != 0 {
		t.Fatalf("a sandbox found what the last one wrote: %v", ents)
	}
	if es, err := s.List(); err != nil || len(es) != 1 || es[0].Record.ID != h.ID() {
		t.Fatalf("List = %v, %v; want only %s (spares are no sandboxes)", es, err, h.ID())
	}
	if err := h.Remove(); err != nil {
		t.Fatal(err)
	}

	// Spares that are not as retire leaves them: a symlink, a directory
	// others may enter. Neither is taken; each is removed instead.
	for _, sp := range spares {
		os.RemoveAll(sp)
	}
	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, spareName(s.sandboxes(), 0)); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(spareName(s.sandboxes(), 1), 0o755); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		h := mustCreate(t, s, "")
		if fi, err := os.Lstat(h.Dir()); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Fatalf("a sandbox's directory: %v, %v", fi, err)
		}
	}
	if _, err := os.Stat(elsewhere); err != nil {
		t.Fatalf("the symlink's target went: %v", err)
	}
	if l := Leftovers(s.root); len(l) != 2 {
		t.Fatalf("want the two sandboxes and nothing else, got %v", l)
	}
}

// Create looks for debris at most once per leftoverAge (reading the whole
// sandboxes dir costs more the more sandboxes are kept), and then finds it;
// a stale .new- dir of the id it picks does not fail it meanwhile.
func TestCreateLooksForDebrisOncePerLeftoverAge(t *testing.T) {
	s := openStore(t)
	mustCreate(t, s, "") // looks, and marks when
	debris := filepath.Join(s.sandboxes(), newPrefix+"000000000007")
	if err := os.Mkdir(debris, 0o700); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, "")
	if _, err := os.Stat(debris); err != nil {
		t.Fatalf("a Create within leftoverAge of the last look looked again: %v", err)
	}
	past := time.Now().Add(-2 * leftoverAge)
	if err := os.Chtimes(filepath.Join(s.root, cleanedMark), past, past); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, "")
	if _, err := os.Stat(debris); !os.IsNotExist(err) {
		t.Fatalf("debris stays after a Create past leftoverAge: %v", err)
	}

	// Debris by the very name a Create picks: made again, not failed.
	h, err := s.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(s.sandboxes(), newPrefix+h.ID())
	if err := os.MkdirAll(filepath.Join(stale, "old"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := h.Publish(nil); err != nil {
		t.Fatalf("Publish over a stale .new- dir of its id: %v", err)
	}
	if _, err := os.Stat(filepath.Join(h.Dir(), "old")); !os.IsNotExist(err) {
		t.Fatalf("the sandbox's directory holds the debris': %v", err)
	}
	if err := h.Remove(); err != nil {
		t.Fatal(err)
	}
}
