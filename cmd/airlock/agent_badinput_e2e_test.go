//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAgentBadInputSaysWhatToDo: an unknown agent lists the known ones; a
// missing CLI says how to install it; no key says which variables were
// looked for. Each is exit 125 with nothing started.
func TestAgentBadInputSaysWhatToDo(t *testing.T) {
	e := newEnv(t)
	if r := e.run("agent", "run", "nope"); r.code != 125 || !strings.Contains(r.stderr, "known agents are") || !strings.Contains(r.stderr, "claude") {
		t.Errorf("unknown agent: %v", r)
	}
	c := e.cmd("agent", "run", "claude", "--", "-p", "hi")
	c.Env = e.environ("ANTHROPIC_API_KEY=sk-ant-test-0123456789") // PATH has no claude
	if r := e.runCmd(c); r.code != 125 || !strings.Contains(r.stderr, "airlock agent install claude") {
		t.Errorf("CLI missing: %v", r)
	}
	// A stand-in CLI on PATH, and no key in the environment.
	bin := t.TempDir()
	os.WriteFile(filepath.Join(bin, "claude"), []byte("#!/bin/sh\necho ran\n"), 0o755)
	c = e.cmd("agent", "run", "claude", "--", "-p", "hi")
	c.Env = e.environ()
	for i, v := range c.Env {
		if p, ok := strings.CutPrefix(v, "PATH="); ok {
			c.Env[i] = "PATH=" + bin + ":" + p
		}
	}
	if r := e.runCmd(c); r.code != 125 || !strings.Contains(r.stderr, "ANTHROPIC_API_KEY") || strings.Contains(r.stdout, "ran") {
		t.Errorf("no key: %v", r)
	}
	if r := e.run("agent", "run", "claude", "extra"); r.code != 125 || !strings.Contains(r.stderr, "go after --") {
		t.Errorf("agent arguments without --: %v", r)
	}
	if r := e.run("agent", "ls"); r.code != 0 || !strings.Contains(r.stdout, "claude") || !strings.Contains(r.stdout, "codex") {
		t.Errorf("agent ls: %v", r)
	}
}
