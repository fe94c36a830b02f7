//go:build linux

package main

// Run as root, a sandbox still holds no host identity (issue 15): its ids
// are a slot of airlock's range from /etc/subuid and /etc/subgid, and what
// it is given of the host is idmapped. These tests need root; as uid 65534
// (TestUnprivileged's re-run) the ones that make sense there show that an
// unprivileged user's sandboxes are unchanged.

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/subid"
	"github.com/airlock-dev/airlock/internal/testutil"
)

// The owner given to workspaces that are not root's: any unprivileged id.
const otherUID, otherGID = 4242, 4343

func rootOnly(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root: a root's sandbox is what is tested")
	}
	if testBackend() == "docker" {
		t.Skip("native backend only")
	}
}

// hostDir makes a directory outside /tmp (which is private inside), so the
// sandbox sees it through the host's read-only root.
func hostDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/var/tmp", "airlock-idmap-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

func owner(t *testing.T, p string) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d:%d", st.Uid, st.Gid)
}

func chownTreeT(t *testing.T, root string, uid, gid int) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestRootsSandboxCannotReadRootOnlyFiles(t *testing.T) {
	rootOnly(t)
	e := newEnv(t)
	d := hostDir(t)
	secret := filepath.Join(d, "admin.conf") // as /etc/kubernetes/admin.conf: on no hide-list
	if err := os.WriteFile(secret, []byte("cluster-admin-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	script := `cat ` + secret + ` 2>&1; echo "owner $(stat -c %u:%g ` + secret + `)"; echo "map $(tr -s ' ' < /proc/self/uid_map)"`
	r := e.sh(script)
	if strings.Contains(r.stdout, "cluster-admin-key") || !strings.Contains(r.stdout, "Permission denied") {
		t.Errorf("a root-owned 0600 file is readable inside a root's sandbox: %v", r)
	}
	got := fields(r.stdout)
	if got["owner"] != "65534:65534" {
		t.Errorf("host root's file shows as %q inside, want 65534:65534 (nobody: root is not mapped)", got["owner"])
	}
	if m := strings.Fields(got["map"]); len(m) != 3 || m[0] != "0" || m[1] == "0" {
		t.Errorf("uid_map inside = %q, want 0 mapped to a host id that is not root", got["map"])
	} else if base, _ := strconv.Atoi(m[1]); base < 100000 {
		t.Errorf("uid 0 inside is host uid %d, want one of airlock's range (above 100000)", base)
	}

	// The opt-out keeps host root's identity, and says so.
	r = e.run("run", "--no-idmap", "--", "cat", secret)
	if r.code != 0 || r.stdout != "cluster-admin-key\n" || !strings.Contains(r.stderr, "--no-idmap") {
		t.Errorf("--no-idmap: want today's behaviour (readable) with a warning naming it: %v", r)
	}
}

func TestRootsSandboxWritesAsTheWorkspaceOwner(t *testing.T) {
	if testBackend() == "docker" {
		t.Skip("native backend only")
	}
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		uid, gid = otherUID, otherGID
	}
	for _, mode := range []string{"bind", "overlay", "copy"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			ws := e.ws
			if os.Getuid() == 0 {
				ws = filepath.Join(hostDir(t), "ws")
				if err := os.Mkdir(ws, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(ws, "old"), []byte("old\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			chownTreeT(t, ws, uid, gid)
			script := `echo "inside $(stat -c %u:%g . old | tr '\n' ' ')"; echo new > new && mkdir -p d/e && echo f > d/e/f && echo more >> old && ln -s new link && echo done`
			args := []string{"run", "-q", "-w", ws, "--workspace-mode", mode}
			if mode != "bind" {
				args = append(args, "--auto-apply")
			}
			r := e.run(append(args, "--", "sh", "-c", script)...)
			if r.code != 0 || !strings.Contains(r.stdout, "done") {
				t.Fatalf("the sandbox could not write its workspace: %v", r)
			}
			if os.Getuid() == 0 {
				if got := fields(r.stdout)["inside"]; got != "0:0 0:0" {
					t.Errorf("inside, the workspace of %d:%d is owned by %q, want root's (0:0 0:0)", uid, gid, got)
				}
			}
			want := fmt.Sprintf("%d:%d", uid, gid)
			for _, p := range []string{"new", "d", "d/e", "d/e/f", "old", "link"} {
				if got := owner(t, filepath.Join(ws, p)); got != want {
					t.Errorf("%s (%s mode) is owned on the host by %s, want the workspace owner's %s", p, mode, got, want)
				}
			}
			if b, _ := os.ReadFile(filepath.Join(ws, "old")); string(b) != "old\nmore\n" {
				t.Errorf("old = %q after apply", b)
			}
		})
	}
}

func TestRootsSandboxCommitsInAnotherUsersRepository(t *testing.T) {
	rootOnly(t)
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git not installed")
	}
	e := newEnv(t)
	ws := filepath.Join(hostDir(t), "repo")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"config", "user.email", "dev@example.com"}, {"config", "user.name", "Dev"}} {
		if out, err := exec.Command(git, append([]string{"-C", ws}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	chownTreeT(t, ws, otherUID, otherGID)
	r := e.run("run", "-q", "-w", ws, "--", "sh", "-c", `echo hello > hello.txt && git add hello.txt && git commit -q -m "from the sandbox" && git log --format=%s`)
	if r.code != 0 || !strings.Contains(r.stdout, "from the sandbox") {
		t.Fatalf("git commit in a workspace of uid %d failed inside a root's sandbox: %v", otherUID, r)
	}
	// The host's git, as the owner, sees the commit; every object is theirs.
	c := exec.Command(git, "-C", ws, "log", "--format=%s")
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: otherUID, Gid: otherGID}}
	c.Env = []string{"HOME=/nonexistent", "PATH=" + os.Getenv("PATH")}
	if out, err := c.CombinedOutput(); err != nil || !strings.Contains(string(out), "from the sandbox") {
		t.Errorf("git log as the owner on the host: %v\n%s", err, out)
	}
	want := fmt.Sprintf("%d:%d", otherUID, otherGID)
	filepath.Walk(ws, func(p string, _ os.FileInfo, err error) error {
		if err == nil {
			if got := owner(t, p); got != want {
				t.Errorf("%s is owned by %s on the host, want %s", p, got, want)
			}
		}
		return nil
	})
}

