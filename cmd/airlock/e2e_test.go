//go:build linux

package main

// End-to-end tests: the real airlock binary on the real kernel, one test per
// isolation claim. TestMain builds the binary once (CGO_ENABLED=0, as
// shipped). When the suite runs as root, TestUnprivileged runs it all again
// as uid 65534, since most users are not root.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/airlock-dev/airlock/internal/testutil"
)

var airlockBin string

func TestMain(m *testing.M) {
	bin, cleanup, err := testutil.AirlockForMain(false)
	if err != nil {
		fmt.Fprintf(os.Stderr, "build airlock: %v\n", err)
		os.Exit(1)
	}
	airlockBin = bin
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// env is a private HOME and state dir per test, so tests never see each
// other's sandboxes nor the developer's.
type env struct {
	t     *testing.T
	home  string
	state string
	ws    string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	root := t.TempDir()
	e := &env{t: t, home: filepath.Join(root, "home"), state: filepath.Join(root, "state"), ws: filepath.Join(root, "ws")}
	for _, d := range []string{e.home, e.ws} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Whatever a test leaves running, even when it fails half-way, is stopped,
	// and what a killed supervisor left (its cgroup) is pruned.
	t.Cleanup(func() {
		e.cmd("kill", "--all").Run()
		e.cmd("prune").Run()
	})
	return e
}

func (e *env) environ(extra ...string) []string {
	if testBackend() == "kubernetes" { // see TestKubeBackend
		extra = append(kubeEnvOf(e), extra...)
	}
	return append([]string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + e.home, "AIRLOCK_STATE_DIR=" + e.state, "LANG=C.UTF-8",
	}, append(vmDataEnv(), extra...)...)
}

type result struct {
	code           int
	stdout, stderr string
}

func (e *env) cmd(args ...string) *exec.Cmd {
	if len(args) > 0 && args[0] == "run" && testBackend() == "docker" { // see TestDockerBackend
		args = append([]string{"run", "--backend", "docker", "--image", os.Getenv("AIRLOCK_TEST_IMAGE")}, args[1:]...)
	}
	if len(args) > 0 && args[0] == "run" && testBackend() == "vm" { // see TestVMBackend
		args = append([]string{"run", "--backend", "vm"}, args[1:]...)
	}
	if len(args) > 0 && args[0] == "run" && testBackend() == "kubernetes" { // see TestKubeBackend
		args = append([]string{"run", "--backend", "kubernetes"}, args[1:]...)
	}
	c := exec.Command(airlockBin, args...)
	c.Env = e.environ()
	c.Dir = e.ws
	return c
}

func (e *env) run(args ...string) result {
	e.t.Helper()
	return e.runCmd(e.cmd(args...))
}

func (e *env) runCmd(c *exec.Cmd) result {
	e.t.Helper()
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("airlock %v: %v", c.Args[1:], err)
	}
	return result{code, out.String(), errb.String()}
}

// sh runs a shell script in a fresh sandbox.
func (e *env) sh(script string, flags ...string) result {
	e.t.Helper()
	return e.run(append(append([]string{"run", "-q"}, flags...), "--", "sh", "-c", script)...)
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
}

func TestRunsCommandAndPropagatesExitStatus(t *testing.T) {
	e := newEnv(t)
	if r := e.sh("echo hello; exit 7"); r.code != 7 || r.stdout != "hello\n" {
		t.Fatalf("got %v, want exit 7 and hello", r)
	}
	if r := e.run("run", "--", "true"); r.code != 0 || r.stderr != "" {
		t.Fatalf("airlock run -- true: %v", r)
	}
}

