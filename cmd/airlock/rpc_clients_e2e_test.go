//go:build linux

package main

import (
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	sandbox "github.com/airlock-dev/airlock/sandbox/client"
)

// The clients in clients/ and ADR-0001's usage examples, against the binary
// this suite built. Each skips, saying why, when its runtime is missing.

const fakeKey = "sk-test-0123456789abcdefghij"

// clientsDir is the repository's clients/ directory.
func clientsDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs("../../clients")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d); err != nil {
		t.Skipf("no clients directory at %s", d)
	}
	return d
}

// sandboxOnPath is a PATH whose `sandbox` is airlock: the ADR's clients
// spawn `sandbox --rpc` and run unchanged.
func sandboxOnPath(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "airlock-sandbox-path-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	if err := os.Symlink(airlockBin, filepath.Join(dir, "sandbox")); err != nil {
		t.Fatal(err)
	}
	return dir + ":" + os.Getenv("PATH")
}

func need(t *testing.T, tool string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		t.Skipf("%s is not installed", tool)
	}
	return p
}

func runTool(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	c := exec.Command(name, args...)
	c.Dir, c.Env = dir, env
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (e *env) clientEnv(extra ...string) []string {
	return append(e.environ("AIRLOCK_BIN="+airlockBin, "PYTHONDONTWRITEBYTECODE=1", "OPENAI_API_KEY="+fakeKey), extra...)
}

// pythonInSandbox skips when `python` (which the ADR's examples run) is not
// on the sandbox's (the host's) PATH.
func pythonInSandbox(t *testing.T) {
	if _, err := exec.LookPath("/usr/bin/python"); err != nil {
		if _, err := exec.LookPath("/usr/local/bin/python"); err != nil {
			t.Skip("the ADR's examples run `python`, which this host lacks (apt install python-is-python3)")
		}
	}
}

// upstreamEnv hands the clients' approval tests the loopback HTTPS server
// (its address, CA and request log), or nothing where it cannot run.
func upstreamEnv(t *testing.T) []string {
	if os.Getuid() != 0 && os.Getenv("AIRLOCK_TEST_UPSTREAM") == "" {
		return nil
	}
	u := testUpstream(t)
	return []string{"AIRLOCK_TEST_UPSTREAM=" + u.addr, "AIRLOCK_TEST_UPSTREAM_CA=" + u.caFile, "AIRLOCK_TEST_UPSTREAM_LOG=" + u.logFile}
}

func TestRPCPythonClient(t *testing.T) {
	py := need(t, "python3")
	e := newEnv(t)
	up := upstreamEnv(t)
	out := runTool(t, filepath.Join(clientsDir(t), "python"), e.clientEnv(up...), py, "-m", "unittest", "discover", "-v", "-s", "tests")
	if up == nil && strings.Count(out, "... skipped") == 2 && strings.Contains(out, "AIRLOCK_TEST_UPSTREAM") {
		t.Logf("the approval tests skipped: no loopback upstream here\n%s", out)
		return
	}
	if strings.Contains(out, "skipped") {
		t.Fatalf("the Python suite skipped tests:\n%s", out)
	}
	t.Log(out)
}

func TestRPCTypeScriptClient(t *testing.T) {
	node := need(t, "node")
	e := newEnv(t)
	up := upstreamEnv(t)
	out := runTool(t, filepath.Join(clientsDir(t), "typescript"), e.clientEnv(up...), node, "--test", "test/")
	// Every test ran and passed: "# fail 0" alone is also what a run that
	// skipped them all prints.
	var tests, pass, fail, skipped = -1, -1, -1, -1
	for _, line := range strings.Split(out, "\n") {
		fmt.Sscanf(line, "# tests %d", &tests)
		fmt.Sscanf(line, "# pass %d", &pass)
		fmt.Sscanf(line, "# fail %d", &fail)
		fmt.Sscanf(line, "# skipped %d", &skipped)
	}
	if up == nil && skipped == 1 && fail == 0 && pass == tests-1 {
		t.Logf("the approval test skipped: no loopback upstream here")
		return
	}
	if tests < 3 || pass != tests || fail != 0 || skipped != 0 {
		t.Fatalf("node --test: want every test (at least 2) passed, none skipped; got tests %d pass %d fail %d skipped %d:\n%s", tests, pass, fail, skipped, out)
	}
}

const wantHello = "Hello from sandbox!"

func TestRPCReferencePythonExamples(t *testing.T) {
	py := need(t, "python3")
	pythonInSandbox(t)
	e := newEnv(t)
	dir := filepath.Join(clientsDir(t), "python")
	// The ADR's own client, verbatim, spawning `sandbox --rpc`.
	out := runTool(t, filepath.Join(dir, "examples"), e.clientEnv("PATH="+sandboxOnPath(t)), py, "reference_client.py")
	if !strings.Contains(out, wantHello) || !strings.Contains(out, `b'{"status": "ok"}'`) {
		t.Fatalf("reference_client.py printed:\n%s", out)
	}
	// The ADR's usage with this repository's client.
	out = runTool(t, filepath.Join(dir, "examples"), e.clientEnv("PYTHONPATH="+dir), py, "reference_usage.py")
	if !strings.Contains(out, wantHello) || !strings.Contains(out, `b'{"status": "ok"}'`) {
		t.Fatalf("reference_usage.py printed:\n%s", out)
	}
}

func TestRPCReferenceTypeScriptExample(t *testing.T) {
	node := need(t, "node")
	pythonInSandbox(t)
	dir := filepath.Join(clientsDir(t), "typescript")
	tsc := filepath.Join(dir, "node_modules", ".bin", "tsc")
	if _, err := os.Stat(tsc); err != nil {
		t.Skip("the ADR's TypeScript example needs tsc: run npm ci in clients/typescript")
	}
	e := newEnv(t)
	build, err := os.MkdirTemp("", "airlock-ts-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(build)
	os.Chmod(build, 0o755)
	runTool(t, dir, e.clientEnv(), node, tsc, "-p", ".", "--outDir", build)
	// ESM output: the package.json beside it says so.
	os.WriteFile(filepath.Join(build, "package.json"), []byte(`{"type":"module"}`), 0o644)
	out := runTool(t, build, e.clientEnv("PATH="+sandboxOnPath(t)), node, filepath.Join(build, "examples", "reference.js"))
	if !strings.Contains(out, wantHello) {
		t.Fatalf("reference.ts printed:\n%s", out)
	}
}

func TestRPCReferenceGoExample(t *testing.T) {
	pythonInSandbox(t)
	e := newEnv(t)
	// The example's client starts airlock with this process's environment.
	t.Setenv("HOME", e.home)
	t.Setenv("AIRLOCK_STATE_DIR", e.state)
	t.Setenv("AIRLOCK_BIN", airlockBin)
	t.Setenv("OPENAI_API_KEY", fakeKey)
	r, w, _ := os.Pipe()
	stdout := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() { b, _ := io.ReadAll(r); done <- string(b) }()
	referenceGoUsage()
	os.Stdout = stdout
	w.Close()
	if out := <-done; !strings.Contains(out, wantHello) {
		t.Fatalf("the ADR's Go example printed %q", out)
	}
}

// referenceGoUsage is ADR-0001's Go usage example, verbatim, with this
// repository's client imported as sandbox.
func referenceGoUsage() {
	sb, err := sandbox.Create(&sandbox.Config{
		Image: "standard",
		Network: &sandbox.NetworkConfig{
			AllowedHosts: []string{"api.openai.com"},
			Secrets: map[string]sandbox.Secret{
				"OPENAI_API_KEY": {
					Value: os.Getenv("OPENAI_API_KEY"),
					Hosts: []string{"api.openai.com"},
				},
			},
		},
		VFS: &sandbox.VFSConfig{
			Mounts: map[string]sandbox.Mount{
				"/workspace": {Type: "memory"},
			},
		},
		Env: map[string]string{
			"OPENAI_API_KEY": "${OPENAI_API_KEY}",
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Close()

	// Handle events in background
	go func() {
		for event := range sb.Events() {
			if event.Network != nil {
				log.Printf("HTTP: %s %s -> %d", event.Network.Method, event.Network.URL, event.Network.StatusCode)
			}
		}
	}()

	// Write and execute
	sb.WriteFile("/workspace/hello.py", []byte(`print("Hello from sandbox!")`))
	result, _ := sb.Exec("python /workspace/hello.py")
	fmt.Println(result.Stdout) // "Hello from sandbox!"
}
