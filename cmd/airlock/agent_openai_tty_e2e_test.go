package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/airlock-dev/airlock/internal/fakellm"
)

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
