package native

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/cgroup"
	"github.com/airlock-dev/airlock/internal/nofile"
)

// The spawner's tests start this test binary as the child: spawnChildEnv
// says what it does there instead of testing.
const spawnChildEnv = "AIRLOCK_SPAWN_TEST_CHILD"

func init() {
	switch os.Getenv(spawnChildEnv) {
	case "":
		return
	case "report":
		// Say what this process is: JSON on descriptor 3.
		r := spawnReport{PID: os.Getpid(), NS: namespaces(), Status: map[string]string{}, Nofile: [2]uint64{nofile.Soft, nofile.Hard}}
		for fd := range 4 {
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				r.Files = append(r.Files, err.Error())
				continue
			}
			r.Files = append(r.Files, fmt.Sprintf("%d:%d", st.Dev, st.Ino))
		}
		for _, f := range []string{"uid_map", "gid_map", "setgroups"} {
			b, _ := os.ReadFile("/proc/self/" + f)
			r.Maps = append(r.Maps, strings.Join(strings.Fields(string(b)), " "))
		}
		b, _ := os.ReadFile("/proc/self/status")
		for l := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(l, ":"); ok {
				r.Status[k] = strings.TrimSpace(v)
			}
		}
		b, _ = os.ReadFile("/proc/self/cgroup")
		r.Cgroup = string(b)
		json.NewEncoder(os.NewFile(3, "report")).Encode(r)
	case "wait":
		io.Copy(io.Discard, os.Stdin)
	}
	os.Exit(0)
}

type spawnReport struct {
	PID    int
	Files  []string // dev:ino of descriptors 0..3
	Maps   []string // uid_map, gid_map, setgroups
	NS     map[string]string
	Status map[string]string // /proc/self/status
	Nofile [2]uint64         // RLIMIT_NOFILE at exec
	Cgroup string            // /proc/self/cgroup
}

func namespaces() map[string]string {
	out := map[string]string{}
	for _, n := range []string{"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"} {
		out[n], _ = os.Readlink("/proc/self/ns/" + n)
	}
	return out
}

func statID(t *testing.T, f *os.File) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}

// spawnChild spawns this test binary in mode with files, on a thread of its
// own that lives until release is closed (nil: as long as the test binary);
// it returns the pid.
func spawnChild(t *testing.T, mode, path string, files []int, release <-chan struct{}) (int, error) {
	t.Helper()
	uid, gid := os.Getuid(), os.Getgid()
	uids := []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
	gids := []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	return spawnChildAs(t, &spawnAttr{Path: path, Files: files, Env: []string{spawnChildEnv + "=" + mode}, Nofile: [2]uint64{64, lim.Max},
		Maps: func(pid int) error { return writeIDMaps(pid, uids, gids, false) }}, release)
}

// spawnChildAs is spawnChild with a's ids, files and environment.
func spawnChildAs(t *testing.T, a *spawnAttr, release <-chan struct{}) (int, error) {
	t.Helper()
	type res struct {
		pid int
		err error
	}
	done := make(chan res, 1)
	var on func()
	on = func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if unix.Gettid() == unix.Getpid() {
			// Go never ends the main thread (it parks it): spawn from
			// another, this one held meanwhile.
			go on()
			<-release
			runtime.UnlockOSThread()
			return
		}
		a.Argv, a.Flags, a.Cgroup, a.LastCap = []string{"child"}, guestFlags, -1, lastCap()
		pid, pidfd, err := spawn(a)
		if err == nil {
			// The pidfd is this child's: a null signal reaches it.
			if serr := unix.PidfdSendSignal(pidfd, 0, nil, 0); serr != nil {
				err = fmt.Errorf("pidfd: %w", serr)
			}
			unix.Close(pidfd)
		}
		done <- res{pid, err}
		<-release
	}
	go on()
	r := <-done
	if errors.Is(r.err, syscall.EPERM) || errors.Is(r.err, syscall.ENOSYS) {
		t.Skipf("no user namespaces with clone3 here: %v", r.err)
	}
	return r.pid, r.err
}

