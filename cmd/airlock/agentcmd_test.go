//go:build linux

package main

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/internal/agentrun"
	"github.com/airlock-dev/airlock/internal/agents"
	"github.com/airlock-dev/airlock/internal/config"
)

// parse runs c on args with its run function replaced, as airlock would.
func parse(t *testing.T, c *cobra.Command, args ...string) error {
	t.Helper()
	c.SetArgs(args)
	c.SetOut(io.Discard)
	c.SetErr(io.Discard)
	c.SilenceUsage, c.SilenceErrors = true, true
	return c.Execute()
}

func testIO() (*ioStreams, *bytes.Buffer, *bytes.Buffer) {
	out, errOut := &bytes.Buffer{}, &bytes.Buffer{}
	return &ioStreams{In: strings.NewReader(""), Out: out, ErrOut: errOut}, out, errOut
}

func TestAgentLsTakesNoArguments(t *testing.T) {
	called := false
	if err := parse(t, newAgentLsCmd(func(*agentLsOptions) error { called = true; return nil })); err != nil || !called {
		t.Errorf("agent ls = %v (run called: %v), want the run function called", err, called)
	}
	called = false
	err := parse(t, newAgentLsCmd(func(*agentLsOptions) error { called = true; return nil }), "claude")
	var ue usageError
	if !errors.As(err, &ue) || called {
		t.Errorf("agent ls claude = %v (run called: %v), want a usage error before running", err, called)
	}
}

func TestAgentLsRunShowsWhereEachAgentIsOrHowToInstallIt(t *testing.T) {
	ios, out, _ := testIO()
	err := agentLsRun(&agentLsOptions{IO: ios, Find: func(p *agents.Profile) (agentrun.CLI, error) {
		if p.Name == "claude" {
			return agentrun.CLI{Path: "/opt/claude", Where: "PATH"}, nil
		}
		return agentrun.CLI{}, errors.New("not found")
	}})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(agents.All())+1 || !strings.HasPrefix(lines[0], "NAME") {
		t.Fatalf("agent ls printed %q, want a header and a line per agent", out.String())
	}
	for _, want := range []string{
		"PATH /opt/claude",                               // found, with its version unknown
		"not installed: airlock agent install codex",     // on npm
		"not installed: see airlock agent install goose", // not on npm
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("agent ls printed %q, want it to contain %q", out.String(), want)
		}
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "claude ") && !strings.Contains(l, " ? ") {
			t.Errorf("claude's line %q: an unknown version is shown as ?", l)
		}
	}
}

func TestAgentInstallParsesTheNameAndVersion(t *testing.T) {
	var got *agentInstallOptions
	if err := parse(t, newAgentInstallCmd(func(o *agentInstallOptions) error { got = o; return nil }), "codex", "--version", "1.2.3"); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Name != "codex" || got.Version != "1.2.3" {
		t.Errorf("agent install codex --version 1.2.3 gave %+v", got)
	}
	var ue usageError
	if err := parse(t, newAgentInstallCmd(func(*agentInstallOptions) error { return nil })); !errors.As(err, &ue) {
		t.Errorf("agent install without a name = %v, want a usage error", err)
	}
}

func TestAgentInstallRunRefusesWhatItCannotInstall(t *testing.T) {
	t.Setenv("AIRLOCK_DATA_DIR", t.TempDir())
	ios, _, _ := testIO()
	var ue usageError
	if err := agentInstallRun(&agentInstallOptions{IO: ios, Name: "nosuch"}); !errors.As(err, &ue) {
		t.Errorf("installing an unknown agent = %v, want a usage error", err)
	}
	if err := agentInstallRun(&agentInstallOptions{IO: ios, Name: "goose"}); err == nil || !strings.Contains(err.Error(), "is not on npm") {
		t.Errorf("installing goose = %v, want one saying it is not on npm", err)
	}
	t.Setenv("PATH", t.TempDir()) // no npm
	if err := agentInstallRun(&agentInstallOptions{IO: ios, Name: "codex"}); err == nil || !strings.Contains(err.Error(), "npm is not on PATH") {
		t.Errorf("installing codex without npm = %v, want one naming npm", err)
	}
}

