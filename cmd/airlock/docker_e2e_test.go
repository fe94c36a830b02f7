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
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/airlock-dev/airlock/internal/backend/docker"
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
	if err != nil || in.Config == nil || in.Config.Labels[docker.LabelImage] != "minimal" {
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
		if ents, _ := os.ReadDir(filepath.Join(e.state, "sandboxes")); len(ents) != 0 {
			t.Errorf("%s: left state behind: %v", c.name, ents)
		}
	}
}

func TestDockerInterruptedStartLeavesNothing(t *testing.T) {
	cli := dockerOnly(t)
	e := newEnv(t)
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
		c.Path, c.Dir = setpriv, dir
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
