//go:build linux

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/fakellm"
	"github.com/airlock-dev/airlock/internal/llmusage"
)

// codexIP is the loopback address the fake OpenAI API listens on for the
// Codex tests.
const codexIP = "127.0.0.22"

// jsString quotes s as a JavaScript string literal (JSON's are).
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// codexExec is a call of Codex's exec tool (its code mode: JavaScript
// that calls the nested tools) running cmd with exec_command.
func codexExec(cmd string) map[string]any {
	return map[string]any{"input": "const r = await tools.exec_command({cmd: " + jsString(cmd) + "});\ntext(r);"}
}

// agentHomesContain reports whether a file in the agents' private homes
// (under airlock's data dir in the test's HOME) holds s: what an agent
// recorded of its session.
func agentHomesContain(home, s string) bool {
	found := false
	eachFileUnder(agentHomesDir(home), func(_ string, b []byte) {
		found = found || strings.Contains(string(b), s)
	})
	return found
}

// checkOpenAIRun asserts what every run of an OpenAI agent's script shows:
// the file, every process's environment with the placeholder, the MCP
// note and the refusal in the agent's own record, the refusal audited,
// only the OpenAI API contacted with the real key, every step asked for,
// the gateway's usage totals equal to the fake's, and no key inside.
func (a *agentTest) checkOpenAIRun(t *testing.T, r result, sandbox, keyVar, hello, helloText, envDump, noteContent string) {
	t.Helper()
	if b, err := os.ReadFile(hello); err != nil || string(b) != helloText {
		t.Errorf("%s = %q, %v; want the file the model asked for", hello, b, err)
	}
	a.checkKeyStayedOut(r)
	env, err := os.ReadFile(envDump)
	if err != nil || !strings.Contains(string(env), keyVar+"=sk-") || strings.Contains(string(env), keyVar+"="+a.key) {
		t.Errorf("the processes' environment (%v) should name %s with a placeholder:\n%.2000s", err, keyVar, env)
	}
	if !agentHomesContain(a.home, noteContent) {
		t.Errorf("the MCP server's note %q never reached the agent (not in its session record)", noteContent)
	}
	if !agentHomesContain(a.home, "Could not resolve host: denied.example.com") {
		t.Errorf("curl's refusal of denied.example.com is not in the agent's session record")
	}
	au := a.run("audit", "--json", sandbox)
	if !strings.Contains(au.stdout, `"denied.example.com"`) || !strings.Contains(au.stdout, `"deny"`) {
		t.Errorf("no audit record of the denied host:\n%v", au)
	}
	for _, q := range a.fake.Requests() {
		if !strings.HasPrefix(q.API, "openai-responses") || q.Credential != a.key {
			t.Errorf("request %s %s with credential %q: want the Responses API with the real key", q.API, q.Path, q.Credential)
		}
	}
	steps := map[int]bool{}
	for _, q := range a.fake.Requests() {
		steps[q.Step] = true
	}
	a.checkUsage(t, sandbox)
	for i := range a.fake.Script {
		if !steps[i] {
			t.Errorf("the agent never asked for step %d; requests: %+v", i, a.fake.Requests())
		}
	}
}

// checkUsage asserts the gateway read every answer's usage on its way (SSE
// or WebSocket events): airlock get shows what the fake reported.
func (a *agentTest) checkUsage(t *testing.T, sandbox string) {
	t.Helper()
	// Every response counts, Codex's refused WebSocket upgrade (426) too.
	answers := int64(len(a.fake.Requests()))
	var got struct {
		LLM *llmusage.Totals `json:"llm"`
	}
	g := a.run("get", sandbox)
	if err := json.Unmarshal([]byte(g.stdout), &got); err != nil || got.LLM == nil {
		t.Errorf("airlock get %s: %v %v", sandbox, err, g)
	} else {
		ft := a.fake.Totals()
		want := llmusage.Usage{Input: ft.Input, Output: ft.Output, CacheRead: ft.CacheRead, CacheWrite: ft.CacheWrite}
		if got.LLM.Requests != answers || got.LLM.Usage != want {
			t.Errorf("the gateway counted %d responses of %+v; the fake gave %d of %+v", got.LLM.Requests, got.LLM.Usage, answers, want)
		}
	}
}

