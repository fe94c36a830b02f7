//go:build linux

package main

// Docker backend tests, against a real dockerd. TestDockerBackend (as root)
// makes sure the sandbox image exists — building it with `airlock images
// build` when it does not, which tests that command — then runs this whole
// suite again with AIRLOCK_TEST_BACKEND=docker as uid 65534 in the docker
// group (an ordinary user allowed to use Docker): every `airlock run` of the
// native tests gets --backend docker, and the TestDocker* tests below, which
// skip otherwise, check what only a container has.

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/airlock-dev/airlock/internal/backend/docker"
	"github.com/airlock-dev/airlock/internal/dockerengine"
	"github.com/airlock-dev/airlock/internal/testutil"
)

const testImage = "airlock/minimal:latest"

func testBackend() string { return os.Getenv("AIRLOCK_TEST_BACKEND") }

// dockerOnly skips tests that need the docker backend under test.
func dockerOnly(t *testing.T) *client.Client {
	t.Helper()
	if testBackend() != "docker" {
		t.Skip("docker backend only: TestDockerBackend runs it")
	}
	cli, err := docker.Connect(context.Background())
	if err != nil {
		t.Fatalf("the docker run of the suite cannot reach the engine: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// TestDockerBackend re-runs the suite against the docker backend.
func TestDockerBackend(t *testing.T) {
	if os.Getuid() != 0 || os.Getenv("AIRLOCK_TEST_BIN") != "" {
		t.Skip("runs only as root, to build the image and re-run the suite with --backend docker as a user in the docker group")
	}
	cli, err := docker.Connect(context.Background())
	if err != nil {
		t.Skipf("dockerd is not reachable, so the docker backend is not tested: %v", err)
	}
	defer cli.Close()
	group, err := user.LookupGroup("docker")
	if err != nil {
		t.Fatalf("no docker group (the docker.io package makes it): %v", err)
	}
	img := os.Getenv("AIRLOCK_TEST_IMAGE")
	if img == "" {
		img = testImage
		if _, err := cli.ImageInspect(context.Background(), img); err != nil {
			t.Run("ImagesBuild", func(t *testing.T) { testImagesBuild(t, cli) })
		}
	}
	u := testUpstream(t)
	env := append([]string{"AIRLOCK_TEST_BIN=" + airlockBin, "AIRLOCK_TEST_BACKEND=docker", "AIRLOCK_TEST_IMAGE=" + img}, u.childEnv(t)...)
	// As uid 65534 in the docker group; every test runs (not this run's -test.run).
	testutil.RerunAsNobody(t, testutil.Nobody{Run: ".", Env: env, Groups: []string{group.Gid}, Timeout: 10 * time.Minute})
}

// testImagesBuild builds the minimal image the way a user does.
func testImagesBuild(t *testing.T, cli *client.Client) {
	if _, err := exec.LookPath("debootstrap"); err != nil {
		t.Fatalf("%s is missing and debootstrap is not installed to build it (apt-get install debootstrap)", testImage)
	}
	e := newEnv(t)
	start := time.Now()
	r := e.run("images", "build", "--variant", "minimal")
	t.Logf("airlock images build took %s:\n%s", time.Since(start).Round(time.Second), r.stderr)
	if r.code != 0 || strings.TrimSpace(r.stdout) != testImage {
		t.Fatalf("airlock images build: %v", r)
	}
	for _, want := range []string{"[1/3] debootstrap", "[2/3] importing", "[3/3] done"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("progress lacks %q", want)
		}
	}
	in, err := cli.ImageInspect(context.Background(), testImage)
	if err != nil || in.Config == nil || in.Config.Labels[dockerengine.LabelImage] != "minimal" {
		t.Fatalf("built image: %v, labels %v", err, in.Config)
	}
	if r := e.run("images", "ls"); !strings.Contains(r.stdout, testImage) || !strings.Contains(r.stdout, "minimal") {
		t.Errorf("images ls: %v", r)
	}
}

// containersOf lists the containers made for the sandboxes of e's state dir.
func containersOf(t *testing.T, cli *client.Client, e *env) []container.Summary {
	t.Helper()
	cs, err := cli.ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", docker.LabelState+"="+e.state))})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func TestDockerContainerIsHardened(t *testing.T) {
	cli := dockerOnly(t)
	e := newEnv(t)
	r := e.run("run", "-d", "--memory", "256m", "--cpus", "0.5", "--pids", "100", "--", "sleep", "300")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 {
		t.Fatalf("run -d: %v", r)
	}
	in, err := cli.ContainerInspect(context.Background(), "airlock-"+id)
	if err != nil {
		t.Fatalf("no container named airlock-%s: %v", id, err)
	}
	hc := in.HostConfig
	check := func(what string, ok bool, got any) {
		t.Helper()
		if !ok {
			t.Errorf("%s: got %v", what, got)
		}
	}
	check("read-only rootfs", hc.ReadonlyRootfs, hc.ReadonlyRootfs)
	check("network none", hc.NetworkMode == "none", hc.NetworkMode)
	check("cap-drop ALL", len(hc.CapDrop) == 1 && strings.EqualFold(hc.CapDrop[0], "ALL") && len(hc.CapAdd) == 0, hc.CapDrop)
	check("no-new-privileges", strings.Contains(strings.Join(hc.SecurityOpt, ","), "no-new-privileges"), hc.SecurityOpt)
	check("seccomp not unconfined", !strings.Contains(strings.Join(hc.SecurityOpt, ","), "seccomp=unconfined"), hc.SecurityOpt)
	check("not privileged", !hc.Privileged, hc.Privileged)
	check("memory limit", hc.Memory == 256<<20, hc.Memory)
	check("cpu limit", hc.NanoCPUs == 5e8, hc.NanoCPUs)
	check("pids limit", hc.PidsLimit != nil && *hc.PidsLimit == 100, hc.PidsLimit)
	check("tmpfs /tmp noexec,nosuid", strings.Contains(hc.Tmpfs["/tmp"], "noexec") && strings.Contains(hc.Tmpfs["/tmp"], "nosuid"), hc.Tmpfs)
	check("label", in.Config.Labels[docker.LabelSandbox] == id, in.Config.Labels)
	uid, _, _ := strings.Cut(in.Config.User, ":")
	check("non-root user", uid != "" && uid != "0" && uid != "root", in.Config.User)
	// And from inside: the workspace at its own path, writable; nothing else.
	r = e.run("exec", id, "--", "sh", "-c", `id -u; pwd; touch ok && echo ws-ok; touch /usr/x 2>/dev/null && echo ROOTFS-WRITABLE
		cp /bin/true /tmp/t && /tmp/t 2>/dev/null && echo TMP-EXEC; cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '`)
	lines := strings.Fields(r.stdout)
	if r.code != 0 || len(lines) < 4 || lines[0] == "0" || lines[1] != e.ws || lines[2] != "ws-ok" {
		t.Fatalf("inside: %v", r)
	}
	if strings.Contains(r.stdout, "ROOTFS-WRITABLE") || strings.Contains(r.stdout, "TMP-EXEC") {
		t.Errorf("rootfs writable or /tmp executable: %v", r)
	}
	if ifaces := strings.Join(lines[3:], " "); ifaces != "lo" {
		t.Errorf("network interfaces inside: %q, want only lo", ifaces)
	}
}

func TestDockerSandboxesCannotReachEachOther(t *testing.T) {
	dockerOnly(t)
	e := newEnv(t)
	ids := map[string]string{}
	for _, n := range []string{"a", "b"} {
		r := e.run("run", "-d", "--name", n)
		if r.code != 0 {
			t.Fatalf("run -d %s: %v", n, r)
		}
		ids[n] = strings.TrimSpace(r.stdout)
	}
	// a listens on its loopback; b's loopback is its own.
	if r := e.run("exec", "a", "--", "sh", "-c", "(python3 -m http.server -b 127.0.0.1 8765 >/dev/null 2>&1 &); sleep 1; curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8765/"); r.stdout != "200" {
		t.Fatalf("a's own server: %v", r)
	}
	// b's answer must be complete (it ends with END and lists b's own
	// processes) for the absence of a's server and processes to mean anything.
	r := e.run("exec", "b", "--", "sh", "-c", "curl -s -m 3 -o /dev/null -w '%{http_code}' http://127.0.0.1:8765/; echo; ls -A /run/airlock; "+listProcs+"; echo END")
	if r.code != 0 || !strings.HasSuffix(r.stdout, "END\n") || !strings.Contains(r.stdout, "ls -A /run/airlock") {
		t.Fatalf("exec b: %v", r)
	}
	if first, _, _ := strings.Cut(r.stdout, "\n"); first != "000" {
		t.Fatalf("b's curl to 127.0.0.1:8765 got HTTP %q, want no connection (000): %v", first, r)
	}
	if strings.Contains(r.stdout, "http.server") || strings.Contains(r.stdout, ids["a"]) {
		t.Fatalf("b sees a's processes or control files: %v", r)
	}
}

func TestDockerCloseRemovesContainer(t *testing.T) {
	cli := dockerOnly(t)
	e := newEnv(t)
	if r := e.run("run", "--", "sh", "-c", "exit 3"); r.code != 3 {
		t.Fatalf("run: %v", r)
	}
	if cs := containersOf(t, cli, e); len(cs) != 0 {
		t.Fatalf("a finished foreground run left %d container(s)", len(cs))
	}
	if r := e.run("run", "-d", "--name", "k"); r.code != 0 {
		t.Fatalf("run -d: %v", r)
	}
	if cs := containersOf(t, cli, e); len(cs) != 1 || cs[0].State != "running" {
		t.Fatalf("running sandbox's container: %+v", cs)
	}
	if r := e.run("kill", "k"); r.code != 0 {
		t.Fatalf("kill: %v", r)
	}
	if cs := containersOf(t, cli, e); len(cs) != 0 {
		t.Fatalf("kill left %d container(s)", len(cs))
	}
}

func TestDockerCrashLeavesNothingAfterPrune(t *testing.T) {
	cli := dockerOnly(t)
	e := newEnv(t)
	crashSupervisor(t, e, "victim", 10*time.Second)
	// The guest lost its host: the container stops by itself, and stays for prune.
	testutil.WaitFor(t, 10*time.Second, func() bool {
		cs := containersOf(t, cli, e)
		return len(cs) == 1 && cs[0].State == "exited"
	})
	if r := e.run("prune"); r.code != 0 || !strings.Contains(r.stdout, "removed 1") {
		t.Fatalf("prune: %v", r)
	}
	if cs := containersOf(t, cli, e); len(cs) != 0 {
		t.Fatalf("prune left %d container(s)", len(cs))
	}
	// A container whose record is gone too (a crash between the two) is swept.
	id := crashSupervisor(t, e, "orphan", 10*time.Second)
	os.RemoveAll(filepath.Join(e.state, "sandboxes", id))
	if r := e.run("prune"); r.code != 0 || !strings.Contains(r.stdout, "removed 1 leftover container") {
		t.Fatalf("prune of an orphan container: %v", r)
	}
	if cs := containersOf(t, cli, e); len(cs) != 0 {
		t.Fatalf("prune left %d orphan container(s)", len(cs))
	}
}

func TestDockerBadInputLeavesNothing(t *testing.T) {
	cli := dockerOnly(t)
	e := newEnv(t)
	// An image whose /run is a file: the engine cannot make the mount points,
	// so the start fails after the container was created.
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "run", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
	tw.Write([]byte("x"))
	tw.Close()
	broken := fmt.Sprintf("airlock-test/broken:%d", os.Getpid())
	rc, err := cli.ImageImport(context.Background(), image.ImportSource{Source: &buf, SourceName: "-"}, broken, image.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	readImport(rc)
	defer cli.ImageRemove(context.Background(), broken, image.RemoveOptions{Force: true})

	cases := []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"missing image", []string{"run", "--image", "airlock-test/no-such-image:1", "--", "true"}, nil, "does not exist"},
		{"image that cannot start", []string{"run", "--image", broken, "--", "true"}, nil, "docker: "},
		{"no engine", []string{"run", "--", "true"}, []string{"DOCKER_HOST=unix:///nonexistent/docker.sock"}, "install Docker"},
		{"detached, missing image", []string{"run", "-d", "--image", "airlock-test/no-such-image:1"}, nil, "does not exist"},
	}
	for _, c := range cases {
		cmd := e.cmd(c.args...)
		cmd.Env = append(cmd.Env, c.env...)
		r := e.runCmd(cmd)
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		if r.code != 125 || !strings.Contains(r.stderr, c.want) || len(lines) != 1 || !strings.HasPrefix(lines[0], "airlock: ") {
			t.Errorf("%s: want exit 125 and one line with %q, got %v", c.name, c.want, r)
		}
		if cs := containersOf(t, cli, e); len(cs) != 0 {
			t.Errorf("%s: left %d container(s) behind", c.name, len(cs))
		}
		if ents := e.sandboxDirs(); len(ents) != 0 {
			t.Errorf("%s: left state behind: %v", c.name, ents)
		}
	}
}

func TestDockerInterruptedStartLeavesNothing(t *testing.T) {
	cli := dockerOnly(t)
	e := newEnv(t)
	// A first command creates the state dir: done first, so that the delays
	// below fall in the start of the run itself.
	if r := e.run("prune"); r.code != 0 {
		t.Fatalf("airlock prune: %v", r)
	}
	for _, delay := range []time.Duration{20 * time.Millisecond, 80 * time.Millisecond, 150 * time.Millisecond} {
		c := e.cmd("run", "--", "sleep", "30")
		var stderr lockedBuffer
		c.Stderr = &stderr
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(delay)
		c.Process.Signal(syscall.SIGINT)
		err := c.Wait()
		// 125: interrupted while starting; 130: started, and the signal
		// reached the command. Either way nothing may be left.
		if ee, ok := err.(*exec.ExitError); !ok || (ee.ExitCode() != 125 && ee.ExitCode() != 130) {
			t.Errorf("after %s: %v, stderr %q", delay, err, stderr.String())
		}
		if cs := containersOf(t, cli, e); len(cs) != 0 {
			t.Fatalf("SIGINT after %s left %d container(s); stderr %q", delay, len(cs), stderr.String())
		}
	}
}

func readImport(rc interface {
	Read([]byte) (int, error)
	Close() error
}) {
	defer rc.Close()
	var b bytes.Buffer
	b.ReadFrom(rc)
}

func TestDockerProxyTokenIsRequired(t *testing.T) {
	dockerOnly(t)
	u := testUpstream(t)
	e := newEnv(t)
	r := e.run(append(u.flags("--allow-host", "example.com"), "--", "sh", "-c", `
		curl -sS https://example.com/with-token
		curl -s -o /dev/null -w "none %{http_connect}\n" -x http://127.0.0.1:3128 https://example.com/
		curl -s -o /dev/null -w "wrong %{http_connect}\n" -x http://airlock:0000@127.0.0.1:3128 https://example.com/
		curl -s -o /dev/null -w "plain-none %{http_code}\n" -x http://127.0.0.1:3128 http://example.com/
		true`)...)
	for _, want := range []string{"echo \n", "\nnone 407", "wrong 407", "plain-none 407"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("missing %q in %v", want, r)
		}
	}
}