func TestSpawnStartsTheChildInNewNamespacesWithItsDescriptorsAndEveryCapabilityAmbient(t *testing.T) {
	stdin, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	report, out, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer report.Close()
	f1, err := os.Create(t.TempDir() + "/one")
	if err != nil {
		t.Fatal(err)
	}
	defer f1.Close()
	// Descriptor 2's source is this process's 1, which the child's dup3
	// onto its 1 replaces: sources are moved out of the way first.
	files := []int{int(stdin.Fd()), int(f1.Fd()), 1, int(out.Fd())}
	want := []string{statID(t, stdin), statID(t, f1), statID(t, os.Stdout), statID(t, out)}
	release := make(chan struct{})
	defer close(release)
	pid, err := spawnChild(t, "report", "/proc/self/exe", files, release)
	if err != nil {
		t.Fatal(err)
	}
	out.Close()
	p, err := os.FindProcess(pid)
	if err != nil {
		t.Fatal(err)
	}
	uid, gid := os.Getuid(), os.Getgid()
	var r spawnReport
	derr := json.NewDecoder(report).Decode(&r)
	st, err := p.Wait()
	if err != nil || !st.Success() {
		t.Fatalf("child: %v %v", st, err)
	}
	if derr != nil {
		t.Fatalf("report: %v", derr)
	}
	if fmt.Sprint(r.Files) != fmt.Sprint(want) {
		t.Errorf("descriptors 0..3 are %v, want %v", r.Files, want)
	}
	wantMaps := []string{fmt.Sprintf("%d %d 1", uid, uid), fmt.Sprintf("%d %d 1", gid, gid), "deny"}
	if fmt.Sprint(r.Maps) != fmt.Sprint(wantMaps) {
		t.Errorf("maps %q, want %q", r.Maps, wantMaps)
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if want := [2]uint64{64, lim.Max}; r.Nofile != want {
		t.Errorf("RLIMIT_NOFILE %v at exec, want %v", r.Nofile, want)
	}
	if r.PID != 1 {
		t.Errorf("pid %d inside, want 1", r.PID)
	}
	for n, link := range namespaces() {
		if r.NS[n] == "" || r.NS[n] == link {
			t.Errorf("%s namespace %q, the parent's is %q", n, r.NS[n], link)
		}
	}
	var all uint64
	for c := 0; c <= lastCap(); c++ {
		all |= 1 << c
	}
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapAmb"} {
		if want := fmt.Sprintf("%016x", all); r.Status[k] != want {
			t.Errorf("%s %s after exec, want %s", k, r.Status[k], want)
		}
	}
	if want := fmt.Sprintf("%d\t%d\t%d\t%d", uid, uid, uid, uid); r.Status["Uid"] != want {
		t.Errorf("Uid %q, want %q", r.Status["Uid"], want)
	}
	// The runtime's handlers are gone (exec reset them), and the signal
	// mask is the parent's, not the all-blocked one of the clone.
	if r.Status["SigBlk"] != "0000000000000000" {
		t.Errorf("SigBlk %s", r.Status["SigBlk"])
	}
}

func TestSpawnOfAMissingFileReturnsItsErrno(t *testing.T) {
	_, err := spawnChild(t, "report", "/nonexistent/airlock-guest", nil, nil)
	var pe *os.PathError
	if !errors.As(err, &pe) || pe.Op != "fork/exec" || !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("err %v, want fork/exec ... ENOENT", err)
	}
	// The failed child is reaped.
	if _, err := unix.Wait4(-1, nil, unix.WNOHANG, nil); !errors.Is(err, syscall.ECHILD) {
		t.Errorf("a child is left: wait4 %v", err)
	}
}

func TestSpawnedChildDiesWhenTheThreadThatSpawnedItExits(t *testing.T) {
	stdin, feed, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	defer feed.Close() // the child would wait for it forever
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	release := make(chan struct{})
	pid, err := spawnChild(t, "wait", "/proc/self/exe", []int{int(stdin.Fd()), int(null.Fd()), int(null.Fd())}, release)
	if err != nil {
		t.Fatal(err)
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		t.Fatal(err)
	}
	close(release) // the locked goroutine returns: its thread exits
	stop := time.AfterFunc(10*time.Second, func() { p.Kill() })
	st, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if !stop.Stop() {
		t.Fatal("the child outlived the thread that spawned it (killed after 10s)")
	}
	if ws := st.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want killed by SIGKILL", st)
	}
}

func TestSpawnWithSetIDsRunsAsUidAndGid0InsideWithNoGroupsAndEveryCapability(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("maps a range of ids: root only")
	}
	r := spawnRootReport(t, nil)
	want := map[string]string{"Uid": "0\t0\t0\t0", "Gid": "0\t0\t0\t0", "Groups": ""}
	var all uint64
	for c := 0; c <= lastCap(); c++ {
		all |= 1 << c
	}
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapAmb"} {
		want[k] = fmt.Sprintf("%016x", all)
	}
	for k, v := range want {
		if r.Status[k] != v {
			t.Errorf("%s %q, want %q", k, r.Status[k], v)
		}
	}
	if want := fmt.Sprintf("0 %d 65536", rootTestBase); r.Maps[0] != want || r.Maps[2] != "allow" {
		t.Errorf("maps %q, want %q and setgroups allowed", r.Maps, want)
	}
}

// rootTestBase is where spawnRootReport maps uid and gid 0: nobody's ids
// (the child makes no files).
const rootTestBase = 1 << 31