// Two sandboxes of root's run as different host ids: a file private to one
// (mode 0600 in its /tmp) may be opened with that sandbox's host ids and
// never with the other's. (The test, as root, reaches the file through
// /proc/PID/root and hands it to each identity as an O_PATH descriptor to
// reopen: the kernel then checks only the file's owner and mode.)
func TestConcurrentRootsSandboxesHaveTheirOwnHostIDs(t *testing.T) {
	rootOnly(t)
	e := newEnv(t)
	type box struct {
		marker  string
		cmd     *exec.Cmd
		pid     int
		hostUID int
	}
	boxes := []*box{{marker: fmt.Sprintf("%d.1", 100000+os.Getpid())}, {marker: fmt.Sprintf("%d.2", 100000+os.Getpid())}}
	for _, b := range boxes {
		b.cmd = e.cmd("run", "-q", "--", "sh", "-c", "echo private-"+b.marker+" > /tmp/secret && chmod 600 /tmp/secret && exec sleep "+b.marker)
		if err := b.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { b.cmd.Process.Kill(); b.cmd.Wait() }()
	}
	for _, b := range boxes {
		testutil.WaitFor(t, 10*time.Second, func() bool {
			pids := testutil.ProcsWith("sleep\x00" + b.marker)
			if len(pids) == 1 {
				b.pid = pids[0]
			}
			return b.pid != 0
		})
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", b.pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(st), "\n") {
			if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
				b.hostUID, _ = strconv.Atoi(strings.Fields(rest)[0])
			}
		}
	}
	if boxes[0].hostUID == boxes[1].hostUID || boxes[0].hostUID < 100000 || boxes[1].hostUID < 100000 {
		t.Fatalf("host uids of two root's sandboxes: %d and %d, want two distinct ids of airlock's range", boxes[0].hostUID, boxes[1].hostUID)
	}
	read := func(uid int, b *box) (string, error) {
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/root/tmp/secret", b.pid), unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		f := os.NewFile(uintptr(fd), "secret")
		defer f.Close()
		c := exec.Command("cat", "/proc/self/fd/3")
		c.ExtraFiles = []*os.File{f}
		// The range's uid and gid slots start at the same numbers here.
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
		out, err := c.CombinedOutput()
		return string(out), err
	}
	for i, b := range boxes {
		other := boxes[1-i]
		if out, err := read(b.hostUID, b); err != nil || !strings.Contains(out, "private-"+b.marker) {
			t.Errorf("control: sandbox %d's own host uid cannot read its private file: %v %s", i, err, out)
		}
		if out, err := read(other.hostUID, b); err == nil || strings.Contains(out, "private-") {
			t.Errorf("sandbox %d's host uid read sandbox %d's private file: %s", 1-i, i, out)
		}
	}
}