func TestAgentSessionsParsesTheAgentAndAll(t *testing.T) {
	var got *agentSessionsOptions
	if err := parse(t, newAgentSessionsCmd(func(o *agentSessionsOptions) error { got = o; return nil }), "claude", "-a"); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Agent != "claude" || !got.All {
		t.Errorf("agent sessions claude -a gave %+v", got)
	}
	if err := parse(t, newAgentSessionsCmd(func(*agentSessionsOptions) error { return nil }), "claude", "codex"); err == nil {
		t.Error("agent sessions with two names: want an error")
	}
}

func TestAgentSessionsRunListsThisProjectsSessionsOrAll(t *testing.T) {
	t.Setenv("AIRLOCK_DATA_DIR", t.TempDir())
	p := &agents.Profile{Name: "claude", Display: "Claude Code"}
	for _, s := range []struct{ id, project string }{{"one-1", "/src/one"}, {"two-1", "/src/two"}} {
		p.FindSession = func(string, time.Time) (string, error) { return s.id, nil }
		agentrun.RecordSession(p, s.project, s.project, "/h", time.Now(), 0, io.Discard, true)
	}
	ios, out, _ := testIO()
	o := &agentSessionsOptions{IO: ios, Agent: "claude", Project: func() (string, error) { return "/src/one", nil }}
	if err := agentSessionsRun(o); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "one-1") || strings.Contains(s, "two-1") {
		t.Errorf("sessions of /src/one: %q, want one-1 only", s)
	}
	out.Reset()
	o.All = true
	o.Project = func() (string, error) { t.Error("--all asked for the project"); return "", nil }
	if err := agentSessionsRun(o); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "one-1") || !strings.Contains(s, "two-1") {
		t.Errorf("sessions of every project: %q, want both", s)
	}
}

func TestAgentRunParsesTheAgentItsArgumentsAndResume(t *testing.T) {
	var got *agentRunOptions
	run := func(o *agentRunOptions) error { got = o; return nil }
	if err := parse(t, newAgentRunCmd(run), "claude", "--resume", "last", "--keep=false", "--", "-p", "fix it"); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Name != "claude" || strings.Join(got.Args, " ") != "-p fix it" || got.Resume != "last" || !got.KeepSet || got.TTYSet {
		t.Fatalf("agent run claude --resume last --keep=false -- -p 'fix it' gave %+v", got)
	}
	var ue usageError
	// No name: the default agent, with every argument after -- its own.
	got = nil
	if err := parse(t, newAgentRunCmd(run), "--", "-p", "fix it"); err != nil || got == nil || got.Name != "" || strings.Join(got.Args, " ") != "-p fix it" {
		t.Errorf("agent run -- -p 'fix it' = %v, gave %+v; want no name and the arguments", err, got)
	}
	for _, args := range [][]string{{"claude", "fix"}} {
		got = nil
		if err := parse(t, newAgentRunCmd(run), args...); !errors.As(err, &ue) || got != nil {
			t.Errorf("agent run %q = %v (ran: %v), want a usage error before running", args, err, got != nil)
		}
	}
}

func TestAgentRunRunRefusesAnUnknownAgentBeforeLoadingConfig(t *testing.T) {
	ios, _, _ := testIO()
	loaded := false
	o := &agentRunOptions{IO: ios, Run: &runOptions{}, Name: "nosuch", Config: func() (*config.Loaded, error) { loaded = true; return nil, errors.New("no") }}
	var ue usageError
	if err := agentRun(o); !errors.As(err, &ue) || !strings.Contains(err.Error(), "known agents are") {
		t.Errorf("agent run nosuch = %v, want a usage error listing the agents", err)
	}
	if loaded {
		t.Error("the config was loaded for a run refused by its flags")
	}
	o.Name = "claude"
	if err := agentRun(o); err == nil || err.Error() != "no" || !loaded {
		t.Errorf("agent run claude with a config that fails = %v, want that error", err)
	}
}
