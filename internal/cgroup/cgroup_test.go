package cgroup

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/testutil"
)

const hogEnv = "AIRLOCK_CGROUP_TEST_HOG"

// TestMain doubles as a memory hog: a re-exec of the test binary that waits for one byte on
// stdin (so the test can move it into a group first), then touches 200 MiB.
func TestMain(m *testing.M) {
	if os.Getenv(hogEnv) == "1" {
		var b [1]byte
		_, _ = os.Stdin.Read(b[:])
		buf := make([]byte, 200<<20)
		for i := 0; i < len(buf); i += 4096 {
			buf[i] = 1
		}
		runtime.KeepAlive(buf)
		fmt.Println("hog survived")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// newGroup creates a group for the test and removes it afterwards; it skips when this user
// has no writable cgroup, or when a limit the test needs is not enforced here.
func newGroup(t *testing.T, l Limits, need ...string) *Group {
	t.Helper()
	name := fmt.Sprintf("airlock-test-%d-%s", os.Getpid(), strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()))
	g, err := New(name, l)
	if errors.Is(err, ErrUnavailable) {
		if w := writableOwnDirs(t); len(w) > 0 {
			t.Fatalf("New: %v, though this user may write %v", err, w)
		}
		t.Skipf("no writable cgroup: %v", err)
	}
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := g.Destroy(); err != nil {
			t.Errorf("Destroy: %v", err)
		}
		for _, p := range g.Paths() {
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s still exists after Destroy (stat: %v)", p, err)
			}
		}
	})
	for _, c := range need {
		for _, u := range g.Unenforced() {
			if u == c {
				t.Skipf("no writable cgroup: limit %s is not enforced here (%s)", c, Probe().Reason)
			}
		}
	}
	return g
}

// startInGroup starts a command that blocks until released, moves it into g, and returns a
// release function; the command is killed and reaped at cleanup.
func startInGroup(t *testing.T, g *Group, cmd *exec.Cmd) (release func()) {
	t.Helper()
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatalf("Add: %v", err)
	}
	return func() {
		_, _ = in.Write([]byte("go\n"))
		_ = in.Close()
	}
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// writableOwnDirs are the cgroups of this process this user may make
// children in: what decides, from the environment, whether New must work.
func writableOwnDirs(t *testing.T) []string {
	t.Helper()
	var w []string
	for _, d := range ownDirs(t) {
		if unix.Access(d, unix.W_OK) == nil {
			w = append(w, d)
		}
	}
	return w
}

func ownDirs(t *testing.T) []string {
	t.Helper()
	lay, err := discover()
	if err != nil {
		t.Fatal(err)
	}
	var own []string
	for _, d := range lay.v1 {
		own = append(own, d)
	}
	if lay.v2 != "" {
		own = append(own, lay.v2)
	}
	return own
}

