//go:build linux

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/fakellm"
	"github.com/airlock-dev/airlock/internal/llmusage"
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
			"command":     envDumpCommand(dump),
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
	screen := a.runInteractively(t, a.agentCmd("claude", "ANTHROPIC_API_KEY", "api.anthropic.com", []string{"--timeout", "3m"}, "write hello.txt"), 1)
	if b, err := os.ReadFile(hello); err != nil || string(b) != "hello from an interactive claude\n" {
		t.Errorf("the file Claude wrote: %q, %v", b, err)
	}
	a.checkKeyStayedOut(result{stdout: screen})
}

// TestClaudeCodeUsageIsMeteredAndABudgetStopsIt: the gateway reads the
// usage of every answer the fake API streams to Claude Code, and airlock
// get's totals equal what the fake reported; with --budget-tokens below one
// answer, the request after the first (carrying the tool's result) is
// refused at the gateway and never reaches the API, and Claude says why.
func TestClaudeCodeUsageIsMeteredAndABudgetStopsIt(t *testing.T) {
	a := newAgentTest(t, claudeTestIP, nil)
	first := filepath.Join(a.ws, "first.txt")
	a.fake.Set(func(s *fakellm.Server) {
		s.Script = []fakellm.Step{
			{Tool: "Write", Args: map[string]any{"file_path": first, "content": "one\n"}},
			{Tool: "Write", Args: map[string]any{"file_path": filepath.Join(a.ws, "second.txt"), "content": "two\n"}},
			{Text: "done"},
		}
	})
	r := a.agent("claude", "ANTHROPIC_API_KEY", "api.anthropic.com", []string{"--name", "budget", "--timeout", "3m", "--budget-tokens", "500"},
		"-p", "write two files")
	if _, err := os.Stat(first); err != nil {
		t.Fatalf("the first answer's tool call did not run: %v\n%v", err, r)
	}
	if r.code == 0 {
		t.Errorf("Claude Code ended well although its budget stopped it:\n%v", r)
	}
	if _, err := os.Stat(filepath.Join(a.ws, "second.txt")); err == nil {
		t.Errorf("the second answer arrived after the budget was spent\n%v", r)
	}
	for _, q := range a.fake.Requests() {
		if q.Step >= 1 {
			t.Errorf("a request past the budget reached the API: %+v", q)
		}
	}
	if !strings.Contains(r.stdout+r.stderr, "budget") {
		t.Errorf("Claude's output does not say the budget stopped it:\n%v", r)
	}
	g := a.run("get", "budget")
	var got struct {
		LLM *llmusage.Totals `json:"llm"`
	}
	if err := json.Unmarshal([]byte(g.stdout), &got); err != nil || got.LLM == nil {
		t.Fatalf("airlock get budget: %v\n%v", err, g)
	}
	want := a.fake.Totals()
	u := got.LLM.Usage
	if u.Input != want.Input || u.Output != want.Output || u.CacheRead != want.CacheRead || u.CacheWrite != want.CacheWrite {
		t.Errorf("metered %+v, the fake reported %+v", u, want)
	}
	if got.LLM.Refused < 1 {
		t.Errorf("no request was refused: %+v", got.LLM)
	}
}

// TestClaudeCodeUsesTheLoginWithoutItEntering: no key in the environment,
// but a Claude login (~/.claude/.credentials.json) on the host. The agent's
// home gets a copy with a placeholder access token and no refresh token;
// the gateway sends the real access token to the API; the user's file is
// untouched (nothing was due for refresh) and the refresh token is nowhere
// inside.
func TestClaudeCodeUsesTheLoginWithoutItEntering(t *testing.T) {
	a := newAgentTest(t, claudeTestIP, []fakellm.Step{{Text: "Logged in and answering."}})
	a.key = "sk-ant-oat01-" + strings.Repeat("A", 40) + a.key[len(a.key)-16:]
	refresh := "sk-ant-ort01-refresh-" + a.key[len(a.key)-16:]
	login := map[string]any{"claudeAiOauth": map[string]any{
		"accessToken": a.key, "refreshToken": refresh,
		"expiresAt": time.Now().Add(8 * time.Hour).UnixMilli(), "scopes": []string{"user:inference", "user:profile"},
		"subscriptionType": "max",
	}}
	b, _ := json.Marshal(login)
	path := filepath.Join(a.home, ".claude", ".credentials.json")
	os.MkdirAll(filepath.Dir(path), 0o700)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	r := a.agent("claude", "", "api.anthropic.com", []string{"--timeout", "3m"}, "-p", "hello", "--output-format", "json")
	if r.code != 0 || !strings.Contains(parseClaudeResult(t, r).Result, "Logged in and answering") {
		t.Fatalf("claude with a login: %v\nrequests: %+v", r, a.fake.Requests())
	}
	a.checkKeyStayedOut(r)
	if after, _ := os.ReadFile(path); string(after) != string(b) {
		t.Errorf("the user's login file changed:\n%s", after)
	}
	homes := agentHomesDir(a.home)
	copies, _ := filepath.Glob(filepath.Join(homes, "*", "claude", ".claude", ".credentials.json"))
	if len(copies) != 1 {
		t.Fatalf("the sandbox's copy of the login: %v", copies)
	}
	c, _ := os.ReadFile(copies[0])
	if strings.Contains(string(c), refresh) || strings.Contains(string(c), "refreshToken") || !strings.Contains(string(c), "airlock-ph-") {
		t.Errorf("the sandbox's copy holds a refresh token or no placeholder:\n%s", c)
	}
}

// TestClaudeCodeShowsTheProvidersRefusal: a key the provider refuses (401)
// is surfaced as Claude Code prints it, and the refusal is in the audit log.
// (Claude Code retries a 401 with backoff, ten times by default: the test
// lets it retry once.)
func TestClaudeCodeShowsTheProvidersRefusal(t *testing.T) {
	a := newAgentTest(t, claudeTestIP, []fakellm.Step{{Text: "never said"}})
	a.fake.Set(func(s *fakellm.Server) { s.RequireKey = "sk-ant-some-other-key" })
	r := a.agent("claude", "ANTHROPIC_API_KEY", "api.anthropic.com", []string{"--name", "refused", "--timeout", "2m", "-e", "CLAUDE_CODE_MAX_RETRIES=1"}, "-p", "hello")
	if r.code == 0 || strings.Contains(r.stdout, "never said") {
		t.Fatalf("a refused key: %v\nrequests: %+v", r, a.fake.Requests())
	}
	if out := strings.ToLower(r.stdout + r.stderr); !strings.Contains(out, "invalid") && !strings.Contains(out, "401") {
		t.Errorf("Claude's output does not show the provider's refusal:\n%v\nrequests: %d %+v", r, len(a.fake.Requests()), a.fake.Requests()[len(a.fake.Requests())-1])
	}
	if !strings.Contains(a.run("audit", "refused").stdout, "/v1/messages 401") {
		t.Errorf("no audit record of the 401:\n%s", a.run("audit", "refused").stdout)
	}
}
