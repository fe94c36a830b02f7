// Package testutil holds what the tests of several packages share: the
// airlock binary built once per test binary, a re-run of the test binary as
// uid 65534, an audit log's records, and what a sandbox may leave behind
// (processes, cgroups, private dirs). Only tests import it (see
// TestOnlyTestsImportTestutil).
package testutil

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/audit"
)

// ModuleRoot is the directory holding airlock's go.mod, found from this
// source file (a test binary may run from anywhere).
func ModuleRoot() (string, error) {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("testutil: cannot locate the package source")
	}
	root := filepath.Join(filepath.Dir(self), "..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return "", fmt.Errorf("testutil: module root not found (set AIRLOCK_TEST_BIN to a prebuilt binary): %w", err)
	}
	return root, nil
}

// BuildAirlock compiles ./cmd/airlock into dir/airlock and returns its path,
// as the README builds it (.ci/build: the native backend's lean guest
// generated first and embedded, the same flags), so the tests run the binary
// users get. Static (CGO_ENABLED=0, as shipped) unless cgo is true, in which
// case cgo is on where a plain `go build` would turn it on.
func BuildAirlock(dir string, cgo bool) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "airlock")
	cmd := exec.Command("bash", filepath.Join(root, ".ci", "build"), out)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if cgo {
		def := exec.Command("go", "env", "CGO_ENABLED")
		def.Dir = root
		def.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "CGO_ENABLED=") })
		b, err := def.Output()
		if err != nil {
			return "", fmt.Errorf("go env CGO_ENABLED: %v", err)
		}
		cmd.Env = append(cmd.Env, "CGO_ENABLED="+strings.TrimSpace(string(b)))
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf(".ci/build (set AIRLOCK_TEST_BIN to a prebuilt binary): %v\n%s", err, b)
	}
	return out, nil
}

// AirlockForMain is BuildAirlock for a TestMain: AIRLOCK_TEST_BIN when set
// (nothing to remove), otherwise a static build in a fresh directory that
// uid 65534 can reach, and the func that removes it.
func AirlockForMain(cgo bool) (bin string, cleanup func(), err error) {
	if b := os.Getenv("AIRLOCK_TEST_BIN"); b != "" {
		return b, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "airlock-test-bin-")
	if err != nil {
		return "", func() {}, err
	}
	os.Chmod(dir, 0o755) // an unprivileged re-run must reach the binary
	cleanup = func() { os.RemoveAll(dir) }
	if bin, err = BuildAirlock(dir, cgo); err != nil {
		cleanup()
		return "", func() {}, err
	}
	return bin, cleanup, nil
}

// NobodyEnv is set in the environment of every RerunAsNobody child.
const NobodyEnv = "AIRLOCK_TESTUTIL_NOBODY"

// IsNobodyRerun reports whether this test binary is RerunAsNobody's child.
func IsNobodyRerun() bool { return os.Getenv(NobodyEnv) != "" }

// Nobody says how RerunAsNobody re-runs the test binary.
type Nobody struct {
	// Run selects the tests (-test.run); empty means this run's selection.
	Run string
	// Env is added to the child's environment, which otherwise holds only
	// PATH, HOME=/nonexistent, TMPDIR (a fresh world-writable dir), GORACE
	// and NobodyEnv.
	Env []string
	// Groups are supplementary group ids; none when empty.
	Groups []string
	// Timeout is -test.timeout; 5 minutes when zero.
	Timeout time.Duration
}

// RerunAsNobody re-runs this test binary as uid 65534 (setpriv --reuid=65534
// --regid=65534), logs its output, and fails the test when it fails. It
// skips unless running as root, and in a child it started.
func RerunAsNobody(t *testing.T, o Nobody) {
	t.Helper()
	if os.Geteuid() != 0 || IsNobodyRerun() {
		t.Skip("runs only as root, to re-run the tests as uid 65534")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv not installed")
	}
	// t.TempDir's parent is private to root: the child gets its own dir.
	dir, err := os.MkdirTemp("", "airlock-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, filepath.Base(os.Args[0]))
	if err := CopyFile(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	args := []string{"--reuid=65534", "--regid=65534"}
	if len(o.Groups) == 0 {
		args = append(args, "--clear-groups")
	} else {
		args = append(args, "--groups="+strings.Join(o.Groups, ","))
	}
	timeout := o.Timeout
	if timeout == 0 {
		timeout = 5 * time.Minute
	}
	args = append(args, bin, "-test.v", "-test.timeout="+timeout.String())
	run := o.Run
	if f := flag.Lookup("test.run"); run == "" && f != nil {
		run = f.Value.String()
	}
	if run != "" {
		args = append(args, "-test.run="+run)
	}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	// The child runs in this test's directory (the package's, as go test
	// sets it), where tests find their testdata and the repository.
	c := exec.Command(setpriv, args...)
	c.Env = append([]string{NobodyEnv + "=1", "HOME=/nonexistent", "TMPDIR=" + dir, "PATH=" + os.Getenv("PATH"),
		"GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")}, o.Env...)
	out, err := c.CombinedOutput()
	// What failed goes first: a CI summary may show only the start of this
	// test's output, and the whole run's is long.
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "--- FAIL") {
			t.Errorf("as uid 65534: %s", strings.TrimSpace(l))
		}
	}
	t.Logf("as uid 65534:\n%s", out)
	if err != nil {
		t.Fatalf("tests failed as uid 65534: %v", err)
	}
}

// CopyFile copies src to dst as an executable (mode 0755).
func CopyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}

// AuditRecords reads every record of the audit log at path (none if it does
// not exist yet), failing the test on a corrupt line.
func AuditRecords(t testing.TB, path string) []audit.Record {
	t.Helper()
	fh, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	return ParseAudit(t, fh)
}

// ParseAudit reads audit records (JSON lines, as in the log and in `airlock
// audit --json`) from r, failing the test on a corrupt line.
func ParseAudit(t testing.TB, r io.Reader) []audit.Record {
	t.Helper()
	var out []audit.Record
	err := audit.Read(r, func(rec audit.Record) error { out = append(out, rec); return nil },
		func(line int, err error) { t.Errorf("audit line %d: %v", line, err) })
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// ProcsWith lists host pids, other than this process, whose command line
// contains s.
func ProcsWith(s string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(s)) {
			out = append(out, pid)
		}
	}
	return out
}

// WaitFor polls cond every 20 ms and fails the test if it is not true
// within d.
func WaitFor(t testing.TB, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// NoProcsWithin fails unless no process whose command line contains s is
// left within d.
func NoProcsWithin(t testing.TB, s string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		pids := ProcsWith(s)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes %v with %q survive after %s", pids, s, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// CgroupDirs lists the directories named name under /sys/fs/cgroup (at most
// a few levels deep, where airlock makes its groups).
func CgroupDirs(name string) []string {
	var out []string
	filepath.WalkDir("/sys/fs/cgroup", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if strings.Count(p, "/") > 8 {
			return filepath.SkipDir
		}
		if d.Name() == name {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// CgroupNamesOf lists the names (last path elements) of process pid's own
// airlock cgroups, from /proc/PID/cgroup: the groups of the sandbox whose
// guest it is, however they were named.
func CgroupNamesOf(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if name := path.Base(parts[2]); strings.HasPrefix(name, "airlock-") && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// Leftovers lists what matches a glob pattern, such as a private dir
// pattern or a state dir's sandboxes/*.
func Leftovers(pattern string) []string {
	m, _ := filepath.Glob(pattern)
	return m
}
