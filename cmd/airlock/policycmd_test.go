//go:build linux

package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/suggest"
)

func TestPolicySuggestParsesTheSandboxWriteAndYes(t *testing.T) {
	var got *policySuggestOptions
	run := func(o *policySuggestOptions) error { got = o; return nil }
	if err := parse(t, newPolicySuggestCmd(run), "try", "--write", "--yes"); err != nil || got == nil || got.Ref != "try" || !got.Write || !got.Yes {
		t.Fatalf("policy suggest try --write --yes = %v, gave %+v", err, got)
	}
	var ue usageError
	for _, args := range [][]string{{}, {"a", "b"}, {"try", "--yes"}} {
		got = nil
		if err := parse(t, newPolicySuggestCmd(run), args...); !errors.As(err, &ue) || got != nil {
			t.Errorf("policy suggest %q = %v (ran: %v), want a usage error before running", args, err, got != nil)
		}
	}
}

// The y/N question: only y writes; a no, or no terminal without --yes,
// leaves the project file as it was.
func TestPolicySuggestWritesOnlyOnYes(t *testing.T) {
	dir := t.TempDir()
	project := filepath.Join(t.TempDir(), "app")
	l := &config.Loaded{Dir: dir, Project: project, Spec: config.Spec{Workspace: config.Workspace{Path: project}}}
	pf := config.ProjectFile(dir, project)
	s := &suggest.Suggestion{Entries: []suggest.Entry{{Key: "network.allow_hosts", Value: "api.example.com",
		Needs: []*suggest.Need{{Kind: suggest.KindHost, Host: "api.example.com", Port: 443, Records: map[string]int{"dns deny": 2}}}}}}
	for _, c := range []struct {
		name        string
		interactive bool
		yes         bool
		answer      string
		wantWritten bool
		wantErr     string
	}{
		{name: "no terminal and no --yes", wantErr: "no terminal to ask on"},
		{name: "a no", interactive: true, answer: "n\n"},
		{name: "nothing typed", interactive: true, answer: ""},
		{name: "a yes", interactive: true, answer: "y\n", wantWritten: true},
	} {
		os.Remove(pf)
		ios, _, errOut := testIO()
		ios.In = strings.NewReader(c.answer)
		err := writeSuggestion(&policySuggestOptions{IO: ios, Write: true, Yes: c.yes, Interactive: c.interactive}, l, s)
		if c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) || c.wantErr == "" && err != nil {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.wantErr)
		}
		data, rerr := os.ReadFile(pf)
		if written := rerr == nil; written != c.wantWritten {
			t.Errorf("%s: written %v, want %v; stderr:\n%s", c.name, written, c.wantWritten, errOut)
		}
		if c.wantWritten && !strings.Contains(string(data), "- api.example.com") {
			t.Errorf("%s: the file is %q", c.name, data)
		}
		if !strings.Contains(errOut.String(), "+     - api.example.com") {
			t.Errorf("%s: the diff was not shown before asking:\n%s", c.name, errOut)
		}
	}
	// A config dir inside the workspace: refused, whatever the answer.
	inside := &config.Loaded{Dir: filepath.Join(project, ".cfg"), Project: project, Spec: l.Spec}
	ios, _, _ := testIO()
	if err := writeSuggestion(&policySuggestOptions{IO: ios, Write: true, Yes: true}, inside, s); err == nil || !strings.Contains(err.Error(), "which a sandbox can write") {
		t.Errorf("writing into the workspace = %v, want a refusal", err)
	}
}