// inMountNS runs airlock in a private mount namespace after script (sh)
// prepared it: a test can so change /etc/subuid or mount a filesystem
// without touching the host's view.
func (e *env) inMountNS(script string, args ...string) result {
	e.t.Helper()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		e.t.Skip("unshare(1) not installed")
	}
	c := exec.Command(unshare, append([]string{"--mount", "--propagation", "private", "sh", "-ec", script + "\nexec \"$@\"", "sh", airlockBin}, args...)...)
	c.Env = e.environ()
	c.Dir = e.ws
	return e.runCmd(c)
}

// noLeftovers checks a refused start left nothing: no sandbox, no
// process, no slot of the range held.
func noLeftovers(t *testing.T, e *env, heldBefore int) {
	t.Helper()
	if r := e.run("ls", "--json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("a refused start left a sandbox: %v", r)
	}
	if r, err := subid.DefaultPaths.Read(); err == nil {
		if n := subid.DefaultPaths.InUse(r); n > heldBefore {
			t.Errorf("%d id slots held after a refused start, %d before", n, heldBefore)
		}
	}
}

func heldSlots() int {
	r, err := subid.DefaultPaths.Read()
	if err != nil {
		return 0
	}
	return subid.DefaultPaths.InUse(r)
}

func TestRootsSandboxBadInputGivesOneLine(t *testing.T) {
	rootOnly(t)
	tests := map[string]struct {
		prepare string // sh, in the private mount namespace; $D is a scratch dir
		dir     string // where airlock runs, relative to $D ("" = the test's workspace)
		want    []string
	}{
		"no id range, and /etc/subuid cannot take one": {
			prepare: `: > "$D/empty"; for f in /etc/subuid /etc/subgid; do mount --bind "$D/empty" $f; mount -o remount,bind,ro $f; done`,
			want:    []string{"/etc/subuid", "airlock doctor --fix", "--no-idmap"},
		},
		"a workspace on a filesystem without idmapped mounts": {
			prepare: `mkdir -p "$D/ramfs"; mount -t ramfs none "$D/ramfs"`,
			dir:     "ramfs",
			want:    []string{"ramfs", "does not support idmapped mounts", "--no-idmap"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			d := t.TempDir()
			held := heldSlots()
			dir := e.ws
			if tc.dir != "" {
				dir = filepath.Join(d, tc.dir)
			}
			script := "D=" + d + "\n" + tc.prepare + "\ncd " + dir
			r := e.inMountNS(script, "run", "--", "true")
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			if r.code != 125 || len(lines) != 1 {
				t.Fatalf("want exit 125 and one line: %v", r)
			}
			for _, w := range tc.want {
				if !strings.Contains(lines[0], w) {
					t.Errorf("the line does not say %q: %s", w, lines[0])
				}
			}
			noLeftovers(t, e, held)
			// The opt-out runs it, as host root, with a warning.
			r = e.inMountNS(script, "run", "--no-idmap", "--", "id", "-u")
			if r.code != 0 || r.stdout != "0\n" || !strings.Contains(r.stderr, "warning") {
				t.Errorf("--no-idmap: want it to run with a warning: %v", r)
			}
		})
	}
}

// On first use the range is reserved in /etc/subuid and /etc/subgid, above
// what is there, and kept; here in a private mount namespace over copies.
func TestRootsFirstSandboxReservesTheRange(t *testing.T) {
	rootOnly(t)
	e := newEnv(t)
	d := t.TempDir()
	script := `D=` + d + `
echo "alice:100000:65536" > "$D/subuid"; echo "alice:100000:65536" > "$D/subgid"
mount --bind "$D/subuid" /etc/subuid; mount --bind "$D/subgid" /etc/subgid`
	r := e.inMountNS(script, "run", "-q", "--", "sh", "-c", "tr -s ' ' < /proc/self/uid_map")
	if r.code != 0 {
		t.Fatalf("first run: %v", r)
	}
	for _, f := range []string{"subuid", "subgid"} {
		b, _ := os.ReadFile(filepath.Join(d, f))
		// Above alice's 100000-165535, at the next multiple of 65536.
		if want := "alice:100000:65536\nairlock:196608:16777216\n"; string(b) != want {
			t.Errorf("%s after the first run = %q, want %q", f, b, want)
		}
	}
	m := strings.Fields(r.stdout)
	base, _ := strconv.Atoi(m[min(1, len(m)-1)])
	if len(m) != 3 || base < 196608 || base >= 196608+16777216 || base%65536 != 0 {
		t.Errorf("uid_map = %q, want one slot of the new range", r.stdout)
	}
}

