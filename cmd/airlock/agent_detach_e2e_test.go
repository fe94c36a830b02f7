//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/airlock-dev/airlock/internal/fakellm"
)

// TestAgentRunDetachedKeepsItsKeysInMemory: `airlock agent run claude -t
// -d` starts Claude Code in the background, its key handed to the
// background supervisor over a pipe; airlock attach reaches its screen, the
// prompt goes through to the fake provider with the real key, the detach
// keys leave it running, and the key is nowhere on disk: not in the state
// dir (record, logs, audit), the workspace or the agent's home.
func TestAgentRunDetachedKeepsItsKeysInMemory(t *testing.T) {
	a := newAgentTest(t, claudeTestIP, nil)
	hello := filepath.Join(a.ws, "hello.txt")
	a.fake.Set(func(s *fakellm.Server) {
		s.Script = []fakellm.Step{
			{Tool: "Write", Args: map[string]any{"file_path": hello, "content": "hello from a detached claude\n"}},
			{Text: "Wrote hello.txt."},
		}
	})
	c := a.agentCmd("claude", "ANTHROPIC_API_KEY", "api.anthropic.com", []string{"-t", "-d", "--name", "bg", "--timeout", "3m"}, "write hello.txt")
	c.Env = append(c.Env, "TERM=xterm-256color")
	r := a.runCmd(c)
	if r.code != 0 || len(strings.TrimSpace(r.stdout)) != 12 {
		t.Fatalf("agent run -t -d: %v", r)
	}
	at := a.cmd("attach", "bg")
	at.Env = append(at.Env, "TERM=xterm-256color")
	ptm, err := pty.StartWithSize(at, &pty.Winsize{Rows: 40, Cols: 120})
	if err != nil {
		t.Fatal(err)
	}
	defer ptm.Close()
	var screen lockedBuffer
	go answerTerminal(ptm, &screen)
	done := make(chan error, 1)
	go func() { done <- at.Wait() }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if b, err := os.ReadFile(hello); err == nil && string(b) == "hello from a detached claude\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the detached agent never wrote hello.txt; the screen:\n%s", screen.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	ptm.Write([]byte("\x10\x11"))
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("attach ended with %v after the detach keys; the screen:\n%s", err, screen.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("attach did not end on the detach keys; the screen:\n%s", screen.String())
	}
	if r := a.run("ls"); !strings.Contains(r.stdout, "running") {
		t.Fatalf("after detach: %v", r)
	}
	a.checkKeyStayedOut(result{stdout: screen.String()})
	eachFileUnder(a.state, func(p string, b []byte) {
		if strings.Contains(string(b), a.key) {
			t.Errorf("the real key is in %s", p)
		}
	})
	if r := a.run("kill", "bg"); r.code != 0 {
		t.Fatalf("kill: %v", r)
	}
}
