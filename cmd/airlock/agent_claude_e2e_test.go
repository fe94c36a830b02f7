package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/airlock-dev/airlock/internal/fakellm"
)

// claudeTestIP serves the fake Anthropic API for the Claude Code tests.
const claudeTestIP = "127.0.0.21"

// claudeResult is the part of `claude -p --output-format json` the tests read.
type claudeResult struct {
	SessionID string `json:"session_id"`
	Result    string `json:"result"`
	IsError   bool   `json:"is_error"`
}

func parseClaudeResult(t *testing.T, r result) claudeResult {
	t.Helper()
	var c claudeResult
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &c); err != nil {
		t.Fatalf("claude's JSON result: %v\n%v", err, r)
	}
	return c
}

// TestClaudeCodeWorksWithItsKeyHeldBack runs the real Claude Code (pinned)
// with `ANTHROPIC_API_KEY=... airlock agent run claude --workspace DIR
// --add-host api.anthropic.com:IP --upstream-ca CA.pem -- -p PROMPT`
// against the fake Anthropic API. The scripted model writes a file with
// Claude's Write tool, curls a host no rule allows, reads a file through
// the policed MCP server, and dumps the environment of every process in
// the sandbox into the workspace. Then: the file is there; the curl was
// refused by airlock; the MCP call passed the proxy's policy; the
// real key reached the fake API and is nowhere inside (output, workspace
// with the env dump, the agent's home), where only its placeholder is;
// as root IS_SANDBOX=1 was set. A second run with --resume last goes on
// with the same Claude session, its history (four tool results) intact.
func TestClaudeCodeWorksWithItsKeyHeldBack(t *testing.T) {
	// The script names paths known only once the test's env exists: the
	// fake starts without one and gets it before any request arrives.
	a := newAgentTest(t, claudeTestIP, nil)
	hello, dump := filepath.Join(a.ws, "hello.txt"), filepath.Join(a.ws, "env-dump.txt")
	note, _ := a.withMCPServer()
	script := []fakellm.Step{
		{Text: "I'll write the file.", Tool: "Write", Args: map[string]any{"file_path": hello, "content": "hello from claude\n"}},
		{Tool: "Bash", Args: map[string]any{"command": "curl -sS https://denied.example.com", "description": "Reach a host no rule allows"}},
		{Tool: "mcp__fs__read_text_file", Args: map[string]any{"path": note}},
		{Tool: "Bash", Args: map[string]any{
			"command":     `for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f"; echo; done > ` + dump,
			"description": "Dump every process's environment",
		}},
		{Text: "All done: wrote hello.txt, denied.example.com was refused, read the note."},
	}
	a.fake.Set(func(s *fakellm.Server) { s.Script = script })

	r := a.agent("claude", "ANTHROPIC_API_KEY", "api.anthropic.com", []string{"--name", "claude-e2e", "--timeout", "4m"},
		"-p", "write hello.txt", "--output-format", "json")
	if r.code != 0 {
		t.Fatalf("airlock agent run claude: %v\nrequests: %+v", r, a.fake.Requests())
	}
	first := parseClaudeResult(t, r)
	if first.IsError || !strings.Contains(first.Result, "All done") || first.SessionID == "" {
		t.Errorf("claude's result %+v", first)
	}
	if b, err := os.ReadFile(hello); err != nil || string(b) != "hello from claude\n" {
		t.Errorf("the file Claude wrote: %q, %v", b, err)
	}
	steps := map[int]bool{}
	for _, q := range a.fake.Requests() {
		if q.API == "unknown" {
			t.Errorf("Claude Code called %s, which the fake does not serve", q.Path)
		}
		if q.Path == "/v1/messages" {
			steps[q.Step] = true
		}
	}
	for i := range script {
		if !steps[i] {
			t.Errorf("the model's step %d was never asked for; steps seen %v", i, steps)
		}
	}

	var denied, mcpAllowed bool
	for _, rec := range auditRecords(t, a.env, "claude-e2e") {
		denied = denied || rec.Decision == "deny" && rec.Host == "denied.example.com" // dns, or network in proxy mode
		mcpAllowed = mcpAllowed || rec.Kind == "mcp" && rec.Decision == "allow" && rec.Subject == "fs/read_text_file"
	}
	if !denied {
		t.Error("no denial of denied.example.com in the audit log")
	}
	if !mcpAllowed {
		t.Error("no allowed fs/read_text_file MCP call in the audit log")
	}

	b, err := os.ReadFile(dump)
	if err != nil {
		t.Fatalf("the environment dump: %v", err)
	}
	envs := string(b)
	if !strings.Contains(envs, "ANTHROPIC_API_KEY=sk-ant-api03-airlock-ph-") {
		t.Errorf("the sandbox's processes have no ANTHROPIC_API_KEY placeholder:\n%s", envs)
	}
	if !strings.Contains(envs, "IS_SANDBOX=1") || !strings.Contains(envs, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1") {
		t.Errorf("the profile's environment is missing inside:\n%s", envs)
	}
	a.checkKeyStayedOut(r)

	// Resume: the same Claude session, its history carried over.
	n := len(a.fake.Requests())
	r = a.agent("claude", "ANTHROPIC_API_KEY", "api.anthropic.com", []string{"--name", "claude-e2e-resumed", "--timeout", "4m", "--resume", "last"},
		"-p", "what did you do?", "--output-format", "json")
	if r.code != 0 {
		t.Fatalf("airlock agent run claude --resume last: %v", r)
	}
	if again := parseClaudeResult(t, r); again.SessionID != first.SessionID || again.IsError {
		t.Errorf("resumed %+v, want session %s", again, first.SessionID)
	}
	resumed := 0
	for _, q := range a.fake.Requests()[n:] {
		if q.Path != "/v1/messages" {
			continue
		}
		resumed++
		if q.Step < 4 {
			t.Errorf("a resumed request is at step %d: its history lost the first run's four tool results", q.Step)
		}
	}
	if resumed == 0 {
		t.Error("the resumed run asked the model nothing")
	}
	a.checkKeyStayedOut(r)
	if r := a.run("agent", "sessions"); !strings.Contains(r.stdout, first.SessionID) {
		t.Errorf("airlock agent sessions does not list %s: %v", first.SessionID, r)
	}
}