// TestDockerSocketWithoutPermission: a user who may not use Docker gets one
// line saying what to do, and exit 125.
func TestDockerSocketWithoutPermission(t *testing.T) {
	sock := "/var/run/docker.sock"
	if h, ok := strings.CutPrefix(os.Getenv("DOCKER_HOST"), "unix://"); ok {
		sock = h
	}
	if _, err := os.Stat(sock); err != nil {
		t.Skipf("no Docker socket at %s (dockerd is not running)", sock)
	}
	e := newEnv(t)
	c := e.cmd("run", "--backend", "docker", "--", "true")
	switch {
	case os.Getuid() == 0:
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Skip("setpriv not installed")
		}
		dir, err := os.MkdirTemp("", "airlock-nobody-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		os.Chmod(dir, 0o777)
		c.Args = append([]string{setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", airlockBin}, c.Args[1:]...)
		// The workspace beside the home, not the home: a bind workspace may
		// not hold airlock's config dir.
		ws := filepath.Join(dir, "ws")
		os.Mkdir(ws, 0o777)
		os.Chmod(ws, 0o777)
		c.Path, c.Dir = setpriv, ws
		c.Env = append(c.Env, "AIRLOCK_STATE_DIR="+filepath.Join(dir, "state"), "HOME="+dir)
	case testBackend() == "docker":
		t.Skip("this user may use Docker")
	}
	r := e.runCmd(c)
	if r.code != 125 || !strings.Contains(r.stderr, "permission denied on the Docker socket") || !strings.Contains(r.stderr, "docker group") ||
		len(strings.Split(strings.TrimSpace(r.stderr), "\n")) != 1 {
		t.Fatalf("want exit 125 and one line about the socket's permission: %v", r)
	}
}

// TestDockerRootWorkspace: root runs a workspace of root's, as `sudo airlock
// run --backend docker` in a root-owned directory does. The container runs
// as uid 0 — it can write the workspace, and what it writes is root's — but
// with no capability at all: root without power. It runs as root, beside the
// suite's docker re-run (which is uid 65534's).
func TestDockerRootWorkspace(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: it runs airlock as root in a workspace of root's")
	}
	cli, err := docker.Connect(context.Background())
	if err != nil {
		t.Skipf("dockerd is not reachable, so the docker backend is not tested: %v", err)
	}
	defer cli.Close()
	img := os.Getenv("AIRLOCK_TEST_IMAGE")
	if img == "" {
		img = testImage
	}
	if _, err := cli.ImageInspect(context.Background(), img); err != nil {
		t.Skipf("no image %s (TestDockerBackend builds it, as `airlock images build --variant minimal` does): %v", img, err)
	}
	e := newEnv(t)
	ws := filepath.Join(t.TempDir(), "rootws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(ws, 0, 0); err != nil {
		t.Fatal(err)
	}
	// A file of another user's, which root without power may not touch, and
	// one only that user may read.
	for name, mode := range map[string]os.FileMode{"other": 0o644, "secret": 0o600} {
		p := filepath.Join(ws, name)
		if err := os.WriteFile(p, []byte(name), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, 1234, 1234); err != nil {
			t.Fatal(err)
		}
	}
	script := `touch f && id -u && grep -E '^Cap(Eff|Prm|Bnd|Amb|Inh):' /proc/self/status || exit 1
grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status
for p in /etc/x /usr/x /run/airlock/x /run/airlock/ctl/x /dev/x; do touch "$p" 2>/dev/null && echo "WROTE $p"; done
mount -t tmpfs none /mnt 2>/dev/null && echo "SHELL mount ok"
chown 0:0 other 2>/dev/null && echo "SHELL chown ok"
python3 -c '
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def call(name, f):
    try:
        f()
        print(name, "ok")
    except OSError as e:
        print(name, errno.errorcode[e.errno])
def c(name, r):
    print(name, "ok" if r == 0 else errno.errorcode[ctypes.get_errno()])
c("mount", libc.mount(b"none", b"/mnt", b"tmpfs", 0, None))
call("chown-other", lambda: os.chown("other", 0, 0))
call("chown-own", lambda: os.chown("f", 1234, -1))
call("chmod-other", lambda: os.chmod("other", 0o777))
call("read-secret", lambda: open("secret").read())
call("chmod-airlock", lambda: os.chmod("/run/airlock/airlock", 0o777))
call("setuid", lambda: os.setuid(1234))
c("unshare-user", libc.unshare(0x10000000))
'
echo MOUNTINFO
cat /proc/self/mountinfo`
	c := e.cmd("run", "--backend", "docker", "--image", img, "--", "sh", "-c", script)
	c.Dir = ws
	r := e.runCmd(c)
	if r.code != 0 {
		t.Fatalf("run in root's workspace: %v", r)
	}
	out, mountinfo, _ := strings.Cut(r.stdout, "MOUNTINFO\n")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if lines[0] != "0" {
		t.Errorf("id -u inside = %q, want 0: %v", lines[0], r)
	}
	st, err := os.Stat(filepath.Join(ws, "f"))
	if err != nil {
		t.Fatalf("f was not written to the workspace: %v", err)
	}
	if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 0 || sys.Gid != 0 {
		t.Errorf("f is %d:%d on the host, want root's", sys.Uid, sys.Gid)
	}
	// Every capability set is empty: bounding, permitted, effective,
	// inheritable and ambient.
	caps := map[string]string{}
	for _, l := range lines {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.HasPrefix(k, "Cap") {
			caps[k] = strings.TrimSpace(v)
		}
	}
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		if v, ok := caps[k]; !ok || strings.Trim(v, "0") != "" {
			t.Errorf("%s = %q inside, want all zeros", k, v)
		}
	}
	for _, want := range []string{"NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("no %q inside: %v", want, r)
		}
	}
	// What root without power may not do: write outside the workspace (the
	// rootfs, airlock's read-only binds, /dev), mount, chown, chmod or read
	// what is not its own, become another user, or make a user namespace.
	for _, bad := range []string{"WROTE", "SHELL"} {
		if strings.Contains(out, bad) {
			t.Errorf("root without power did what it may not: %v", r)
		}
	}
	want := map[string]string{
		"mount": "EPERM", "chown-other": "EPERM", "chown-own": "EPERM", "chmod-other": "EPERM",
		"read-secret": "EACCES", "chmod-airlock": "EROFS", "setuid": "EPERM", "unshare-user": "EPERM",
	}
	for _, l := range lines {
		if name, got, ok := strings.Cut(l, " "); ok {
			if w, known := want[name]; known {
				if got != w {
					t.Errorf("%s inside: %s, want %s", name, got, w)
				}
				delete(want, name)
			}
		}
	}
	if len(want) != 0 {
		t.Errorf("no result for %v: %v", want, r)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "other")); string(b) != "other" {
		t.Errorf("the other user's file changed: %q", b)
	}
	// The only writable mount from the host's filesystems is the workspace:
	// every other host path the container sees (airlock's binary, the
	// control socket's directory, the engine's /etc files) is read-only.
	for _, l := range strings.Split(strings.TrimSpace(mountinfo), "\n") {
		f := strings.Fields(l)
		dash := slices.Index(f, "-")
		if len(f) < 6 || dash < 0 || dash+1 >= len(f) {
			t.Fatalf("mountinfo line %q", l)
		}
		point, opts, fstype := f[4], strings.Split(f[5], ","), f[dash+1]
		switch fstype {
		case "proc", "sysfs", "tmpfs", "devpts", "mqueue", "cgroup", "cgroup2":
			continue // the container's own
		}
		if slices.Contains(opts, "rw") && point != ws {
			t.Errorf("%s (%s) is mounted writable: %s", point, fstype, l)
		}
	}
	t.Logf("inside:\n%s", r)

	// Another user's workspace, run by root, is still run as that user.
	if err := os.Chown(ws, 1234, 5678); err != nil {
		t.Fatal(err)
	}
	c = e.cmd("run", "--backend", "docker", "--image", img, "--", "sh", "-c", "id -u; id -g")
	c.Dir = ws
	if r := e.runCmd(c); r.code != 0 || r.stdout != "1234\n5678\n" {
		t.Errorf("run as root in a workspace of 1234:5678: %v, want that user", r)
	}
}