// Every package init runs on every airlock start, used or not. The copies
// go.mod replaces these modules with build their regular expressions and
// tables on first use; unpatched, each init allocated 25–90 KB (a regexp
// compile is ~18 KB). This fails when a dependency update drops a patch.
// airlock links them all (one binary: every start shows them).
func TestPatchedDependenciesDoNoHeavyWorkAtStart(t *testing.T) {
	cmd := newEnv(t).cmd("--version")
	cmd.Env = append(cmd.Env, "GODEBUG=inittrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("airlock --version: %v\n%s", err, out)
	}
	// Most are held to bytes; go-fuse's fuse (a fixed table of flag names,
	// 29 KB in 18 allocations; unpatched 49 KB in 251, with the opcode table
	// and two pipes to hold fd 3) and splice (a pipe, a file read) to
	// allocations.
	// The MCP SDK's mcp (method tables, unpatched 183 allocations) and
	// oauthex (a cloned transport, 28) likewise.
	maxAllocs := map[string]int{"github.com/hanwen/go-fuse/v2/fuse": 40, "github.com/hanwen/go-fuse/v2/splice": 5,
		"github.com/modelcontextprotocol/go-sdk/mcp": 40, "github.com/modelcontextprotocol/go-sdk/oauthex": 10}
	for _, pkg := range []string{"github.com/distribution/reference", "github.com/opencontainers/go-digest", "github.com/google/jsonschema-go/jsonschema", "gopkg.in/yaml%2ev3",
		"github.com/hanwen/go-fuse/v2/fuse", "github.com/hanwen/go-fuse/v2/splice", "github.com/modelcontextprotocol/go-sdk/mcp", "github.com/modelcontextprotocol/go-sdk/oauthex"} {
		seen := false
		for line := range strings.Lines(string(out)) {
			// init <pkg> @1.9 ms, 0.002 ms clock, 1080 bytes, 27 allocs
			f := strings.Fields(line)
			if len(f) != 11 || f[0] != "init" || f[1] != pkg {
				continue
			}
			seen = true
			if limit, ok := maxAllocs[pkg]; ok {
				if n, err := strconv.Atoi(f[9]); err != nil || n > limit {
					t.Errorf("%s's init made %s allocations: is go.mod's replace with its patched copy in third_party still there?", pkg, f[9])
				}
			} else if n, err := strconv.Atoi(f[7]); err != nil || n > 8<<10 {
				t.Errorf("%s's init allocated %s bytes: is go.mod's replace with its patched copy in third_party still there?", pkg, f[7])
			}
		}
		if !seen {
			t.Errorf("no init of %s in airlock's start (if it is no longer linked, drop its patched copy and this check):\n%s", pkg, out)
		}
	}
	// The MCP SDK's copy encodes its one gob (a pagination cursor) as JSON:
	// encoding/gob's init cost ~0.2 ms, 27 KB.
	if strings.Contains(string(out), "init encoding/gob ") {
		t.Error("encoding/gob is initialised at start: is go.mod's replace of the MCP SDK with its patched copy in third_party still there?")
	}
}

func TestWritesOutsideTheWorkspaceFail(t *testing.T) {
	e := newEnv(t)
	outside := filepath.Join(filepath.Dir(e.ws), "outside")
	os.MkdirAll(outside, 0o777)
	r := e.sh(fmt.Sprintf(`
		touch ./inside && echo ws-ok
		for p in /etc/airlock-canary /usr/airlock-canary %s/x /var/tmp/airlock-canary; do
			if touch "$p" 2>/dev/null; then echo "WROTE $p"; fi
		done
		touch /tmp/scratch && echo tmp-ok
		touch "$HOME/scratch" && echo home-ok`, outside))
	if r.code != 0 || !strings.Contains(r.stdout, "ws-ok") || !strings.Contains(r.stdout, "tmp-ok") || !strings.Contains(r.stdout, "home-ok") {
		t.Fatalf("writes in workspace, /tmp, home should work: %v", r)
	}
	if strings.Contains(r.stdout, "WROTE") {
		t.Fatalf("a write outside the workspace succeeded: %v", r)
	}
	if _, err := os.Stat(filepath.Join(e.ws, "inside")); err != nil {
		t.Fatalf("workspace write not visible on the host: %v", err)
	}
	for _, p := range []string{filepath.Join(outside, "x"), "/etc/airlock-canary", "/var/tmp/airlock-canary"} {
		if _, err := os.Stat(p); err == nil {
			os.Remove(p)
			t.Errorf("%s exists on the host", p)
		}
	}
	// The private /tmp and home vanish with the sandbox.
	if _, err := os.Stat(filepath.Join(e.home, "scratch")); err == nil {
		t.Errorf("the sandbox wrote into the real home")
	}
}