// spawnRootReport spawns this test binary as root's sandboxes are spawned
// (uid and gid 0 inside, 65536 unprivileged ids outside: SetIDs) and with
// join as its spawnAttr.Join, and returns what the child reported once it
// is reaped.
func spawnRootReport(t *testing.T, join func() []string) spawnReport {
	t.Helper()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	report, out, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer report.Close()
	ids := []syscall.SysProcIDMap{{ContainerID: 0, HostID: rootTestBase, Size: 65536}}
	nul := int(null.Fd())
	pid, err := spawnChildAs(t, &spawnAttr{Path: "/proc/self/exe", Files: []int{nul, nul, nul, int(out.Fd())}, Env: []string{spawnChildEnv + "=report"},
		SetIDs: true, Maps: func(pid int) error { return writeIDMaps(pid, ids, ids, true) }, Join: join}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out.Close()
	var r spawnReport
	derr := json.NewDecoder(report).Decode(&r)
	if _, err := unix.Wait4(pid, nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	if derr != nil {
		t.Fatalf("report: %v", derr)
	}
	return r
}

func TestSpawnReturnsTheMapsErrorAndLeavesNoChild(t *testing.T) {
	no := errors.New("no maps")
	_, err := spawnChildAs(t, &spawnAttr{Path: "/proc/self/exe", Env: []string{spawnChildEnv + "=report"},
		Maps: func(int) error { return no }}, nil)
	if !errors.Is(err, no) {
		t.Fatalf("err %v, want %v", err, no)
	}
	if _, err := unix.Wait4(-1, nil, unix.WNOHANG, nil); !errors.Is(err, syscall.ECHILD) {
		t.Errorf("a child is left: wait4 %v", err)
	}
}

// On cgroup v1 the child moves itself into its group before its exec
// (spawnAttr.Join): it runs there from its first instruction, as a v2
// child cloned into its group does, and no move by the parent (an RCU
// grace period, up to ~20 ms) is needed.
func TestASpawnedChildJoinsItsV1CgroupBeforeItsExec(t *testing.T) {
	if os.Getuid() != 0 || cgroup.Unified() {
		t.Skip("needs root and cgroup v1 controllers")
	}
	g, err := cgroup.New(fmt.Sprintf("airlock-test-join-%d", os.Getpid()), cgroup.Limits{Pids: 64})
	if err != nil {
		t.Skipf("no cgroup: %v", err)
	}
	defer g.Destroy()
	// As root's sandboxes are: uid 0 inside is an unprivileged id outside,
	// taken only after the join (the tasks files are root's).
	r := spawnRootReport(t, g.Paths)
	for _, dir := range g.Paths() {
		if !strings.Contains(r.Cgroup, "/"+filepath.Base(dir)+"\n") {
			t.Errorf("the child ran outside %s: its /proc/self/cgroup:\n%s", dir, r.Cgroup)
		}
	}
}

// A group the child cannot join fails its start, with the step named, and
// leaves no child behind (the native backend then starts it without).
func TestASpawnThatCannotJoinItsCgroupFailsAndLeavesNoChild(t *testing.T) {
	_, err := spawnChildAs(t, &spawnAttr{Path: "/proc/self/exe", Env: []string{spawnChildEnv + "=report"},
		Join: func() []string { return []string{filepath.Join(t.TempDir(), "gone")} }}, nil)
	if !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), "open its cgroup's tasks file") {
		t.Fatalf("err %v, want ENOENT opening the tasks file", err)
	}
	if _, err := unix.Wait4(-1, nil, unix.WNOHANG, nil); !errors.Is(err, syscall.ECHILD) {
		t.Errorf("a child is left: wait4 %v", err)
	}
}

func TestASpawnedGuestsCommandsHaveTheIDsCapabilitiesAndLimitsOfOneStartedByOSExec(t *testing.T) {
	// The guest's own bounding set is left out: only its spawner thread
	// empties it (the others never exec), and /proc/1/status shows the
	// leader thread, which is the spawner in some runs and not in others.
	probe := sh(`id; grep -E '^(Uid|Gid|Groups|Cap...|NoNewPrivs|Seccomp)' /proc/self/status; ` +
		`grep -E '^(Uid|Gid|Groups|Cap(Inh|Prm|Eff|Amb)|NoNewPrivs|Seccomp)' /proc/1/status; ulimit -Sn; ulimit -Hn`)
	show := func() string {
		sb, _ := sandbox(t, nil)
		r := run(t, sb, probe, nil)
		if r.exit == nil || r.exit.Code != 0 {
			t.Fatalf("probe: %+v, stderr %q", r.exit, r.stderr.String())
		}
		return r.stdout.String()
	}
	spawned := show()
	if noSpawn.Load() {
		t.Skip("no spawn here")
	}
	noSpawn.Store(true)
	defer noSpawn.Store(false)
	if forked := show(); spawned != forked {
		t.Errorf("spawned guest's command sees\n%s\nos/exec's\n%s", spawned, forked)
	}
}