// TestDockerThroughTheAPI: `create` with a docker backend runs in a
// container of the same engine: the sandbox is in the state dir (ls shows
// it made by rpc on docker), commands run in the image, files round-trip.
func TestDockerThroughTheAPI(t *testing.T) {
	cli := dockerOnly(t)
	e := newEnv(t)
	p := startRPC(t, e)
	img := os.Getenv("AIRLOCK_TEST_IMAGE")
	p.send(`{"jsonrpc":"2.0","method":"create","params":{"backend":"docker","image":"` + img + `"},"id":1}`)
	r := p.reply(1)
	res, _ := r["result"].(map[string]any)
	id, _ := res["id"].(string)
	if r["error"] != nil || id == "" {
		t.Fatalf("create with the docker backend: %v", r)
	}
	if _, err := cli.ContainerInspect(context.Background(), docker.ContainerName(id)); err != nil {
		t.Fatalf("no container for the API's sandbox %s: %v", id, err)
	}
	if ls := e.run("ls"); !strings.Contains(ls.stdout, id) || !strings.Contains(ls.stdout, "rpc/docker") {
		t.Fatalf("ls does not show the API's docker sandbox as rpc/docker:\n%s", ls.stdout)
	}
	p.send(`{"jsonrpc":"2.0","method":"write_file","params":{"path":"hello.txt","content":"aGk="},"id":2}`)
	if r := p.reply(2); r["error"] != nil {
		t.Fatalf("write_file: %v", r)
	}
	p.send(`{"jsonrpc":"2.0","method":"exec","params":{"command":"cat hello.txt; test -f /.dockerenv && echo in-a-container"},"id":3}`)
	r = p.reply(3)
	res, _ = r["result"].(map[string]any)
	out, _ := res["stdout"].(string)
	if b, _ := base64.StdEncoding.DecodeString(out); string(b) != "hiin-a-container\n" {
		t.Fatalf("exec in the docker sandbox = %v, want the file's content and the container marker", r)
	}
	p.send(`{"jsonrpc":"2.0","method":"close","params":{},"id":4}`)
	p.reply(4)
	testutil.WaitFor(t, 30*time.Second, func() bool {
		_, err := cli.ContainerInspect(context.Background(), docker.ContainerName(id))
		return err != nil
	})
}