// TestClaudeCodeStartsInteractivelyWithNoQuestion runs `airlock agent run
// claude -- PROMPT` on a terminal with a fresh agent home: onboarding, the
// "use this API key?" question (the placeholder is pre-approved), workspace
// trust and the bypass-permissions warning must all be answered already,
// or the prompt never reaches the model and the file is never written.
func TestClaudeCodeStartsInteractivelyWithNoQuestion(t *testing.T) {
	a := newAgentTest(t, claudeTestIP, nil)
	hello := filepath.Join(a.ws, "hello.txt")
	script := []fakellm.Step{
		{Tool: "Write", Args: map[string]any{"file_path": hello, "content": "hello from an interactive claude\n"}},
		{Text: "Wrote hello.txt."},
	}
	a.fake.Set(func(s *fakellm.Server) { s.Script = script })
	c := a.agentCmd("claude", "ANTHROPIC_API_KEY", "api.anthropic.com", []string{"--timeout", "3m"}, "write hello.txt")
	c.Env = append(c.Env, "TERM=xterm-256color")
	ptm, err := pty.StartWithSize(c, &pty.Winsize{Rows: 40, Cols: 120})
	if err != nil {
		t.Fatal(err)
	}
	defer ptm.Close()
	var screen lockedBuffer
	go io.Copy(&screen, ptm)
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()

	// The model's final answer is asked for once Write has run.
	answered := func() bool {
		for _, q := range a.fake.Requests() {
			if q.Path == "/v1/messages" && q.Step == 1 {
				return true
			}
		}
		return false
	}
	deadline := time.After(2 * time.Minute)
	for !answered() {
		select {
		case err := <-done:
			t.Fatalf("claude ended (%v) before the model's last step; the screen:\n%s", err, screen.String())
		case <-deadline:
			t.Fatalf("the prompt never went through (a first-run question?); the screen:\n%s", screen.String())
		case <-time.After(200 * time.Millisecond):
		}
	}
	if b, err := os.ReadFile(hello); err != nil || string(b) != "hello from an interactive claude\n" {
		t.Errorf("the file Claude wrote: %q, %v", b, err)
	}
	c.Process.Signal(syscall.SIGTERM) // airlock stops the sandbox
	select {
	case <-done:
	case <-time.After(time.Minute):
		c.Process.Kill()
		t.Fatal("airlock did not end on SIGTERM")
	}
	a.checkKeyStayedOut(result{stdout: screen.String()})
}
