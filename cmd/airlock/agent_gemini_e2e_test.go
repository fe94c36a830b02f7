//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/fakellm"
)

// geminiIP is the loopback address the fake Gemini API listens on.
const geminiIP = "127.0.0.23"

// TestGeminiCLIRunsWithItsKeyHeldBack runs the real Gemini CLI (0.61.0)
// through `airlock agent run gemini` against the fake Gemini API, with
// GEMINI_API_KEY only in the host's environment. The scripted model writes
// a file, reads a note through the policed MCP server, runs a shell command
// that tries a denied host and dumps every process's environment into the
// workspace, then answers. Then the session is resumed by its id.
func TestGeminiCLIRunsWithItsKeyHeldBack(t *testing.T) {
	a := newAgentTest(t, geminiIP, nil)
	note, noteContent := a.withMCPServer()
	hello := filepath.Join(a.ws, "hello.txt")
	envDump := filepath.Join(a.ws, "env.txt")
	a.fake.Set(func(s *fakellm.Server) {
		s.Script = []fakellm.Step{
			{Text: "Writing the file.", Tool: "write_file", Args: map[string]any{"file_path": hello, "content": "hello from gemini\n"}},
			{Tool: "mcp_fs_read_text_file", Args: map[string]any{"path": note}},
			{Tool: "run_shell_command", Args: map[string]any{
				"description": "try a denied host, then record every process's environment",
				"command":     `curl -sS https://denied.example.com; ` + envDumpCommand(envDump),
			}},
			{Text: "All done."},
		}
	})

	r := a.agent("gemini", "GEMINI_API_KEY", "generativelanguage.googleapis.com", []string{"--name", "gem"}, "-p", "write hello.txt, read the note, try the network")
	if r.code != 0 || !strings.Contains(r.stdout, "All done.") {
		// The sandbox's audit holds the gateway's side of it (an upstream
		// failure is an "error" record with its reason).
		t.Fatalf("gemini did not finish the script:\n%v\nrequests: %+v\naudit:\n%s", r, a.fake.Requests(), a.run("audit", "--json", "gem").stdout)
	}
	if b, err := os.ReadFile(hello); err != nil || string(b) != "hello from gemini\n" {
		t.Errorf("hello.txt = %q, %v; want the file the model asked for", b, err)
	}
	a.checkKeyStayedOut(r)

	// The environment of every process inside holds the placeholder, never
	// the key (checkKeyStayedOut read env.txt with the rest of the workspace).
	env, err := os.ReadFile(envDump)
	if err != nil || !strings.Contains(string(env), "GEMINI_API_KEY=") || strings.Contains(string(env), "GEMINI_API_KEY="+a.key) {
		t.Errorf("the processes' environment (%v) should name GEMINI_API_KEY with a placeholder:\n%.2000s", err, env)
	}

	// What the tools answered is in the CLI's own session record: the
	// note through MCP, and the gateway's refusal of the denied host.
	session := geminiSessionText(t, a.home)
	if !strings.Contains(session, noteContent) {
		t.Errorf("the MCP server's note %q never reached the agent; its session:\n%.3000s", noteContent, session)
	}
	if !strings.Contains(session, "denied.example.com") || !strings.Contains(session, "Could not resolve host") {
		t.Errorf("the denied host's refusal is not what curl reported; session:\n%.3000s", session)
	}
	au := a.run("audit", "--json", "gem")
	if !strings.Contains(au.stdout, `"denied.example.com`) || !strings.Contains(au.stdout, `"deny"`) {
		t.Errorf("no audit record of the denied host:\n%v", au)
	}

	// Only the Gemini API was contacted (usage statistics are off), each
	// request carrying the real key.
	var turns int
	for _, q := range a.fake.Requests() {
		if q.API != "gemini" || q.Credential != a.key {
			t.Errorf("request %s %s with credential %q: want the Gemini API with the real key", q.API, q.Path, q.Credential)
		}
		if q.Stream {
			turns++
		}
	}
	if turns != len(a.fake.Script) {
		t.Errorf("%d streamed turns, want one per script step (%d)", turns, len(a.fake.Script))
	}

	// Resuming the session sends the first run's history: the step is the
	// count of tool results it already holds.
	before := len(a.fake.Requests())
	r = a.agent("gemini", "GEMINI_API_KEY", "generativelanguage.googleapis.com", []string{"--resume", "last"}, "-p", "and now?")
	if r.code != 0 {
		t.Fatalf("the resumed run failed:\n%v", r)
	}
	resumed := false
	for _, q := range a.fake.Requests()[before:] {
		if q.Stream {
			resumed = true
			if q.Step != len(a.fake.Script)-1 {
				t.Errorf("the resumed turn is at step %d, want %d (the first run's tool results)", q.Step, len(a.fake.Script)-1)
			}
		}
	}
	if !resumed {
		t.Errorf("the resumed run made no turn; requests: %+v", a.fake.Requests()[before:])
	}
	a.checkKeyStayedOut(r)
}

// geminiSessionText joins the CLI's session records kept in its private
// homes under airlock's data dir.
func geminiSessionText(t *testing.T, home string) string {
	t.Helper()
	var b strings.Builder
	eachFileUnder(agentHomesDir(home), func(p string, data []byte) {
		if strings.Contains(p, "/chats/session-") {
			b.Write(data)
		}
	})
	return b.String()
}