// --home, --rw and --ro of another user's are shown as root's inside, and
// what the sandbox writes there is that user's on the host.
func TestRootsSandboxHomeRWAndROKeepTheirOwners(t *testing.T) {
	rootOnly(t)
	e := newEnv(t)
	d := hostDir(t)
	home, rw, ro := filepath.Join(d, "home"), filepath.Join(d, "rw"), filepath.Join(d, "ro")
	for _, p := range []string{home, rw, ro} {
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ro, "config"), []byte("theirs\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	chownTreeT(t, d, otherUID, otherGID)
	script := `echo h > "$HOME/h" && echo r > ` + rw + `/r && cat ` + ro + `/config && (echo no > ` + ro + `/w) 2>/dev/null || echo ro-refused`
	r := e.run("run", "-q", "--home", home, "--rw", rw, "--ro", ro, "--", "sh", "-c", script)
	if r.code != 0 || r.stdout != "theirs\nro-refused\n" {
		t.Fatalf("want the home and --rw writable, --ro readable and not writable: %v", r)
	}
	want := fmt.Sprintf("%d:%d", otherUID, otherGID)
	for _, p := range []string{filepath.Join(home, "h"), filepath.Join(rw, "r")} {
		if got := owner(t, p); got != want {
			t.Errorf("%s is owned by %s on the host, want %s", p, got, want)
		}
	}
}

// airlock doctor says whether root's sandboxes get ids of their own, and
// --fix reserves the range (here in a private mount namespace over copies).
func TestDoctorReportsAndFixesRootsIDRange(t *testing.T) {
	rootOnly(t)
	e := newEnv(t)
	d := t.TempDir()
	script := `D=` + d + `
: > "$D/subuid"; : > "$D/subgid"
mount --bind "$D/subuid" /etc/subuid; mount --bind "$D/subgid" /etc/subgid
"$1" doctor | grep "sandbox ids"; "$1" doctor --fix >/dev/null`
	// Then, after the script, "doctor" once more: the whole report.
	r := e.inMountNS(script, "doctor")
	lines := strings.Split(r.stdout, "\n")
	if !strings.HasPrefix(lines[0], "✗ sandbox ids") || !strings.Contains(lines[0], "no id range") {
		t.Errorf("without a range the row is %q, want it missing", lines[0])
	}
	if !strings.Contains(r.stderr, "fixed: reserved uids 131072-16908287") {
		t.Errorf("doctor --fix did not say what it reserved: %v", r)
	}
	if !strings.Contains(r.stdout, "✓ sandbox ids          as root: uids 131072-16908287") || !strings.Contains(r.stdout, "idmapped mounts work on") {
		t.Errorf("after --fix the report has no ok row for sandbox ids: %v", r)
	}
	if b, _ := os.ReadFile(filepath.Join(d, "subgid")); string(b) != "airlock:131072:16777216\n" {
		t.Errorf("subgid after doctor --fix = %q", b)
	}
}

// slotHeld reports whether the id slot holding host uid is locked by a
// running sandbox's supervisor.
func slotHeld(t *testing.T, uid int) bool {
	t.Helper()
	r, err := subid.DefaultPaths.Read()
	if err != nil {
		t.Fatal(err)
	}
	slot := (uid - int(r.UID)) / subid.SlotSize
	fd, err := unix.Open(filepath.Join(subid.DefaultPaths.LockDir, "slot-"+strconv.Itoa(slot)), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	return unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB) != nil
}

// A supervisor killed with SIGKILL frees its id slot: the lock dies with
// it, and so does every process that ran as the slot's ids.
func TestRootsKilledSupervisorFreesItsIDSlot(t *testing.T) {
	rootOnly(t)
	e := newEnv(t)
	marker := fmt.Sprintf("%d.7", 200000+os.Getpid())
	if r := e.run("run", "-d", "--name", "slot", "--", "sleep", marker); r.code != 0 {
		t.Fatalf("run -d: %v", r)
	}
	var pid int
	testutil.WaitFor(t, 10*time.Second, func() bool {
		if p := testutil.ProcsWith("sleep\x00" + marker); len(p) == 1 {
			pid = p[0]
		}
		return pid != 0
	})
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	uid := -1
	for _, line := range strings.Split(string(st), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			uid, _ = strconv.Atoi(strings.Fields(rest)[0])
		}
	}
	if !slotHeld(t, uid) {
		t.Fatalf("the slot of host uid %d is not held while its sandbox runs", uid)
	}
	var got struct {
		PID int `json:"pid"`
	}
	json.Unmarshal([]byte(e.run("get", "slot").stdout), &got)
	if got.PID == 0 {
		t.Fatal("no supervisor pid")
	}
	syscall.Kill(got.PID, syscall.SIGKILL)
	testutil.WaitFor(t, 10*time.Second, func() bool { return len(testutil.ProcsWith("sleep\x00"+marker)) == 0 && !slotHeld(t, uid) })
}
