package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// nativeOnly skips a test of the front's native runs in the suite's re-runs
// for another backend, whose runs the full binary makes.
func nativeOnly(t *testing.T) {
	if testBackend() != "" {
		t.Skip("the native backend's: a run with another is the full binary's")
	}
}

// fullCache is where the lean front keeps the full binary under a state dir.
func fullCache(e *env) []string {
	m, _ := filepath.Glob(filepath.Join(e.state, "full", "*", "airlock"))
	return m
}

// The airlock binary built as shipped is the lean front (internal/fullbin):
// a native run (and the commands a harness calls beside it) starts without
// the full binary and without the libraries only it links, whose package
// initialisers would run on every start.
func TestTheLeanFrontRunsANativeSandboxAlone(t *testing.T) {
	nativeOnly(t)
	e := newEnv(t)
	c := e.cmd("run", "-q", "--", "true")
	c.Env = append(c.Env, "GODEBUG=inittrace=1")
	r := e.runCmd(c)
	if r.code != 0 {
		t.Fatalf("airlock run -- true: %v", r)
	}
	for _, pkg := range []string{"github.com/docker/", "github.com/modelcontextprotocol/", "github.com/hanwen/go-fuse/", "go.opentelemetry.io/"} {
		if strings.Contains(r.stderr, "init "+pkg) {
			t.Errorf("a native run initialised %s: the front links it", pkg)
		}
	}
	if !strings.Contains(r.stderr, "init github.com/airlock-dev/airlock/internal/gateway") {
		t.Fatalf("no init trace of airlock's own packages:\n%s", r.stderr)
	}
	for _, args := range [][]string{{"ls"}, {"kill", "--all"}, {"version"}} {
		if r := e.run(args...); r.code != 0 {
			t.Errorf("airlock %v: %v", args, r)
		}
	}
	if m := fullCache(e); len(m) != 0 {
		t.Errorf("a native run, ls, kill or version wrote the full binary: %v", m)
	}
}

// What the front leaves out it hands on, with the same arguments, to the
// full binary, cached once in the state dir read-only: other commands,
// help, and runs that need another backend or MCP servers.
func TestTheLeanFrontHandsOnWhatItLacks(t *testing.T) {
	e := newEnv(t)
	if r := e.run("prune"); r.code != 0 || !strings.HasPrefix(r.stdout, "removed 0") {
		t.Fatalf("airlock prune: %v", r)
	}
	m := fullCache(e)
	if len(m) != 1 {
		t.Fatalf("the full binary is not cached once under the state dir: %v", m)
	}
	fi, err := os.Stat(m[0])
	if err != nil || fi.Mode().Perm() != 0o555 {
		t.Fatalf("cached full binary: %v, %v; want mode 0555", fi, err)
	}
	if r := e.run("--help"); r.code != 0 || !strings.Contains(r.stdout, "agent") || !strings.Contains(r.stdout, "images") {
		t.Errorf("airlock --help does not list the full binary's commands: %v", r)
	}
	if r := e.run("agent", "ls"); r.code != 0 || !strings.Contains(r.stdout, "claude") {
		t.Errorf("airlock agent ls: %v", r)
	}
	if r := e.run("frobnicate"); r.code != 125 || !strings.Contains(r.stderr, `unknown command "frobnicate"`) {
		t.Errorf("airlock frobnicate: %v", r)
	}
	again, _ := os.Stat(m[0])
	if !os.SameFile(fi, again) {
		t.Error("the full binary was written again")
	}
	// A run the front cannot make is handed on before anything is made:
	// the vm backend's own error, from the full binary, and no state left.
	c := exec.Command(airlockBin, "run", "--backend", "vm", "-q", "--", "true") // not e.cmd: its backend, whatever the re-run's
	c.Env, c.Dir = append(e.environ(), "AIRLOCK_DATA_DIR="+t.TempDir()), e.ws
	r := e.runCmd(c)
	if r.code != 125 || !strings.Contains(r.stderr, "vm image missing") {
		t.Errorf("airlock run --backend vm with no VM image: %v", r)
	}
	if ids, _ := filepath.Glob(filepath.Join(e.state, "sandboxes", "*")); len(ids) != 0 {
		t.Errorf("a failed vm run left %v", ids)
	}
}

// Inside a sandbox only the front is there: what it would hand on fails
// with a reason, and writes no full binary into the sandbox.
func TestTheLeanFrontHandsNothingOnInsideASandbox(t *testing.T) {
	nativeOnly(t)
	e := newEnv(t)
	e.writeConfig("version: 1\nhostexec:\n  auto_approve: ['^true$']\n") // shows the binary inside
	r := e.sh(`airlock version; echo "version=$?"; airlock doctor; echo "doctor=$?"; mcp-bridge x; echo "bridge=$?"; find "$HOME" /tmp -name airlock -type f`)
	if !strings.Contains(r.stderr, "airlock 0.1") || !strings.Contains(r.stdout, "version=0") { // control: the front itself runs inside (version prints on stderr)
		t.Errorf("airlock version inside: %v", r)
	}
	if !strings.Contains(r.stdout, "doctor=125") || !strings.Contains(r.stderr, "not available inside a sandbox") {
		t.Errorf("airlock doctor inside: %v", r)
	}
	if !strings.Contains(r.stdout, "bridge=125") || !strings.Contains(r.stderr, "this sandbox has no MCP servers") {
		t.Errorf("mcp-bridge inside: %v", r)
	}
	if !strings.HasSuffix(r.stdout, "bridge=125\n") {
		t.Errorf("a full binary was written inside: %v", r)
	}
}
