package doctor

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/seccomp"
	"github.com/airlock-dev/airlock/internal/testutil"
)

var allNames = []string{NameUserNS, NameMountAPI, NameLandlock, NameSeccomp, NameCgroups, NameTun, NameOverlay, NameIDs}

func check(t *testing.T, r Report, name string) Check {
	t.Helper()
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no %q check in %+v", name, r.Checks)
	return Check{}
}

func TestRun(t *testing.T) {
	// The doctor starts a few short-lived probe processes: its bound is 1 s
	// on an idle machine, scaled by what starting one process costs here and
	// now (two busy cores under -race are slower than a laptop).
	t0 := time.Now()
	if err := exec.Command("true").Run(); err != nil {
		t.Fatal(err)
	}
	limit := max(time.Second, 50*time.Since(t0))
	start := time.Now()
	r := Run()
	if d := time.Since(start); d > limit {
		t.Errorf("Run took %v, want < %v", d, limit)
	}
	if len(r.Checks) != len(allNames) {
		t.Errorf("got %d checks, want %d: %+v", len(r.Checks), len(allNames), r.Checks)
	}
	for _, name := range allNames {
		c := check(t, r, name)
		t.Logf("%-20s %-8s %s | %s", c.Name, c.Status, c.Detail, strings.ReplaceAll(c.Impact, "\n", " / "))
		if c.Detail == "" {
			t.Errorf("%s: empty Detail", name)
		}
		switch c.Status {
		case StatusOK:
		case StatusDegraded, StatusMissing:
			if c.Impact == "" {
				t.Errorf("%s is %s without an Impact", name, c.Status)
			}
		default:
			t.Errorf("%s: unknown status %q", name, c.Status)
		}
	}
	if r.Kernel == "" || r.User == "" {
		t.Errorf("kernel %q, user %q: want both set", r.Kernel, r.User)
	}
	if tun := check(t, r, NameTun); (r.NetworkMode == "transparent") != (tun.Status == StatusOK) || r.NetworkWhy == "" {
		t.Errorf("NetworkMode = %q (%s) with the tun check %s", r.NetworkMode, r.NetworkWhy, tun.Status)
	}

	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil || len(back.Checks) != len(r.Checks) || back.NetworkMode != r.NetworkMode {
		t.Errorf("JSON round trip: %v, %s", err, b)
	}
}

func TestRunAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	r := Run()
	for _, name := range []string{NameUserNS, NameMountAPI, NameSeccomp, NameLandlock} {
		if c := check(t, r, name); c.Status != StatusOK {
			t.Errorf("as root %s = %+v, want ok", name, c)
		}
	}
	if c := check(t, r, NameTun); c.Status != StatusOK {
		t.Errorf("as root the tun check = %+v, want ok", c)
	}
	if !r.OK() {
		t.Error("OK() = false as root")
	}
	if r.NetworkMode != "transparent" {
		t.Errorf("as root NetworkMode = %q, want transparent", r.NetworkMode)
	}
}

// TestAsNobody re-runs the doctor's tests as uid 65534 when run as root.
func TestAsNobody(t *testing.T) {
	testutil.RerunAsNobody(t, testutil.Nobody{Run: "^(TestRun|TestRunUnprivileged|TestRunLeavesNothing|TestRunUnderFilter)$"})
}

// TestRunUnprivileged runs as uid 65534 through TestAsNobody (or as any
// user who is not root).
func TestRunUnprivileged(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("runs unprivileged: TestAsNobody re-runs it as uid 65534")
	}
	asserted := false
	defer func() {
		if !asserted {
			t.Log("this user can open /dev/net/tun and has a writable cgroup: nothing unprivileged to check")
		}
	}()
	r := Run()
	var st unix.Stat_t
	if unix.Stat("/dev/net/tun", &st) == nil && st.Mode&0o066 == 0 && int(st.Uid) != os.Geteuid() {
		c := check(t, r, NameTun)
		if c.Status == StatusOK || c.Impact == "" {
			t.Errorf("tun is mode %04o, owned by uid %d: got %+v, want not ok with an Impact", st.Mode&0o7777, st.Uid, c)
		}
		if r.NetworkMode != "proxy" {
			t.Errorf("NetworkMode = %q, want proxy", r.NetworkMode)
		}
		asserted = true
	}
	if !ownCgroupWritable(t) {
		asserted = true
		c := check(t, r, NameCgroups)
		if c.Status != StatusDegraded || !strings.Contains(c.Impact, "--cpus is not enforced") || !strings.Contains(c.Impact, "run as root") {
			t.Errorf("no writable cgroup: got %+v, want degraded with an Impact naming the fix", c)
		}
	}
}

// ownCgroupWritable says whether any cgroup this process is in may get children from this
// user; without one the cgroup check must be degraded.
func ownCgroupWritable(t *testing.T) bool {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range ownCgroupDirs(string(b)) {
		if unix.Access(dir, unix.W_OK) == nil {
			t.Logf("%s is writable", dir)
			return true
		}
	}
	return false
}

func ownCgroupDirs(procCgroup string) []string {
	var dirs []string
	for line := range strings.Lines(procCgroup) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[1] == "" {
			dirs = append(dirs, filepath.Join("/sys/fs/cgroup", f[2]), filepath.Join("/sys/fs/cgroup/unified", f[2]))
			continue
		}
		dirs = append(dirs, filepath.Join("/sys/fs/cgroup", f[1], f[2]))
		for _, c := range strings.Split(f[1], ",") {
			dirs = append(dirs, filepath.Join("/sys/fs/cgroup", c, f[2]))
		}
	}
	return dirs
}

