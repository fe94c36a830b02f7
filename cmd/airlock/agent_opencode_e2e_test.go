//go:build linux

package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/fakellm"
)

// opencodeIP is the loopback address the fake OpenAI API listens on for
// the OpenCode tests.
const opencodeIP = "127.0.0.24"

// TestOpenCodeRunsWithItsKeyHeldBack runs the real OpenCode (1.18.33)
// through `airlock agent run opencode -- run -m openai/gpt-5.5 PROMPT`
// with OPENAI_API_KEY only in the host's environment, against the fake
// OpenAI API (its openai provider speaks the Responses API). The scripted
// model writes a file, reads a note through the policed MCP server, tries
// a denied host and dumps every process's environment, then answers. Then
// the session is resumed by its id.
func TestOpenCodeRunsWithItsKeyHeldBack(t *testing.T) {
	a := newAgentTest(t, opencodeIP, nil)
	note, noteContent := a.withMCPServer()
	hello := filepath.Join(a.ws, "hello.txt")
	envDump := filepath.Join(a.ws, "env.txt")
	a.fake.Set(func(s *fakellm.Server) {
		s.Script = []fakellm.Step{
			{Text: "Writing the file.", Tool: "bash", Args: map[string]any{"command": `printf 'hello from opencode\n' > ` + hello, "description": "Write the file"}},
			{Tool: "fs_read_text_file", Args: map[string]any{"path": note}},
			{Tool: "bash", Args: map[string]any{
				"description": "Try a denied host, then record every process's environment",
				"command":     `curl -sS https://denied.example.com; ` + envDumpCommand(envDump),
			}},
			{Text: "All done."},
		}
	})

	r := a.agent("opencode", "OPENAI_API_KEY", "api.openai.com", []string{"--name", "opencode"}, "run", "-m", "openai/gpt-5.5", "write hello.txt, read the note, try the network")
	if r.code != 0 || !strings.Contains(r.stdout, "All done.") {
		t.Fatalf("opencode did not finish the script:\n%v\nrequests: %+v", r, a.fake.Requests())
	}
	a.checkOpenAIRun(t, r, "opencode", "OPENAI_API_KEY", hello, "hello from opencode\n", envDump, noteContent)

	before := len(a.fake.Requests())
	r = a.agent("opencode", "OPENAI_API_KEY", "api.openai.com", []string{"--resume", "last"}, "run", "-m", "openai/gpt-5.5", "and now?")
	a.checkResumed(t, r, before)
}
