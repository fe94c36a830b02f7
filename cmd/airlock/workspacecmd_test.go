//go:build linux

package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/state"
	"github.com/airlock-dev/airlock/internal/workspace"
)

func TestDiffParsesOneFormatAtMost(t *testing.T) {
	var got *diffOptions
	if err := parse(t, newDiffCmd(func(o *diffOptions) error { got = o; return nil }), "dev", "--name-only"); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Ref != "dev" || !got.NameOnly || got.Stat || got.JSON {
		t.Errorf("diff dev --name-only gave %+v", got)
	}
	var ue usageError
	ran := false
	if err := parse(t, newDiffCmd(func(*diffOptions) error { ran = true; return nil }), "dev", "--stat", "--json"); !errors.As(err, &ue) || ran {
		t.Errorf("diff --stat --json = %v (ran: %v), want a usage error before running", err, ran)
	}
}

// copySession is a real copy-mode session of a fresh workspace whose
// README the sandbox changed.
func copySession(t *testing.T) (root string, s *workspace.Session) {
	t.Helper()
	root = t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "README"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := workspace.Prepare(filepath.Join(t.TempDir(), "ws"), workspace.Config{Mode: workspace.Copy, Root: root}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(); err != nil {
		t.Fatal(err)
	}
	// What the sandbox did, in its copy.
	if err := os.WriteFile(filepath.Join(s.CopyDir(), "README"), []byte("hello, world\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, s
}

func TestDiffRunShowsACopySandboxsChanges(t *testing.T) {
	_, s := copySession(t)
	ios, out, _ := testIO()
	o := &diffOptions{IO: ios, Ref: "dev", Open: func(string) (state.Entry, *workspace.Session, error) { return state.Entry{}, s, nil }}
	if err := diffRun(o); err != nil {
		t.Fatal(err)
	}
	if d := out.String(); !strings.Contains(d, "-hello\n") || !strings.Contains(d, "+hello, world\n") {
		t.Errorf("diff = %q, want README's change", d)
	}
	out.Reset()
	o.JSON = true
	if err := diffRun(o); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Mode    string           `json:"mode"`
		Changes []map[string]any `json:"changes"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || got.Mode != "copy" || len(got.Changes) != 1 {
		t.Errorf("diff --json = %s (%v), want one change of a copy sandbox", out.String(), err)
	}
	o.Open = func(string) (state.Entry, *workspace.Session, error) {
		return state.Entry{}, nil, errors.New("no such sandbox")
	}
	if err := diffRun(o); err == nil || err.Error() != "no such sandbox" {
		t.Errorf("diff of an unknown sandbox = %v", err)
	}
}

func TestDiscardParsesOneSandbox(t *testing.T) {
	var got *discardOptions
	if err := parse(t, newDiscardCmd(func(o *discardOptions) error { got = o; return nil }), "dev"); err != nil || got == nil || got.Ref != "dev" {
		t.Errorf("discard dev = %v, %+v", err, got)
	}
	var ue usageError
	if err := parse(t, newDiscardCmd(func(*discardOptions) error { return nil })); !errors.As(err, &ue) {
		t.Errorf("discard without a sandbox = %v, want a usage error", err)
	}
}

func TestDiscardRunRefusesARunningSandboxAndThrowsAwayAStoppedOnesChanges(t *testing.T) {
	root, s := copySession(t)
	e := state.Entry{Record: state.Record{ID: "abc"}, Status: state.Status{State: state.Running}}
	ios, out, _ := testIO()
	o := &discardOptions{IO: ios, Ref: "dev", Open: func(string) (state.Entry, *workspace.Session, error) { return e, s, nil }}
	if err := discardRun(o); err == nil || !strings.Contains(err.Error(), "sandbox dev is running") {
		t.Errorf("discard of a running sandbox = %v", err)
	}
	if cs, err := s.Changes(); err != nil || len(cs) != 1 {
		t.Fatalf("after a refused discard: %d changes (%v), want the change kept", len(cs), err)
	}
	e.Status.State = state.Exited
	if err := discardRun(o); err != nil || out.String() != "discarded the changes of abc\n" {
		t.Fatalf("discard = %q, %v", out.String(), err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "README")); err != nil || string(b) != "hello\n" {
		t.Errorf("the workspace after discard: %q, %v; want it untouched", b, err)
	}
	if cs, err := s.Changes(); err == nil && len(cs) != 0 {
		t.Errorf("after discard: %d changes, want none", len(cs))
	}
}

func TestApplyParsesTheSandboxItsPathsAndFlags(t *testing.T) {
	var got *applyOptions
	if err := parse(t, newApplyCmd(func(o *applyOptions) error { got = o; return nil }), "--yes", "--risky", "dev", "src", "README"); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Ref != "dev" || strings.Join(got.Paths, ",") != "src,README" || !got.Yes || !got.Risky {
		t.Errorf("apply --yes --risky dev src README gave %+v", got)
	}
	var ue usageError
	if err := parse(t, newApplyCmd(func(*applyOptions) error { return nil })); !errors.As(err, &ue) {
		t.Errorf("apply without a sandbox = %v, want a usage error", err)
	}
}

// Without a terminal apply needs --yes and changes nothing; with it the
// sandbox's change lands on the host; a running sandbox is refused.
func TestApplyRunNeedsYesWithoutATerminalThenLandsTheChange(t *testing.T) {
	root, s := copySession(t)
	ios, _, _ := testIO()
	entry := state.Entry{Status: state.Status{State: state.Exited}}
	o := &applyOptions{IO: ios, Ref: "dev", Open: func(string) (state.Entry, *workspace.Session, error) { return entry, s, nil }}
	var ue usageError
	if err := applyRun(o); !errors.As(err, &ue) {
		t.Errorf("apply without a terminal or --yes = %v, want a usage error", err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "README")); string(b) != "hello\n" {
		t.Fatalf("README = %q before any yes", b)
	}
	entry.Status.State = state.Running
	o.Yes = true
	if err := applyRun(o); err == nil || !strings.Contains(err.Error(), "is running") {
		t.Errorf("apply of a running sandbox = %v", err)
	}
	entry.Status.State = state.Exited
	if err := applyRun(o); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "README")); string(b) != "hello, world\n" {
		t.Errorf("README = %q after apply --yes, want the sandbox's change", b)
	}
}