func TestHiddenPathsAreUnreadable(t *testing.T) {
	e := newEnv(t)
	plant := func(rel, content string) {
		p := filepath.Join(e.home, rel)
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	plant(".ssh/id_ed25519", "CANARY-SSH")
	plant(".aws/credentials", "CANARY-AWS")
	plant(".config/gcloud/credentials.db", "CANARY-GCLOUD")
	plant("notes.txt", "CANARY-HOME")
	// Each line is "path bytes" (what cat could read); the script must reach
	// its end, so an empty answer means hidden, not a run that failed.
	// The files of /proc that must be masked (something mounted over them),
	// those this kernel has.
	var masked []string
	candidates := []string{"kcore", "keys", "timer_list", "sched_debug"} // docker's list and ours
	if testBackend() != "docker" {
		candidates = append(candidates, "kallsyms", "kmsg", "kpageflags", "vmallocinfo", "sysvipc")
	}
	for _, f := range candidates {
		if _, err := os.Stat("/proc/" + f); err == nil {
			masked = append(masked, f)
		}
	}
	files := []string{"~/.ssh/id_ed25519", "~/.aws/credentials", "~/.config/gcloud/credentials.db", "~/notes.txt",
		"/etc/shadow", "/etc/gshadow", "/proc/keys", "/proc/timer_list"}
	script := `for f in '` + strings.Join(files, "' '") + `'; do p=$(eval echo "$f"); echo "$f $(cat "$p" 2>/dev/null | wc -c)"; done
		echo "home $(ls -A "$HOME" | wc -l)"
		echo "root $(ls -A /root 2>/dev/null | wc -l)"
		for f in ` + strings.Join(masked, " ") + `; do echo "mounted-over-$f $(grep -c " /proc/$f " /proc/self/mountinfo)"; done
		echo END`
	read := func(r result) map[string]int {
		t.Helper()
		if r.code != 0 || !strings.HasSuffix(r.stdout, "END\n") {
			t.Fatalf("the probe script did not run to its end: %v", r)
		}
		got := map[string]int{}
		for _, line := range strings.Split(r.stdout, "\n") {
			if k, v, ok := strings.Cut(line, " "); ok {
				got[k], _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		return got
	}
	// Positive control: on the host the same files have content (timer_list
	// only where this user may read it; the mount check covers it elsewhere).
	if b, err := os.ReadFile("/proc/timer_list"); err != nil || len(b) == 0 {
		t.Logf("host /proc/timer_list unreadable here (%v): only the mount over it shows the mask", err)
	}
	// The real home is replaced by an empty private one; /proc/kcore and
	// friends have something mounted over them (kcore is unreadable without
	// CAP_SYS_RAWIO anyway, so /proc/timer_list's bytes carry the claim).
	got := read(e.sh(script))
	for _, f := range append(files, "home", "root") {
		if got[f] != 0 {
			t.Errorf("%s: %d bytes or entries visible inside, want none", f, got[f])
		}
	}
	for _, f := range masked {
		if got["mounted-over-"+f] < 1 {
			t.Errorf("nothing mounted over /proc/%s", f)
		}
	}
	// Even with the home as the workspace, credentials stay hidden; the rest
	// is there. (airlock's config dir is put elsewhere: a bind workspace may
	// not hold it, TestASandboxCannotWriteTheConfigLaterRunsObey.)
	c := e.cmd("run", "-q", "-w", e.home, "--", "sh", "-c", script)
	c.Env = append(c.Env, "XDG_CONFIG_HOME="+filepath.Join(filepath.Dir(e.home), "config"))
	got = read(e.runCmd(c))
	for _, f := range files[:3] {
		if got[f] != 0 {
			t.Errorf("with home as workspace, %s: %d bytes visible", f, got[f])
		}
	}
	if got["~/notes.txt"] != len("CANARY-HOME") {
		t.Fatalf("with home as workspace, notes.txt should be readable: %v", got)
	}
	// Nor through --ro, while --ro of another dir of the home does show it.
	plant("docs/readme", "CANARY-DOCS")
	if r := e.run("run", "-q", "--ro", filepath.Join(e.home, "docs"), "--", "cat", filepath.Join(e.home, "docs/readme")); r.code != 0 || r.stdout != "CANARY-DOCS" {
		t.Fatalf("positive control: --ro of a plain dir should expose it: %v", r)
	}
	r := e.run("run", "-q", "--ro", filepath.Join(e.home, ".ssh"), "--", "sh", "-c", "cat "+filepath.Join(e.home, ".ssh/id_ed25519")+" 2>/dev/null; echo END")
	if r.code != 0 || strings.Contains(r.stdout, "CANARY") || r.stdout != "END\n" {
		t.Fatalf("--ro exposed a credential dir: %v", r)
	}
	// The state dir (control sockets of other sandboxes) is not reachable
	// either, though on the host it holds this very sandbox.
	r = e.sh("ls -A " + e.state + " 2>/dev/null | wc -l; echo END")
	if r.code != 0 || r.stdout != "0\nEND\n" {
		t.Fatalf("state dir visible inside: %v", r)
	}
	if ents, _ := os.ReadDir(e.state); len(ents) == 0 {
		t.Fatal("positive control: the state dir is empty on the host")
	}
}

func TestProcAndSysCannotChangeHostSettings(t *testing.T) {
	e := newEnv(t)
	r := e.sh(`
		v=$(cat /proc/sys/kernel/printk_ratelimit)
		if echo "$v" > /proc/sys/kernel/printk_ratelimit 2>/dev/null; then echo WROTE-SYSCTL; fi
		if echo h > /proc/sysrq-trigger 2>/dev/null; then echo WROTE-SYSRQ; fi
		if echo 0 > /sys/kernel/mm/ksm/run 2>/dev/null; then echo WROTE-SYS; fi
		if mount -o remount,rw / 2>/dev/null; then echo REMOUNTED; fi
		if mount -t tmpfs none /mnt 2>/dev/null; then echo MOUNTED; fi
		echo done`)
	if !strings.Contains(r.stdout, "done") || strings.Contains(r.stdout, "WROTE") || strings.Contains(r.stdout, "MOUNT") {
		t.Fatalf("host setting changed from inside: %v", r)
	}
}

func TestNoPrivilegeInside(t *testing.T) {
	e := newEnv(t)
	r := e.sh(`grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp|Seccomp_filters):' /proc/self/status
		python3 -c 'import ctypes; print("Securebits:", ctypes.CDLL(None).prctl(27, 0, 0, 0, 0))'  # PR_GET_SECUREBITS`)
	want := map[string]string{"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2",
		// NOROOT, NO_SETUID_FIXUP, NO_CAP_AMBIENT_RAISE, each locked, and KEEP_CAPS locked off.
		"Securebits": "239", "Seccomp_filters": "1"}
	if testBackend() == "docker" {
		// The runtime dropped the capabilities and locking securebits needs
		// CAP_SETPCAP; docker's default seccomp profile and ours are both installed.
		want["Securebits"], want["Seccomp_filters"] = "0", "2"
	}
	if testBackend() == "kubernetes" {
		// The guest locks the securebits with the CAP_SETPCAP the Pod gave
		// it for that; the runtime's RuntimeDefault filter and ours.
		want["Seccomp_filters"] = "2"
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		k, v, _ := strings.Cut(line, ":")
		seen[k] = true
		if v = strings.TrimSpace(v); v != want[k] {
			t.Errorf("%s = %s, want %s", k, v, want[k])
		}
	}
	if r.code != 0 || len(seen) != len(want) {
		t.Fatalf("want exit 0 and all of %v: %v", want, r)
	}
	// ptrace, keyrings, bpf, new user namespaces: refused with EPERM.
	// Arguments are chosen (as in internal/seccomp's probes) so that without
	// the filter each fails differently or succeeds: the control run on the
	// host, with no filter, shows it.
	probe := `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def call(name, *args):
    r = getattr(libc, name)(*args)
    return "ok" if r >= 0 else os.strerror(ctypes.get_errno())
print("ptrace", call("ptrace", 2, os.getpid(), 0, 0))  # PTRACE_PEEKDATA on itself: ESRCH
print("keyctl", call("syscall", 250, 9999, 0, 0, 0))   # keyctl, bad op: EOPNOTSUPP
print("bpf", call("syscall", 321, 9999, 0, 0))         # bpf, bad cmd: EINVAL
print("unshare", call("unshare", 0x10000000))          # CLONE_NEWUSER: ok (last)
print("END")`
	control, err := exec.Command("python3", "-c", probe).Output()
	if err != nil || !strings.HasSuffix(string(control), "END\n") {
		t.Fatalf("control run on the host: %v\n%s", err, control)
	}
	r = e.run("run", "-q", "--", "python3", "-c", probe)
	if r.code != 0 || !strings.HasSuffix(r.stdout, "END\n") {
		t.Fatalf("probe: %v", r)
	}
	for _, name := range []string{"ptrace", "keyctl", "bpf", "unshare"} {
		if strings.Contains(string(control), name+" Operation not permitted") {
			t.Logf("%s: EPERM on the host too, so this probe shows nothing here:\n%s", name, control)
			continue
		}
		if !strings.Contains(r.stdout, name+" Operation not permitted") {
			t.Errorf("%s was not refused with EPERM: %v\nhost: %s", name, r, control)
		}
	}
}

// The sandbox's PID 1 (airlock's guest) is locked down on every thread: a
// thread left out would be a capability or a syscall the filter refuses
// within reach of whatever takes over the guest.
func TestEveryThreadOfTheSandboxsAgentIsLockedDown(t *testing.T) {
	e := newEnv(t)
	r := e.sh(`for t in /proc/1/task/*; do grep -E '^(CapPrm|CapEff|CapAmb|NoNewPrivs|Seccomp):' $t/status | tr -d '\t' | tr '\n' ' '; echo; done`)
	if r.code != 0 {
		t.Fatalf("read PID 1's threads: %v", r)
	}
	threads := strings.Split(strings.TrimSpace(r.stdout), "\n")
	want := "CapPrm:0000000000000000 CapEff:0000000000000000 CapAmb:0000000000000000 NoNewPrivs:1 Seccomp:2"
	for _, th := range threads {
		if strings.TrimSpace(th) != want {
			t.Errorf("a thread of PID 1: %q, want %q", th, want)
		}
	}
	// A container's guest shares its pids limit with the commands, and keeps
	// 8 idle threads beside the runtime's own, locked down as they are.
	if testBackend() == "docker" && len(threads) < 9 {
		t.Errorf("PID 1 has %d threads, want its spare ones too:\n%s", len(threads), r.stdout)
	}
}

// --pids binds the commands, and leaves the sandbox's PID 1 room above it
// (a fork bomb that fills the commands' limit cannot starve the guest's
// runtime of a thread: TestForkBombIsContained): a command's process limit
// is the one asked for from its start, PID 1's is higher, and no command
// can raise its limit past the sandbox's (2×77+32).
func TestCommandsGetTheProcessLimitAndTheGuestRoomAboveIt(t *testing.T) {
	if testBackend() == "docker" {
		t.Skip("a container's pids limit binds its guest and commands together (the guest keeps spare threads)")
	}
	e := newEnv(t)
	r := e.run("run", "-q", "--pids", "77", "--", "bash", "-c",
		`grep 'Max processes' /proc/self/limits; grep 'Max processes' /proc/1/limits
		ulimit -S -u 70 && ulimit -S -u 77 && echo LOWERED-AND-BACK
		ulimit -u 187 2>/dev/null && echo RAISED; true`)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) < 2 {
		t.Fatalf("read the limits: %v", r)
	}
	// The hard limit comes down to 77 just after the start, which a child
	// forked at once may miss; the soft one holds from the first instruction.
	if f := strings.Fields(lines[0]); len(f) < 4 || f[2] != "77" {
		t.Errorf("a command's process limit: %q, want 77", lines[0])
	}
	f := strings.Fields(lines[1])
	if len(f) < 4 {
		t.Fatalf("PID 1's process limit: %q", lines[1])
	}
	if n, err := strconv.Atoi(f[2]); f[2] != "unlimited" && (err != nil || n <= 77) {
		t.Errorf("PID 1's process limit: %q, want more than the commands' 77", lines[1])
	}
	// The control: a change within the limits goes through.
	if !strings.Contains(r.stdout, "LOWERED-AND-BACK") {
		t.Errorf("a command could not lower its soft limit and raise it back to 77: %v", r)
	}
	if strings.Contains(r.stdout, "RAISED") {
		t.Errorf("a command raised its process limit past the sandbox's: %v", r)
	}
}

func TestForkBombIsContained(t *testing.T) {
	e := newEnv(t)
	alive := func() time.Duration {
		t0 := time.Now()
		if out, err := exec.Command("sh", "-c", "echo alive").Output(); err != nil || string(out) != "alive\n" {
			t.Fatalf("host could not start a process: %v", err)
		}
		return time.Since(t0)
	}
	// The baseline: what starting a process costs on this machine now.
	base := alive()
	start := time.Now()
	done := make(chan result, 1)
	go func() {
		done <- e.run("run", "-q", "--pids", "200", "--timeout", "4s", "--", "bash", "-c", `f(){ f | f & }; f; sleep 10`)
	}()
	// The host keeps working while the bomb runs.
	time.Sleep(1500 * time.Millisecond)
	if d, limit := alive(), max(2*time.Second, 50*base); d > limit {
		t.Fatalf("host process took %s to run during the fork bomb (%s before it; limit %s)", d, base, limit)
	}
	r := <-done
	if r.code != 124 {
		t.Fatalf("fork bomb sandbox: want timeout exit 124, got %v", r)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("fork bomb sandbox took %s to end", d)
	}
}

func TestMemoryHogIsContained(t *testing.T) {
	e := newEnv(t)
	r := e.run("run", "-q", "--memory", "64m", "--", "python3", "-c", "b = bytearray(1 << 30); print('ALLOCATED', len(b))")
	// Killed by the OOM killer (cgroup limit: 128+SIGKILL), or python's
	// MemoryError (rlimit, unprivileged without a delegated cgroup); not any
	// other failure, such as a sandbox that did not start (125) or no python (127).
	oom := r.code == 137
	rlimit := r.code == 1 && strings.Contains(r.stderr, "MemoryError")
	if strings.Contains(r.stdout, "ALLOCATED") || !(oom || rlimit) {
		t.Fatalf("1 GiB under a 64 MiB limit: want the OOM kill (137) or a MemoryError, got %v", r)
	}
	if os.Getuid() == 0 && testBackend() != "docker" && !oom {
		t.Fatalf("as root the cgroup limit applies: want the OOM kill (137), got %v", r)
	}
	if r := e.run("run", "-q", "--memory", "256m", "--", "python3", "-c", "b = bytearray(32 << 20); print('ok')"); r.code != 0 {
		t.Fatalf("32 MiB under 256 MiB should work: %v", r)
	}
}

func TestNoOrphansWhenSupervisorIsKilled(t *testing.T) {
	e := newEnv(t)
	marker := fmt.Sprintf("%d.%d", 4000+os.Getpid()%1000, time.Now().UnixNano()%1000)
	c := e.cmd("run", "-q", "--", "sh", "-c", "sleep "+marker+" & sleep "+marker+"; wait")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(testutil.ProcsWith(marker)) >= 2 })
	c.Process.Kill() // SIGKILL: no chance to clean up
	c.Wait()
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(testutil.ProcsWith(marker)) == 0 })
}

