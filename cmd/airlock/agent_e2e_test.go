//go:build linux

package main

// Shared helpers for the agent tests: the real agent CLIs (pinned, from
// testdata/agents, installed by .ci/run) run inside airlock against
// internal/fakellm, which serves the providers' real host names on a
// loopback address with a test CA — so each agent's settings stay as in
// production, and only --add-host and --upstream-ca point it here.

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/fakellm"
	"github.com/creack/pty"
)

// agentBinDir is where the pinned agent CLIs are: testdata/agents (npm ci
// by .ci/run). Tests skip, saying so, when it is missing.
func agentBinDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs("testdata/agents/node_modules/.bin")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d); err != nil {
		t.Skip("the agent CLIs are not installed: npm ci --prefix cmd/airlock/testdata/agents (.ci/run does it)")
	}
	return d
}

// agentTest is one agent run against a fake provider.
type agentTest struct {
	*env
	fake *fakellm.Server
	key  string // the real key, in the host's environment only
	bin  string // the agent CLIs' dir, put on PATH
}

// newAgentTest starts fakellm on ip:443 with script. Port 443 needs root;
// unprivileged, the test skips.
func newAgentTest(t *testing.T, ip string, script []fakellm.Step) *agentTest {
	t.Helper()
	bin := agentBinDir(t)
	if os.Getuid() != 0 {
		t.Skip("the fake provider binds port 443, which needs root")
	}
	fake, err := fakellm.Start(ip+":443", t.TempDir(), script, fakellm.Usage{Input: 1000, Output: 100, CacheRead: 10, CacheWrite: 20})
	if err != nil {
		t.Fatalf("fakellm: %v", err)
	}
	t.Cleanup(func() { fake.Close() })
	b := make([]byte, 24)
	rand.Read(b)
	return &agentTest{env: newEnv(t), fake: fake, key: "sk-test-" + hex.EncodeToString(b), bin: bin}
}

// agent runs `airlock agent run NAME --workspace WS --add-host HOST:IP
// --upstream-ca CA FLAGS... -- ARGS...` with keyVar=key in the host's
// environment and the agent CLIs on PATH: the exact form.
func (a *agentTest) agent(name, keyVar, host string, flags []string, args ...string) result {
	a.t.Helper()
	return a.runCmd(a.agentCmd(name, keyVar, host, flags, args...))
}

// agentCmd is the command agent runs, for a test that runs it itself (on
// a terminal, say).
func (a *agentTest) agentCmd(name, keyVar, host string, flags []string, args ...string) *exec.Cmd {
	ip, _, _ := strings.Cut(a.fake.Addr, ":")
	argv := append([]string{"agent", "run", name, "--workspace", a.ws, "--add-host", host + ":" + ip, "--upstream-ca", a.fake.CAFile}, flags...)
	argv = append(append(argv, "--"), args...)
	c := a.cmd(argv...)
	c.Env = a.environ()
	if keyVar != "" { // "": no key in the environment (a login, say)
		c.Env = append(c.Env, keyVar+"="+a.key)
	}
	for i, v := range c.Env {
		if p, ok := strings.CutPrefix(v, "PATH="); ok {
			c.Env[i] = "PATH=" + a.bin + ":" + p
		}
	}
	return c
}

// checkKeyStayedOut asserts the real key reached the fake provider and
// appears nowhere the sandbox could see or write: the run's output, the
// workspace, the agent's private home (under airlock's data dir in the
// test's HOME).
func (a *agentTest) checkKeyStayedOut(r result) {
	a.t.Helper()
	seen := false
	for _, q := range a.fake.Requests() {
		seen = seen || q.Credential == a.key
		if strings.Contains(q.Credential, "airlock-ph-") {
			a.t.Errorf("a placeholder reached the provider (%s %s): the gateway did not swap it", q.API, q.Path)
		}
	}
	if !seen {
		a.t.Errorf("the fake provider never saw the real key; requests: %+v\n%v", a.fake.Requests(), r)
	}
	if strings.Contains(r.stdout+r.stderr, a.key) {
		a.t.Errorf("the real key is in the run's output:\n%v", r)
	}
	for _, dir := range []string{a.ws, agentHomesDir(a.home)} {
		eachFileUnder(dir, func(p string, b []byte) {
			if strings.Contains(string(b), a.key) {
				a.t.Errorf("the real key is in %s, which the sandbox can read", p)
			}
		})
	}
}