func TestParseLayout(t *testing.T) {
	hybrid := `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 /docker/abc /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/sys\040temd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	proc := `9:name=systemd:/
8:pids:/docker/abc/x
4:memory:/process_api/h
1:cpu,cpuacct:/
0::/
`
	lay := buildLayout(parseMountinfo([]byte(hybrid)), []byte(proc))
	want := map[string]string{
		"memory": "/sys/fs/cgroup/memory/process_api/h",
		"cpu":    "/sys/fs/cgroup/cpu,cpuacct",
		"pids":   "/sys/fs/cgroup/pids/x",
	}
	for c, d := range want {
		if lay.v1[c] != d {
			t.Errorf("v1[%s] = %q, want %q", c, lay.v1[c], d)
		}
	}
	if lay.v2 != "/sys/fs/cgroup/unified" {
		t.Errorf("v2 = %q", lay.v2)
	}
	if !slices.Contains(lay.own, "/sys/fs/cgroup/sys temd") || len(lay.own) != 5 {
		t.Errorf("own = %v, want every hierarchy incl. name=systemd", lay.own)
	}
	if !lay.roots["/sys/fs/cgroup/sys temd"] {
		t.Errorf("escaped mount point not decoded: %v", lay.roots)
	}

	pure := "25 20 0:22 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
	lay = buildLayout(parseMountinfo([]byte(pure)), []byte("0::/user.slice/user-1000.slice/session-2.scope\n"))
	if lay.v2 != "/sys/fs/cgroup/user.slice/user-1000.slice/session-2.scope" || len(lay.v1) != 0 {
		t.Errorf("pure v2: v2=%q v1=%v", lay.v2, lay.v1)
	}

	// Outside our cgroup namespace or our mounts: unusable, never escaped from.
	lay = buildLayout(parseMountinfo([]byte(pure)), []byte("0::/../../evil\n"))
	if lay.v2 != "" || !strings.Contains(lay.v2Why, "namespace") {
		t.Errorf("dotdot: v2=%q why=%q", lay.v2, lay.v2Why)
	}
	lay = buildLayout(parseMountinfo([]byte(hybrid)), []byte("8:pids:/elsewhere\n"))
	if _, ok := lay.v1["pids"]; ok || lay.missing["pids"] == "" {
		t.Errorf("pids outside mount root resolved: %v", lay.v1)
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	for _, name := range []string{"", ".", "..", "a/b", "../x"} {
		if _, err := New(name, Limits{}); err == nil || errors.Is(err, ErrUnavailable) {
			t.Errorf("New(%q) = %v, want invalid name", name, err)
		}
	}
	for _, l := range []Limits{{MemoryBytes: -1}, {CPUs: -1}, {Pids: -1}} {
		if _, err := New("airlock-x", l); err == nil || errors.Is(err, ErrUnavailable) {
			t.Errorf("New(%+v) = %v, want invalid limits", l, err)
		}
	}
}

func TestProbe(t *testing.T) {
	s := Probe()
	t.Logf("Probe: %+v", s)
	if s.Version < 0 || s.Version > 2 {
		t.Errorf("Version = %d", s.Version)
	}
	if !(s.Memory && s.CPU && s.Pids) && s.Reason == "" {
		t.Error("some limit unsupported but Reason is empty")
	}
}

// TestNewUnprivileged checks that a user without a writable cgroup gets ErrUnavailable.
func TestNewUnprivileged(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("runs as non-root (TestAsNobody re-runs it that way)")
	}
	writable := writableOwnDirs(t)
	g, err := New(fmt.Sprintf("airlock-test-%d-unpriv", os.Getpid()), Limits{MemoryBytes: 64 << 20, CPUs: 1, Pids: 64})
	if err != nil {
		if !errors.Is(err, ErrUnavailable) || len(writable) > 0 {
			t.Fatalf("New: %v; this user may write %v: want ErrUnavailable exactly when none", err, writable)
		}
		t.Logf("as uid %d: %v", os.Geteuid(), err)
		return
	}
	if len(writable) == 0 {
		t.Fatalf("New succeeded as uid %d, though no cgroup of this process is writable", os.Geteuid())
	}
	t.Logf("as uid %d: delegated cgroup usable, unenforced %v", os.Geteuid(), g.Unenforced())
	if err := g.Destroy(); err != nil {
		t.Fatal(err)
	}
}

// TestAsNobody re-runs the unprivileged tests as uid 65534.
func TestAsNobody(t *testing.T) {
	testutil.RerunAsNobody(t, testutil.Nobody{Run: "^(TestNewUnprivileged|TestProbe|TestAdd|TestPidsEnforced)$"})
}

func TestNewWritesLimits(t *testing.T) {
	g := newGroup(t, Limits{MemoryBytes: 64 << 20, CPUs: 1.5, Pids: 50})
	if len(g.Unenforced()) > 0 {
		t.Logf("unenforced here: %v", g.Unenforced())
	}
	own := ownDirs(t)
	for _, p := range g.Paths() {
		parentOK := false
		for _, o := range own {
			parentOK = parentOK || filepath.Dir(p) == o
		}
		if !parentOK {
			t.Errorf("%s is not directly under this process's cgroups %v", p, own)
		}
	}
	check := func(c, file, want string) {
		t.Helper()
		dir, ok := g.ctrl[c]
		if !ok {
			return // unenforced, logged above
		}
		if got := readTrim(t, filepath.Join(dir, file)); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
	if g.Version() == 1 {
		check("memory", "memory.limit_in_bytes", "67108864")
		if _, err := os.Stat(filepath.Join(g.ctrl["memory"], "memory.memsw.limit_in_bytes")); err == nil {
			check("memory", "memory.memsw.limit_in_bytes", "67108864")
		}
		check("cpu", "cpu.cfs_period_us", "100000")
		check("cpu", "cpu.cfs_quota_us", "150000")
	} else {
		check("memory", "memory.max", "67108864")
		if _, err := os.Stat(filepath.Join(g.ctrl["memory"], "memory.swap.max")); err == nil {
			check("memory", "memory.swap.max", "0")
		}
		check("memory", "memory.oom.group", "1")
		check("cpu", "cpu.max", "150000 100000")
	}
	check("pids", "pids.max", "50")
}

func TestCPUHalf(t *testing.T) {
	g := newGroup(t, Limits{CPUs: 0.5}, "cpu")
	if g.Version() == 1 {
		if got := readTrim(t, filepath.Join(g.ctrl["cpu"], "cpu.cfs_quota_us")); got != "50000" {
			t.Errorf("cpu.cfs_quota_us = %q, want 50000", got)
		}
	} else if got := readTrim(t, filepath.Join(g.ctrl["cpu"], "cpu.max")); got != "50000 100000" {
		t.Errorf("cpu.max = %q, want \"50000 100000\"", got)
	}
}

func TestAdd(t *testing.T) {
	g := newGroup(t, Limits{Pids: 100})
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatalf("Add: %v", err)
	}
	for _, p := range g.Paths() {
		pids, err := readPids(p)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, pid := range pids {
			found = found || pid == cmd.Process.Pid
		}
		if !found {
			t.Errorf("pid %d not in %s/cgroup.procs (%v)", cmd.Process.Pid, p, pids)
		}
	}
}

func TestPidsEnforced(t *testing.T) {
	g := newGroup(t, Limits{Pids: 5}, "pids")
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	// The shell itself is one pid, so at most four sleeps fit; "started" counts the forks.
	cmd := exec.Command("sh", "-c", `read x
i=0
while [ $i -lt 10 ]; do sleep 30 </dev/null >/dev/null 2>&1 & echo started; i=$((i+1)); done
wait`)
	cmd.Stdout, cmd.Stderr = out, out
	startInGroup(t, g, cmd)()

	// Wait for the kernel to refuse a fork (pids.events "max"); shells that retry forks keep going.
	events := filepath.Join(g.ctrl["pids"], "pids.events")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if n, _ := readKey(events, "max"); n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no fork was refused within 10s; %s: %s", events, readTrim(t, events))
		}
		time.Sleep(20 * time.Millisecond)
	}
	pids, err := readPids(g.ctrl["pids"])
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) > 5 {
		t.Errorf("%d processes in a group limited to 5: %v", len(pids), pids)
	}
	if err := g.Destroy(); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	_ = cmd.Wait()
	b, _ := os.ReadFile(out.Name())
	if n := strings.Count(string(b), "started"); n >= 10 {
		t.Errorf("all %d sleeps started despite pids.max=5; output:\n%s", n, b)
	}
	t.Logf("shell output:\n%s", b)
}

func TestMemoryEnforced(t *testing.T) {
	g := newGroup(t, Limits{MemoryBytes: 32 << 20}, "memory")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run", "^$")
	cmd.Env = append(os.Environ(), hogEnv+"=1")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	startInGroup(t, g, cmd)()
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("hog exited with %v, want killed; output: %s", err, out.String())
	}
	ws := ee.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("hog ended with %v, want SIGKILL by the OOM killer; output: %s", err, out.String())
	}
	if !g.OOMKilled() {
		t.Error("OOMKilled() = false after the hog was OOM-killed")
	}
}

func TestOOMKilledFalseWhenIdle(t *testing.T) {
	g := newGroup(t, Limits{MemoryBytes: 64 << 20}, "memory")
	if g.OOMKilled() {
		t.Error("OOMKilled() = true for an idle group")
	}
}

func TestDestroy(t *testing.T) {
	g := newGroup(t, Limits{Pids: 64})
	cmd := exec.Command("sh", "-c", "read x; sleep 30 & sleep 30 & wait")
	startInGroup(t, g, cmd)()
	// Let the shell fork its sleeps so Destroy has more than one process to kill.
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids, _ := readPids(g.Paths()[0])
		if len(pids) >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := g.Destroy(); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("shell ended with %v, want killed", err)
	}
	for _, p := range g.Paths() {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists", p)
		}
	}
	if err := g.Destroy(); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
}

// A group left by a process that died before removing it (its supervisor
// was killed) does not stop the next one of that name: it is made again.
func TestNewReplacesAnEmptyLeftover(t *testing.T) {
	first := newGroup(t, Limits{Pids: 64})
	name := filepath.Base(first.Paths()[0])
	g, err := New(name, Limits{Pids: 64})
	if err != nil {
		t.Fatalf("New over an empty leftover: %v", err)
	}
	if err := g.Destroy(); err != nil {
		t.Fatal(err)
	}
	// One that still holds a process is not a leftover.
	again := newGroup(t, Limits{Pids: 64})
	cmd := exec.Command("sh", "-c", "read x")
	startInGroup(t, again, cmd) // never released: sh waits in its group
	if _, err := New(filepath.Base(again.Paths()[0]), Limits{Pids: 64}); err == nil {
		t.Error("New replaced a group that holds a process")
	}
}

func TestRemove(t *testing.T) {
	g := newGroup(t, Limits{Pids: 64, MemoryBytes: 64 << 20})
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	// As after a crash: only the recorded paths are left.
	paths := g.Paths()
	if err := Remove(paths); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("sleep ended with %v, want killed", err)
	}
	for _, p := range paths {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists", p)
		}
	}
	if err := Remove(paths); err != nil {
		t.Errorf("Remove of gone paths: %v", err)
	}
}

// TestRemoveRefuses checks the guards only (checkStale kills nothing): a bad recorded path
// must never lead to killing the caller or the whole machine.
func TestRemoveRefuses(t *testing.T) {
	if err := Remove([]string{t.TempDir()}); err == nil || !strings.Contains(err.Error(), "not on a cgroup") {
		t.Errorf("Remove(tempdir) = %v", err)
	}
	if err := Remove([]string{"relative/x", "/sys/fs/cgroup/../x"}); err == nil {
		t.Error("Remove accepted unclean paths")
	}
	lay, err := discover()
	if err != nil {
		t.Fatal(err)
	}
	for root := range lay.roots {
		if _, err := checkStale(root, lay); err == nil {
			t.Errorf("checkStale accepted hierarchy root %s", root)
		}
	}
	if len(lay.own) == 0 {
		t.Error("no own cgroup found")
	}
	for _, o := range lay.own {
		if _, err := checkStale(o, lay); err == nil {
			t.Errorf("checkStale accepted the caller's own cgroup %s", o)
		}
	}
	if p, err := checkStale("/sys/fs/cgroup/no-such-"+strconv.Itoa(os.Getpid()), lay); err != nil || p != "" {
		t.Errorf("checkStale(missing) = %q, %v; want skipped", p, err)
	}
}

// TestV2Plain exercises the v2 code path (mkdir, Add, cgroup.kill, rmdir) on whatever cgroup2
// hierarchy this process sits in, even on hybrid hosts where it carries no controllers.
func TestV2Plain(t *testing.T) {
	lay, err := discover()
	if err != nil {
		t.Fatal(err)
	}
	if lay.v2 == "" {
		t.Skipf("no cgroup2 hierarchy: %s", lay.v2Why)
	}
	name := fmt.Sprintf("airlock-test-%d-v2", os.Getpid())
	g, err := newV2(lay, name, Limits{})
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("no writable cgroup: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Destroy() })
	if g.Version() != 2 || len(g.Paths()) != 1 || filepath.Dir(g.Paths()[0]) != lay.v2 {
		t.Fatalf("version %d paths %v, want one dir under %s", g.Version(), g.Paths(), lay.v2)
	}
	cmd := exec.Command("sh", "-c", "read x; sleep 30 & wait")
	startInGroup(t, g, cmd)()
	if err := g.Destroy(); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("shell ended with %v, want killed", err)
	}
	if _, err := os.Stat(g.Paths()[0]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still exists", g.Paths()[0])
	}

	// Limits whose controllers v2 lacks here must be reported, not silently dropped.
	avail := readFields(filepath.Join(lay.v2, "cgroup.controllers"))
	if avail["pids"] {
		return
	}
	g, err = newV2(lay, name+"-pids", Limits{Pids: 10})
	if err == nil {
		_ = g.Destroy()
		t.Fatal("newV2 with an unavailable pids controller succeeded")
	}
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "pids: controller not available") {
		t.Errorf("err = %v, want ErrUnavailable naming pids", err)
	}
	if _, serr := os.Stat(filepath.Join(lay.v2, name+"-pids")); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("failed newV2 left its dir behind")
	}
}

// A child cloned into a v2 group (CLONE_INTO_CGROUP) is in it from birth.
func TestV2CloneInto(t *testing.T) {
	lay, err := discover()
	if err != nil {
		t.Fatal(err)
	}
	if lay.v2 == "" {
		t.Skipf("no cgroup2 hierarchy: %s", lay.v2Why)
	}
	name := fmt.Sprintf("airlock-test-%d-clone", os.Getpid())
	g, err := newV2(lay, name, Limits{})
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("no writable cgroup: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Destroy() })
	dir, err := g.OpenDir()
	if err != nil {
		t.Fatalf("OpenDir: %v", err)
	}
	defer dir.Close()
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}
	if err := cmd.Start(); err != nil {
		t.Skipf("clone3 with CLONE_INTO_CGROUP unavailable here: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pids, err := readPids(g.Paths()[0])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pids, cmd.Process.Pid) {
		t.Errorf("pid %d not in %s/cgroup.procs (%v)", cmd.Process.Pid, g.Paths()[0], pids)
	}

	v1 := &Group{version: 1, dirs: []string{"/x"}}
	if _, err := v1.OpenDir(); err == nil {
		t.Error("OpenDir of a v1 group succeeded")
	}
}

func TestUnifiedMatchesTheLayout(t *testing.T) {
	lay, err := discover()
	if err != nil {
		t.Skip(err)
	}
	// Unified may say no where New would still pick v2 (a hybrid host with
	// controllers on v2): that costs the fast clone only. The other way
	// round would clone into a group New cannot make.
	if Unified() && lay.version() != 2 {
		t.Errorf("Unified() = true, but New would make a v%d group", lay.version())
	}
}

// A group is named after the process it serves (a supervisor's pid, or
// QEMU's for a VM): once that process is gone and the group is empty, the
// sweep removes it; a live owner's group and a busy group stay.
func TestSweepStaleRemovesEmptyGroupsOfDeadOwners(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	// Not "airlock-": a sandbox's sweep in another test process must not
	// take these groups first.
	prefix := fmt.Sprintf("airlocksweeptest%d-", os.Getpid())
	made := map[string]*Group{}
	for _, name := range []string{
		fmt.Sprintf("%d-1", dead.Process.Pid),  // a native sandbox's
		fmt.Sprintf("vm-%d", dead.Process.Pid), // a VM's
		fmt.Sprintf("vm-%d", os.Getpid()),      // alive
		fmt.Sprintf("%d-2", dead.Process.Pid),  // dead owner, busy group
		"vm-x", "x",                            // not named after a pid
	} {
		g, err := New(prefix+name, Limits{Pids: 64})
		if errors.Is(err, ErrUnavailable) {
			t.Skipf("no writable cgroup: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		made[name] = g
		t.Cleanup(func() { g.Destroy() })
	}
	busy := exec.Command("sh", "-c", "read x")
	startInGroup(t, made[fmt.Sprintf("%d-2", dead.Process.Pid)], busy)
	if n, want := SweepStale(prefix), 2*len(made["x"].Paths()); n != want {
		t.Errorf("swept %d group dirs, want %d (two groups)", n, want)
	}
	for name, g := range made {
		gone := name == fmt.Sprintf("%d-1", dead.Process.Pid) || name == fmt.Sprintf("vm-%d", dead.Process.Pid)
		for _, p := range g.Paths() {
			if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) != gone {
				t.Errorf("%s: exists %v, want %v", p, err == nil, !gone)
			}
		}
	}
}