func TestConcurrentSandboxesCannotSeeEachOther(t *testing.T) {
	e := newEnv(t)
	a := e.run("run", "-d", "--name", "a")
	b := e.run("run", "-d", "--name", "b")
	if a.code != 0 || b.code != 0 {
		t.Fatalf("start: %v / %v", a, b)
	}
	defer e.run("kill", "--all")
	if r := e.run("exec", "a", "--", "sh", "-c", "echo secret > /tmp/a-only; (sleep 300 >/dev/null 2>&1 &) ; echo started"); r.code != 0 {
		t.Fatalf("exec a: %v", r)
	}
	// b lists its own /tmp and processes: the listing must be there (its own
	// ps is in it), and a's are not.
	r := e.run("exec", "b", "--", "sh", "-c", "echo b-was-here > /tmp/b-only; ls -A /tmp; "+listProcs+"; echo END")
	if r.code != 0 || !strings.Contains(r.stdout, "b-only") || !strings.Contains(r.stdout, "b-was-here") || !strings.HasSuffix(r.stdout, "END\n") {
		t.Fatalf("exec b: %v", r)
	}
	if strings.Contains(r.stdout, "a-only") || strings.Contains(r.stdout, "sleep 300") {
		t.Fatalf("sandbox b sees a's files or processes: %v", r)
	}
	// Positive control: a sees its own sleep.
	if r := e.run("exec", "a", "--", "sh", "-c", listProcs); r.code != 0 || !strings.Contains(r.stdout, "sleep 300") {
		t.Fatalf("a does not see its own sleep: %v", r)
	}
	if r := e.run("exec", "a", "--", "cat", "/tmp/a-only"); r.stdout != "secret\n" {
		t.Fatalf("a lost its own file: %v", r)
	}
}