// agentHomesDir holds the agents' private homes under a test's HOME.
func agentHomesDir(home string) string {
	return filepath.Join(home, ".local", "share", "airlock", "agents", "homes")
}

// eachFileUnder calls fn with each regular file under dir (up to 64 MiB).
func eachFileUnder(dir string, fn func(path string, data []byte)) {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if info, err := d.Info(); err != nil || info.Size() > 64<<20 {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil {
			fn(p, b)
		}
		return nil
	})
}

// envDumpCommand writes the environment of every process in the sandbox
// to path, for a scripted shell step.
func envDumpCommand(path string) string {
	return `for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f"; echo; done > ` + path
}

// withMCPServer configures (in the test's global config file) the npm
// filesystem MCP server as "fs", policed: read_text_file is allowed within
// its root, which holds note.txt. It returns the note's path and content,
// which an agent's MCP call through airlock can only have read from there.
func (a *agentTest) withMCPServer() (note, content string) {
	a.t.Helper()
	_, server, serverDir := mcpSetup(a.t, a.t.TempDir())
	root := filepath.Join(a.t.TempDir(), "files")
	os.MkdirAll(root, 0o777)
	os.Chmod(filepath.Dir(root), 0o755)
	note, content = filepath.Join(root, "note.txt"), "the MCP server says hello "+hex.EncodeToString([]byte(a.t.Name()))[:8]
	os.WriteFile(note, []byte(content), 0o644)
	cfg := map[string]any{"version": 1, "mcp_servers": map[string]any{"fs": map[string]any{
		"command": []string{"node", server, root},
		"roots":   []string{root},
		"ro":      []string{serverDir},
		"rules": []any{
			map[string]any{"tool": "read_text_file", "allow": map[string]any{"path": map[string]any{"path_within": "roots"}}},
		},
	}}}
	b, _ := json.Marshal(cfg) // JSON is YAML
	a.writeConfig(string(b))
	return note, content
}

// answerTerminal copies what the agent draws into screen and answers the
// queries a terminal would (cursor position, device attributes, keyboard
// protocol): Codex's and OpenCode's full-screen UIs wait for them.
func answerTerminal(ptm *os.File, screen io.Writer) {
	buf := make([]byte, 64<<10)
	for {
		n, err := ptm.Read(buf)
		if n > 0 {
			b := buf[:n]
			screen.Write(b)
			if bytes.Contains(b, []byte("\x1b[6n")) {
				ptm.Write([]byte("\x1b[1;1R"))
			}
			if bytes.Contains(b, []byte("\x1b[c")) {
				ptm.Write([]byte("\x1b[?62;22c"))
			}
			if bytes.Contains(b, []byte("\x1b[?u")) {
				ptm.Write([]byte("\x1b[?0u"))
			}
		}
		if err != nil {
			return
		}
	}
}

// runInteractively starts c on a terminal, waits until the fake answered
// step last (the prompt went through every tool call), then stops airlock.
func (a *agentTest) runInteractively(t *testing.T, c *exec.Cmd, last int) string {
	t.Helper()
	c.Env = append(c.Env, "TERM=xterm-256color")
	ptm, err := pty.StartWithSize(c, &pty.Winsize{Rows: 40, Cols: 120})
	if err != nil {
		t.Fatal(err)
	}
	defer ptm.Close()
	var screen lockedBuffer
	go answerTerminal(ptm, &screen)
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	answered := func() bool {
		for _, q := range a.fake.Requests() {
			if q.Step == last {
				return true
			}
		}
		return false
	}
	deadline := time.After(2 * time.Minute)
	for !answered() {
		select {
		case err := <-done:
			t.Fatalf("the agent ended (%v) before the model's last step; the screen:\n%s", err, screen.String())
		case <-deadline:
			t.Fatalf("the prompt never went through (a first-run question?); the screen:\n%s", screen.String())
		case <-time.After(200 * time.Millisecond):
		}
	}
	time.Sleep(time.Second) // the answer is drawn
	c.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(time.Minute):
		c.Process.Kill()
		t.Fatal("airlock did not end on SIGTERM")
	}
	return screen.String()
}
