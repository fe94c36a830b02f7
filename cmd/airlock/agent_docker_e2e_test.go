//go:build linux

package main

// The agents image on the docker backend: every pinned agent CLI runs in a
// docker sandbox of the image `airlock images build --variant agents` makes,
// as whoever runs the suite (root in the suite's first pass, uid 65534 in
// TestDockerBackend's re-run), with a home of the host's bound by --home.
// .ci/run builds the image; without it (or without dockerd) these skip.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-dev/airlock/internal/backend/docker"
	"github.com/airlock-dev/airlock/internal/fakellm"
	"github.com/airlock-dev/airlock/internal/images"
)

const agentsImage = "airlock/agents:latest"

// agentsImageOrSkip returns the agents image to test, skipping when dockerd
// or the image is absent.
func agentsImageOrSkip(t *testing.T) string {
	t.Helper()
	cli, err := docker.Connect(context.Background())
	if err != nil {
		t.Skipf("dockerd is not reachable, so the agents image is not tested: %v", err)
	}
	defer cli.Close()
	img := os.Getenv("AIRLOCK_TEST_AGENTS_IMAGE")
	if img == "" {
		img = agentsImage
	}
	if _, err := cli.ImageInspect(context.Background(), img); err != nil {
		t.Skipf("no image %s (build it with: sudo airlock images build --variant agents; .ci/run does): %v", img, err)
	}
	// The image must carry the versions the profiles pin: a stale image
	// would test other CLIs than airlock runs.
	got, err := images.AgentVersions(context.Background(), cli, img)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range images.AgentPackages() {
		if got[p.Name] != p.Version {
			t.Fatalf("%s carries %s %q, the profile pins %s: rebuild it (sudo airlock images build --variant agents)", img, p.Name, got[p.Name], p.Version)
		}
	}
	return img
}

// dockerRun is `airlock run --backend docker --image img --home home -- argv`
// in e's workspace (built here, not by e.cmd, which adds the suite's image).
func dockerRun(e *env, img, home string, argv ...string) result {
	e.t.Helper()
	c := exec.Command(airlockBin, append([]string{"run", "--backend", "docker", "--image", img, "--home", home, "--"}, argv...)...)
	c.Env = e.environ()
	c.Dir = e.ws
	return e.runCmd(c)
}

func TestAgentCLIsRunInTheAgentsImage(t *testing.T) {
	img := agentsImageOrSkip(t)
	pkgs := images.AgentPackages()
	if len(pkgs) == 0 {
		t.Fatal("no agent profile names an npm package: nothing to test")
	}
	e := newEnv(t)
	if r := e.run("images", "ls"); r.code != 0 || !strings.Contains(r.stdout, img) || !strings.Contains(r.stdout, " agents ") {
		t.Errorf("images ls does not list %s as the agents variant: %v", img, r)
	}
	for _, p := range pkgs {
		t.Run(p.Name, func(t *testing.T) {
			home := filepath.Join(t.TempDir(), "home")
			if err := os.Mkdir(home, 0o700); err != nil {
				t.Fatal(err)
			}
			r := dockerRun(e, img, home, p.Binary, "--version")
			if r.code != 0 || !strings.Contains(r.stdout, p.Version) {
				t.Errorf("%s --version in %s: %v; want %s", p.Binary, img, r, p.Version)
			}
		})
	}
	// Node.js is on the sandbox's PATH too (agents run npx MCP servers).
	if r := dockerRun(e, img, t.TempDir(), "node", "--version"); r.code != 0 || strings.TrimSpace(r.stdout) != "v"+images.NodeVersion() {
		t.Errorf("node --version: %v; want v%s", r, images.NodeVersion())
	}
}

// An agent keeps its state in its home: the sandbox's user may write the
// home bound with --home, the files land in the host directory as the
// user's own, and nothing of the image (the CLIs, Node.js) is writable.
func TestAgentsImageHomeIsTheUsersAndTheCLIsAreNot(t *testing.T) {
	img := agentsImageOrSkip(t)
	e := newEnv(t)
	home := filepath.Join(t.TempDir(), "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	script := `id -u
mkdir -p "$HOME/.claude" && echo state > "$HOME/.claude/probe" && echo HOME-WRITABLE
for p in ` + images.AgentsBin + `/claude ` + images.NodePrefix + `/bin/node ` + images.AgentsPrefix + `/package.json; do
	[ -e "$p" ] || echo "MISSING $p"
	[ -w "$p" ] && echo "WRITABLE $p"
done
true`
	r := dockerRun(e, img, home, "sh", "-c", script)
	if r.code != 0 {
		t.Fatalf("run: %v", r)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if lines[0] != strconv.Itoa(os.Getuid()) {
		t.Errorf("the sandbox runs as uid %s, want the caller's %d", lines[0], os.Getuid())
	}
	if !strings.Contains(r.stdout, "HOME-WRITABLE") {
		t.Errorf("the home is not writable: %v", r)
	}
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, "MISSING") || strings.HasPrefix(l, "WRITABLE") { // read-only even to root inside
			t.Errorf("%s", l)
		}
	}
	b, err := os.ReadFile(filepath.Join(home, ".claude/probe"))
	st, serr := os.Stat(filepath.Join(home, ".claude/probe"))
	if err != nil || serr != nil || string(b) != "state\n" {
		t.Fatalf("the home's file did not reach the host: %q %v %v", b, err, serr)
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; int(uid) != os.Getuid() {
		t.Errorf("the home's file is uid %d's on the host, want %d", uid, os.Getuid())
	}
}

// TestClaudeCodeRunsInTheAgentsImage: `airlock agent run claude --backend
// docker` runs the image's Claude Code (not the host's) against the fake
// API through the gateway's proxy door: the file is written, the real key
// reached the API and stayed out of the container's reach.
func TestClaudeCodeRunsInTheAgentsImage(t *testing.T) {
	img := agentsImageOrSkip(t)
	a := newAgentTest(t, "127.0.0.27", nil) // its own address: the native tests use claudeTestIP
	hello := filepath.Join(a.ws, "hello.txt")
	a.fake.Set(func(s *fakellm.Server) {
		s.Script = []fakellm.Step{
			{Tool: "Write", Args: map[string]any{"file_path": hello, "content": "from the image\n"}},
			{Text: "Wrote it."},
		}
	})
	a.bin = t.TempDir() // no agent CLI on the host's PATH: the image's runs
	r := a.agent("claude", "ANTHROPIC_API_KEY", "api.anthropic.com", []string{"--backend", "docker", "--image", img, "--timeout", "3m"}, "-p", "write hello.txt")
	if r.code != 0 || !strings.Contains(r.stdout, "Wrote it.") {
		t.Fatalf("agent run claude --backend docker: %v\nrequests: %+v", r, a.fake.Requests())
	}
	if b, err := os.ReadFile(hello); err != nil || string(b) != "from the image\n" {
		t.Errorf("the file: %q %v", b, err)
	}
	a.checkKeyStayedOut(r)
}