// listProcs prints every visible process's command line, one per line,
// without ps (the minimal docker image has none).
const listProcs = `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline; echo; done`

func TestDetachedLifecycle(t *testing.T) {
	e := newEnv(t)
	r := e.run("run", "-d", "--name", "dev")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || len(id) != 12 {
		t.Fatalf("run -d: %v", r)
	}
	if r := e.run("exec", "dev", "--", "sh", "-c", "echo out; echo err >&2; exit 3"); r.code != 3 || r.stdout != "out\n" || r.stderr != "err\n" {
		t.Fatalf("exec: %v", r)
	}
	if r := e.run("exec", id[:5], "--", "hostname"); strings.TrimSpace(r.stdout) != "airlock-"+id[:8] {
		t.Fatalf("exec by id prefix, hostname: %v", r)
	}
	r = e.run("ls", "--json")
	var list []struct {
		ID     string `json:"id"`
		Name   string `json:"name"`
		Status struct {
			State string `json:"state"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 1 || list[0].Status.State != "running" || list[0].Name != "dev" {
		t.Fatalf("ls --json: %v (%v)", r, err)
	}
	if r := e.run("rm", "dev"); r.code != 125 || !strings.Contains(r.stderr, "running") {
		t.Fatalf("rm of a running sandbox should refuse: %v", r)
	}
	if r := e.run("kill", "dev"); r.code != 0 {
		t.Fatalf("kill: %v", r)
	}
	if r := e.run("exec", "dev", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, "not running") {
		t.Fatalf("exec after kill: %v", r)
	}
	if r := e.run("rm", "dev"); r.code != 0 {
		t.Fatalf("rm: %v", r)
	}
	if r := e.run("ls", "-q"); r.code != 125 {
		t.Fatalf("unknown flag should exit 125: %v", r)
	}
	if ents := e.sandboxDirs(); len(ents) != 0 {
		t.Fatalf("state dir not empty after rm: %v", ents)
	}
}

func TestDetachedLogsKeepOutput(t *testing.T) {
	e := newEnv(t)
	r := e.run("run", "-d", "--name", "job", "--", "sh", "-c", "echo from-job; exit 4")
	if r.code != 0 {
		t.Fatalf("run -d: %v", r)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return strings.Contains(e.run("ls").stdout, "exited (4)") })
	if r := e.run("logs", "job"); !strings.Contains(r.stdout, "from-job") {
		t.Fatalf("logs: %v", r)
	}
}

func TestCrashedSupervisorIsDetectedAndPruned(t *testing.T) {
	e := newEnv(t)
	crashSupervisor(t, e, "victim", 5*time.Second)
	if r := e.run("prune"); r.code != 0 || !strings.Contains(r.stdout, "removed 1") {
		t.Fatalf("prune: %v", r)
	}
	if ents := e.sandboxDirs(); len(ents) != 0 {
		t.Fatalf("state dir not empty after prune: %v", ents)
	}
}

func TestSignalsReachTheCommand(t *testing.T) {
	e := newEnv(t)
	c := e.cmd("run", "-q", "--", "sh", "-c", `trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.05; done`)
	var out lockedBuffer
	c.Stdout = &out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return strings.Contains(out.String(), "ready") })
	c.Process.Signal(syscall.SIGTERM) // to the supervisor, which forwards it
	err := c.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 || !strings.Contains(out.String(), "got-term") {
		t.Fatalf("want the trap to run and exit 7; got %v, output %q", err, out.String())
	}
}

func TestSignalsReachAnExecdCommand(t *testing.T) {
	e := newEnv(t)
	if r := e.run("run", "-d", "--name", "sig"); r.code != 0 {
		t.Fatalf("run -d: %v", r)
	}
	defer e.run("kill", "sig")
	c := e.cmd("exec", "sig", "--", "sh", "-c", `trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.05; done`)
	var out lockedBuffer
	c.Stdout = &out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return strings.Contains(out.String(), "ready") })
	c.Process.Signal(syscall.SIGTERM) // to airlock exec, which passes it on
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		c.Process.Kill()
		t.Fatalf("airlock exec still runs 10 s after SIGTERM; output %q", out.String())
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 || !strings.Contains(out.String(), "got-term") {
		t.Fatalf("want the trap to run and exit 7; got %v, output %q", err, out.String())
	}
}

// lockedBuffer is a bytes.Buffer safe to read while exec.Cmd copies into it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestTimeoutStopsTheSandbox(t *testing.T) {
	e := newEnv(t)
	start := time.Now()
	r := e.run("run", "--timeout", "500ms", "--", "sleep", "30")
	if r.code != 124 || !strings.Contains(r.stderr, "--timeout") {
		t.Fatalf("want exit 124 with a message: %v", r)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("timeout took %s", d)
	}
}

func TestNoDeleteKeepsWorkspaceFiles(t *testing.T) {
	e := newEnv(t)
	os.WriteFile(filepath.Join(e.ws, "keep.txt"), []byte("x"), 0o644)
	r := e.sh(`echo more >> keep.txt && echo appended; echo new > new.txt && echo created; rm -f keep.txt 2>/dev/null && echo DELETED; mv new.txt renamed.txt 2>/dev/null && echo RENAMED; true`, "--no-delete")
	if !strings.Contains(r.stdout, "appended") || !strings.Contains(r.stdout, "created") || strings.Contains(r.stdout, "DELETED") || strings.Contains(r.stdout, "RENAMED") {
		t.Fatalf("--no-delete: %v", r)
	}
	if _, err := os.Stat(filepath.Join(e.ws, "keep.txt")); err != nil {
		t.Fatal("keep.txt was deleted")
	}
}

func TestEnvironmentKeepsSecretsOut(t *testing.T) {
	e := newEnv(t)
	c := e.cmd("run", "-q", "-e", "PASSED", "-e", "SET=value", "--", "env")
	c.Env = e.environ("AWS_SECRET_ACCESS_KEY=CANARY-KEY", "GITHUB_TOKEN=CANARY-TOKEN", "PASSED=yes")
	r := e.runCmd(c)
	if strings.Contains(r.stdout, "CANARY") {
		t.Fatalf("secret variable passed: %v", r)
	}
	for _, want := range []string{"PASSED=yes", "SET=value", "HOME=" + e.home, "LANG=C.UTF-8"} {
		if !strings.Contains(r.stdout, want+"\n") {
			t.Errorf("missing %s in %v", want, r)
		}
	}
}

func TestBadInputGivesOneClearLine(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"run", "--bogus", "--", "true"}, 125, "unknown flag: --bogus"},
		{[]string{"run"}, 125, "no command given"},
		{[]string{"run", "-w", "/nonexistent/dir", "--", "true"}, 125, "does not exist"},
		{[]string{"run", "--", "no-such-command-xyz"}, 127, "command not found"},
		{[]string{"run", "-t", "--", "no-such-command-xyz"}, 127, "command not found"},
		{[]string{"run", "--", "/etc/hostname"}, 126, "/etc/hostname"},
		{[]string{"run", "--memory", "lots", "--", "true"}, 125, "--memory"},
		{[]string{"exec", "nosuch", "--", "true"}, 125, "nosuch"},
	}
	for _, c := range cases {
		r := e.run(c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stderr, "goroutine") {
			t.Errorf("airlock %v = %v, want exit %d and %q", c.args, r, c.code, c.want)
		}
		if first := strings.SplitN(strings.TrimSpace(r.stderr), "\n", 2)[0]; !strings.HasPrefix(first, "airlock: ") {
			t.Errorf("airlock %v: first stderr line %q should start with 'airlock: '", c.args, first)
		}
	}
	if ents := e.sandboxDirs(); len(ents) != 0 {
		t.Fatalf("bad input left state behind: %v", ents)
	}
}

func TestPTYRunsInteractiveShell(t *testing.T) {
	e := newEnv(t)
	c := e.cmd("run", "-q", "-t", "--", "sh", "-c", `tty; stty size; trap 'echo GOT-INT; exit 3' INT; echo READY; while :; do sleep 0.05; done`)
	ptm, err := pty.StartWithSize(c, &pty.Winsize{Rows: 33, Cols: 111})
	if err != nil {
		t.Fatal(err)
	}
	defer ptm.Close()
	lines := make(chan string, 32)
	go func() {
		sc := bufio.NewScanner(ptm)
		for sc.Scan() {
			lines <- strings.TrimSpace(sc.Text())
		}
		close(lines)
	}()
	expect := expecter(t, lines, 10*time.Second)
	expect("/dev/pts/")
	expect("33 111")
	expect("READY")
	ptm.Write([]byte{3}) // Ctrl-C reaches the sandbox's foreground process
	expect("GOT-INT")
	err = c.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("exit = %v, want 3", err)
	}
	io.Copy(io.Discard, ptm)
}

// TestUnprivileged re-runs the suite as uid 65534 when it runs as root.
func TestUnprivileged(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("runs only as root, to re-run the suite as an unprivileged user")
	}
	u := testUpstream(t) // on port 443, which only root can bind: started here for the child
	testutil.RerunAsNobody(t, testutil.Nobody{Env: append([]string{"AIRLOCK_TEST_BIN=" + airlockBin}, u.childEnv(t)...), Timeout: 15 * time.Minute})
}

// expecter returns a function that waits (up to limit each time) for a line
// containing want among lines, failing the test with what it saw if none comes.
func expecter(t *testing.T, lines <-chan string, limit time.Duration) func(want string) {
	var seen []string
	return func(want string) {
		t.Helper()
		timeout := time.After(limit)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("output ended before %q; saw %q", want, seen)
				}
				seen = append(seen, l)
				if strings.Contains(l, want) {
					return
				}
			case <-timeout:
				t.Fatalf("no %q within %s; saw %q", want, limit, seen)
			}
		}
	}
}

// crashSupervisor starts a detached sandbox called name, SIGKILLs its
// supervisor, waits until ls calls it crashed, and returns its ID.
func crashSupervisor(t *testing.T, e *env, name string, limit time.Duration) string {
	t.Helper()
	r := e.run("run", "-d", "--name", name, "--", "sleep", "300")
	if r.code != 0 {
		t.Fatalf("run -d: %v", r)
	}
	var got struct {
		PID int `json:"pid"`
	}
	json.Unmarshal([]byte(e.run("get", name).stdout), &got)
	if got.PID == 0 {
		t.Fatal("no supervisor pid")
	}
	syscall.Kill(got.PID, syscall.SIGKILL)
	testutil.WaitFor(t, limit, func() bool { return strings.Contains(e.run("ls").stdout, "crashed") })
	return strings.TrimSpace(r.stdout)
}

// The host's network interfaces (names, addresses, counters) are not the
// sandbox's business: /sys and /proc show only its own namespace's.
func TestHostNetworkInterfacesAreInvisible(t *testing.T) {
	e := newEnv(t)
	r := e.sh(`ls /sys/class/net; tail -n +3 /proc/net/dev | cut -d: -f1; ls /sys/fs/cgroup >/dev/null && echo cgroups-visible`)
	if r.code != 0 {
		t.Fatal(r)
	}
	for _, f := range strings.Fields(r.stdout) {
		if f != "lo" && f != "cgroups-visible" {
			t.Errorf("interface %q visible inside: %v", f, r)
		}
	}
	if !strings.Contains(r.stdout, "cgroups-visible") {
		t.Errorf("/sys/fs/cgroup is gone: %v", r)
	}
}
