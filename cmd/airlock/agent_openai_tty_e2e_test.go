//go:build linux

package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-dev/airlock/internal/fakellm"
)

// TestCodexStartsInteractivelyWithNoQuestion: `airlock agent run codex --
// PROMPT` opens Codex's own UI with no login, trust or update screen (its
// background app-server, which fails inside, is off; its login file holds
// the placeholder), and the prompt goes through to a written file.
func TestCodexStartsInteractivelyWithNoQuestion(t *testing.T) {
	a := newAgentTest(t, codexIP, nil)
	hello := filepath.Join(a.ws, "hello.txt")
	a.fake.Set(func(s *fakellm.Server) {
		s.Script = []fakellm.Step{
			{Tool: "exec", Args: codexExec(`printf 'hello from an interactive codex\n' > ` + hello)},
			{Text: "Wrote hello.txt."},
		}
	})
	screen := a.runInteractively(t, a.agentCmd("codex", "OPENAI_API_KEY", "api.openai.com", []string{"--timeout", "3m"}, "write hello.txt"), 1)
	if b, err := os.ReadFile(hello); err != nil || string(b) != "hello from an interactive codex\n" {
		t.Errorf("the file Codex wrote: %q, %v", b, err)
	}
	a.checkKeyStayedOut(result{stdout: screen})
}

// TestOpenCodeStartsInteractivelyWithNoQuestion: `airlock agent run
// opencode -- --prompt PROMPT` opens OpenCode's UI, and the prompt goes
// through to a written file.
func TestOpenCodeStartsInteractivelyWithNoQuestion(t *testing.T) {
	a := newAgentTest(t, opencodeIP, nil)
	hello := filepath.Join(a.ws, "hello.txt")
	a.fake.Set(func(s *fakellm.Server) {
		s.Script = []fakellm.Step{
			{Tool: "bash", Args: map[string]any{"command": `printf 'hello from an interactive opencode\n' > ` + hello, "description": "Write the file"}},
			{Text: "Wrote hello.txt."},
		}
	})
	screen := a.runInteractively(t, a.agentCmd("opencode", "OPENAI_API_KEY", "api.openai.com", []string{"--timeout", "3m"}, "-m", "openai/gpt-5.5", "--prompt", "write hello.txt"), 1)
	if b, err := os.ReadFile(hello); err != nil || string(b) != "hello from an interactive opencode\n" {
		t.Errorf("the file OpenCode wrote: %q, %v", b, err)
	}
	a.checkKeyStayedOut(result{stdout: screen})
}
