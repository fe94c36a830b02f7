//go:build linux

package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAFIFOWhereTheSessionIsLookedForDoesNotHangAgentRun: the "agent" (a
// script named codex on PATH) leaves FIFOs where airlock looks for its
// session after it exits, a plain one and a link to one. airlock agent run
// must still end, with the agent's own exit status, well within the bound;
// the positive control is the same script without them.
func TestAFIFOWhereTheSessionIsLookedForDoesNotHangAgentRun(t *testing.T) {
	for name, plant := range map[string]string{
		"no FIFO (control)":         `:`,
		"a FIFO named as a rollout": `mkfifo "$D/rollout-2026-11-29T00-00-00-01a20a12-22fb-75a1-a1c0-18e6c1d2b814.jsonl"`,
		"a link to a FIFO":          `mkfifo /tmp/fifo && ln -s /tmp/fifo "$D/rollout-2026-11-29T00-00-01-01a20a12-22fb-75a1-a1c0-18e6c1d2b815.jsonl"`,
		"a FIFO for a log file":     `mkdir -p "$HOME/.local/share/opencode/log" && mkfifo "$HOME/.local/share/opencode/log/x.log" && mkfifo "$D/rollout-2026-11-29T00-00-02-01a20a12-22fb-75a1-a1c0-18e6c1d2b816.jsonl"`,
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			bin := filepath.Join(filepath.Dir(e.ws), "bin")
			os.MkdirAll(bin, 0o755)
			os.Chmod(filepath.Dir(e.ws), 0o755)
			script := "#!/bin/sh\nD=\"${CODEX_HOME:-$HOME/.codex}/sessions/2026/11/29\"\nmkdir -p \"$D\"\n" + plant + "\necho agent-done\nexit 7\n"
			if err := os.WriteFile(filepath.Join(bin, "codex"), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			c := e.cmd("agent", "run", "codex", "--workspace", e.ws, "--", "exec", "hi")
			c.Env = append(e.environ(), "CODEX_API_KEY=sk-test-not-a-real-key")
			for i, v := range c.Env {
				if p, ok := strings.CutPrefix(v, "PATH="); ok {
					c.Env[i] = "PATH=" + bin + ":" + p
				}
			}
			done := make(chan result, 1)
			start := time.Now()
			go func() { done <- e.runCmd(c) }()
			select {
			case r := <-done:
				if r.code != 7 || !strings.Contains(r.stdout, "agent-done") {
					t.Fatalf("agent run = %v, want the agent's exit 7 and its output", r)
				}
				fifos := 0
				filepath.WalkDir(agentHomesDir(e.home), func(p string, d fs.DirEntry, err error) error {
					if err == nil && d.Type()&fs.ModeNamedPipe != 0 {
						fifos++
					}
					return nil
				})
				if want := !strings.HasPrefix(name, "no FIFO"); (fifos > 0) != want && !strings.Contains(name, "link") {
					t.Errorf("%d FIFOs in the agent's home after the run", fifos)
				}
				if d := time.Since(start); d > 20*time.Second {
					t.Errorf("agent run took %s after a FIFO was planted", d)
				}
			case <-time.After(60 * time.Second):
				c.Process.Signal(os.Kill)
				t.Fatal("airlock agent run did not end within 60 s of the agent's exit: blocked on a planted FIFO")
			}
		})
	}
}