// checkResumed asserts the resumed run's turn carried the first run's
// history: the step is the count of tool results it already holds.
func (a *agentTest) checkResumed(t *testing.T, r result, before int) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("the resumed run failed:\n%v", r)
	}
	var last *fakellm.Request
	for _, q := range a.fake.Requests()[before:] {
		if q.Step >= 0 {
			last = &q
		}
	}
	if last == nil || last.Step != len(a.fake.Script)-1 {
		t.Errorf("the resumed turn: %+v, want step %d (the first run's tool results); requests %+v", last, len(a.fake.Script)-1, a.fake.Requests()[before:])
	}
	a.checkKeyStayedOut(r)
}

// TestCodexRunsWithItsKeyHeldBack runs the real Codex CLI (0.169.0) in the
// issue's exact form, `OPENAI_API_KEY=... airlock agent run codex
// --workspace DIR --add-host api.openai.com:IP --upstream-ca CA.pem -- exec
// "PROMPT"`, against the fake OpenAI API. The scripted model (through
// Codex's exec tool) writes a file, reads a note through the policed MCP
// server, tries a denied host and dumps every process's environment, then
// answers. Then the session is resumed by its id.
func TestCodexRunsWithItsKeyHeldBack(t *testing.T) {
	a := newAgentTest(t, codexIP, nil)
	note, noteContent := a.withMCPServer()
	hello := filepath.Join(a.ws, "hello.txt")
	envDump := filepath.Join(a.ws, "env.txt")
	a.fake.Set(func(s *fakellm.Server) {
		s.Script = []fakellm.Step{
			{Text: "Writing the file.", Tool: "exec", Args: codexExec(`printf 'hello from codex\n' > ` + hello)},
			{Tool: "exec", Args: map[string]any{"input": "const r = await tools.mcp__fs__read_text_file({path: " + jsString(note) + "});\ntext(JSON.stringify(r));"}},
			{Tool: "exec", Args: codexExec(`curl -sS https://denied.example.com; ` + envDumpCommand(envDump))},
			{Text: "All done."},
		}
	})

	r := a.agent("codex", "OPENAI_API_KEY", "api.openai.com", []string{"--name", "codex"}, "exec", "write hello.txt, read the note, try the network")
	if r.code != 0 || !strings.Contains(r.stdout, "All done.") {
		t.Fatalf("codex did not finish the script:\n%v\nrequests: %+v", r, a.fake.Requests())
	}
	a.checkOpenAIRun(t, r, "codex", "CODEX_API_KEY", hello, "hello from codex\n", envDump, noteContent)

	before := len(a.fake.Requests())
	r = a.agent("codex", "OPENAI_API_KEY", "api.openai.com", []string{"--resume", "last"}, "exec", "and now?")
	a.checkResumed(t, r, before)
}

// TestCodexTalksOverTheWebSocketWithItsKeySwapped: where the provider
// accepts the WebSocket (as api.openai.com does), Codex's turns go over it
// through the gateway, the placeholder swapped for the real key in the
// upgrade request; no turn falls back to HTTPS.
func TestCodexTalksOverTheWebSocketWithItsKeySwapped(t *testing.T) {
	a := newAgentTest(t, codexIP, []fakellm.Step{
		{Tool: "exec", Args: codexExec("echo made by codex > made-by-codex.txt")},
		{Text: "All done."},
	})
	a.fake.ServeResponsesWebSocket(true)
	out := a.agent("codex", "OPENAI_API_KEY", "api.openai.com", []string{"--name", "codexws"}, "exec", "write the file")
	if out.code != 0 || !strings.Contains(out.stdout, "All done.") {
		t.Fatalf("the agent's run: %v", out)
	}
	ws := 0
	for _, q := range a.fake.Requests() {
		if q.Credential != a.key {
			t.Errorf("the fake got credential %q on %s, want the real key", q.Credential, q.API)
		}
		if q.API == "openai-responses" {
			t.Errorf("a turn fell back to HTTPS: %+v", q)
		}
		if q.API == "openai-responses-websocket" && q.Step >= 0 {
			ws++
		}
	}
	if ws < 2 {
		t.Errorf("%d scripted turns over the WebSocket, want 2: %+v", ws, a.fake.Requests())
	}
	a.checkUsage(t, "codexws")
	if strings.Contains(out.stdout+out.stderr, "Falling back from WebSockets") {
		t.Errorf("Codex fell back to HTTPS: %v", out)
	}
}