func TestRunLeavesNothing(t *testing.T) {
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	Run() // warm up: the runtime may open its own fds (epoll, pidfd probes) once
	before := fds()
	r := Run()
	if after := fds(); after != before {
		t.Errorf("open fds went from %d to %d", before, after)
	}
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	for _, p := range tasks {
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) != "" {
			t.Errorf("%s: child processes left: %s", p, b)
		}
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range ownCgroupDirs(string(b)) {
		if left, _ := filepath.Glob(filepath.Join(dir, "airlock-probe-*")); len(left) > 0 {
			t.Errorf("trial cgroups left: %v", left)
		}
	}
	_ = r
}

// TestRunUnderFilter runs the doctor inside airlock's own seccomp filter, which refuses
// new namespaces and the mount API: the failure paths of the required checks, for real.
func TestRunUnderFilter(t *testing.T) {
	if os.Getenv("DOCTOR_TEST_FILTERED") == "1" {
		if err := seccomp.Install(); err != nil {
			t.Fatal(err)
		}
		if err := json.NewEncoder(os.Stdout).Encode(Run()); err != nil {
			t.Fatal(err)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRunUnderFilter$")
	cmd.Env = append(os.Environ(), "DOCTOR_TEST_FILTERED=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("filtered child: %v\n%s", err, out)
	}
	var r Report
	if err := json.NewDecoder(bytes.NewReader(out)).Decode(&r); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	for _, name := range []string{NameUserNS, NameMountAPI, NameOverlay} {
		if c := check(t, r, name); c.Status != StatusMissing || c.Impact == "" {
			t.Errorf("under the filter %s = %+v, want missing with an Impact", name, c)
		}
	}
	if c := check(t, r, NameSeccomp); c.Status != StatusOK || !strings.Contains(c.Detail, "already filtered") {
		t.Errorf("under the filter seccomp = %+v, want ok and already filtered", c)
	}
	if r.OK() || r.NetworkMode != "proxy" {
		t.Errorf("under the filter OK() = %v, NetworkMode %q: want false, proxy", r.OK(), r.NetworkMode)
	}
}

func TestWrite(t *testing.T) {
	r := Run()
	var buf bytes.Buffer
	r.Write(&buf, false)
	out := buf.String()
	t.Logf("\n%s", out)
	for _, c := range r.Checks {
		if !strings.Contains(out, c.Name) || !strings.Contains(out, c.Detail) {
			t.Errorf("output lacks %q / %q", c.Name, c.Detail)
		}
		if c.Status != StatusOK {
			for line := range strings.Lines(c.Impact) {
				if !strings.Contains(out, "  "+strings.TrimSpace(line)+"\n") {
					t.Errorf("output lacks the indented impact line %q", line)
				}
			}
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Error("escape codes without color")
	}
	if !strings.Contains(out, "network mode: "+r.NetworkMode) {
		t.Error("network mode not shown")
	}
	buf.Reset()
	r.Write(&buf, true)
	if !strings.Contains(buf.String(), "\x1b[") {
		t.Error("no escape codes with color")
	}
}

func TestWriteAligns(t *testing.T) {
	r := Report{Kernel: "Linux 6.1", User: "u", NetworkMode: "proxy", Checks: []Check{
		{Name: "a", Status: StatusOK, Detail: "one"},
		{Name: "longer name", Status: StatusDegraded, Detail: "two", Impact: "first\nsecond"},
		{Name: "mid", Status: StatusMissing, Detail: "three", Impact: "gone"},
	}}
	var buf bytes.Buffer
	r.Write(&buf, false)
	want := "" +
		"✓ a            one\n" +
		"! longer name  two\n" +
		"               first\n" +
		"               second\n" +
		"✗ mid          three\n" +
		"               gone\n"
	if !strings.Contains(buf.String(), want) {
		t.Errorf("got\n%s\nwant it to contain\n%s", buf.String(), want)
	}
}

func TestOK(t *testing.T) {
	ok := Report{Checks: []Check{{Name: NameUserNS, Status: StatusOK}, {Name: NameLandlock, Status: StatusMissing}, {Name: NameCgroups, Status: StatusDegraded}}}
	if !ok.OK() {
		t.Error("optional features missing: want OK")
	}
	for _, name := range []string{NameUserNS, NameMountAPI, NameSeccomp} {
		bad := Report{Checks: []Check{{Name: name, Status: StatusMissing}}}
		if bad.OK() {
			t.Errorf("%s missing: want not OK", name)
		}
	}
}

func TestParseVersion(t *testing.T) {
	for rel, want := range map[string][2]int{
		"6.18.44-fc-v769": {6, 18}, "5.11.0": {5, 11}, "4.19-rc1": {4, 19}, "6.1": {6, 1}, "weird": {0, 0},
	} {
		if got := parseVersion(rel); got != want {
			t.Errorf("parseVersion(%q) = %v, want %v", rel, got, want)
		}
	}
	if !atLeast([2]int{5, 11}, 5, 11) || atLeast([2]int{5, 10}, 5, 11) || !atLeast([2]int{6, 0}, 5, 11) {
		t.Error("atLeast")
	}
}
