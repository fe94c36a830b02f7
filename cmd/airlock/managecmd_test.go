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
)

func TestLogsParsesTheSandboxAndFollow(t *testing.T) {
	var got *logsOptions
	if err := parse(t, newLogsCmd(func(o *logsOptions) error { got = o; return nil }), "-f", "dev"); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Ref != "dev" || !got.Follow {
		t.Errorf("logs -f dev gave %+v", got)
	}
	var ue usageError
	if err := parse(t, newLogsCmd(func(*logsOptions) error { return nil })); !errors.As(err, &ue) {
		t.Errorf("logs without a sandbox = %v, want a usage error", err)
	}
}

func TestLogsRunPrintsTheLogOrSaysThereIsNone(t *testing.T) {
	dir := t.TempDir()
	e := state.Entry{Record: state.Record{ID: "abc"}, Status: state.Status{State: state.Running}, Dir: dir}
	ios, out, _ := testIO()
	o := &logsOptions{IO: ios, Ref: "dev", Resolve: func(string) (state.Entry, error) { return e, nil }}
	if err := logsRun(o); err == nil || !strings.Contains(err.Error(), "sandbox dev has no logs") {
		t.Errorf("logs of a sandbox without a log = %v, want one saying so", err)
	}
	if err := os.WriteFile(e.LogPath(), []byte("hello from the sandbox\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := logsRun(o); err != nil || out.String() != "hello from the sandbox\n" {
		t.Errorf("logs = %q, %v; want the log's contents", out.String(), err)
	}
	// -f follows until the sandbox stops, then prints what came meanwhile.
	out.Reset()
	o.Follow = true
	calls := 0
	o.Resolve = func(string) (state.Entry, error) {
		calls++
		if calls == 2 {
			f, _ := os.OpenFile(filepath.Join(dir, filepath.Base(e.LogPath())), os.O_APPEND|os.O_WRONLY, 0)
			f.WriteString("and its last words\n")
			f.Close()
			return state.Entry{}, errors.New("gone")
		}
		return e, nil
	}
	if err := logsRun(o); err != nil || out.String() != "hello from the sandbox\nand its last words\n" {
		t.Errorf("logs -f = %q, %v; want the log to its end", out.String(), err)
	}
}

func TestKillParsesSandboxesOrAllButNotBoth(t *testing.T) {
	var got *killOptions
	if err := parse(t, newKillCmd(func(o *killOptions) error { got = o; return nil }), "a", "b"); err != nil {
		t.Fatal(err)
	}
	if got == nil || strings.Join(got.Refs, ",") != "a,b" || got.All {
		t.Errorf("kill a b gave %+v", got)
	}
	var ue usageError
	for _, args := range [][]string{{}, {"--all", "a"}} {
		if err := parse(t, newKillCmd(func(*killOptions) error { return nil }), args...); !errors.As(err, &ue) {
			t.Errorf("kill %q = %v, want a usage error", args, err)
		}
	}
	got = nil
	if err := parse(t, newKillCmd(func(o *killOptions) error { got = o; return nil }), "--all"); err != nil || got == nil || !got.All {
		t.Errorf("kill --all = %v, %+v", err, got)
	}
}

func TestKillRunPrintsWhatItKilledAndReportsTheRest(t *testing.T) {
	ios, out, _ := testIO()
	o := &killOptions{IO: ios, Refs: []string{"a", "b", "c"},
		Pick: func(refs []string, all bool) ([]state.Entry, error) {
			var es []state.Entry
			for _, r := range refs {
				es = append(es, state.Entry{Record: state.Record{ID: r}})
			}
			return es, nil
		},
		Kill: func(e state.Entry) error {
			if e.Record.ID == "b" {
				return errors.New("not running (exited 0)")
			}
			return nil
		},
	}
	err := killRun(o)
	if out.String() != "a\nc\n" {
		t.Errorf("kill printed %q, want the two it killed", out.String())
	}
	if err == nil || err.Error() != "b: not running (exited 0)" {
		t.Errorf("kill = %v, want b's failure alone", err)
	}
	o.Pick = func([]string, bool) ([]state.Entry, error) { return nil, errors.New("no such sandbox") }
	if err := killRun(o); err == nil || err.Error() != "no such sandbox" {
		t.Errorf("kill of an unknown sandbox = %v", err)
	}
}

func TestLsParsesRunningAndJSON(t *testing.T) {
	var got *lsOptions
	if err := parse(t, newLsCmd(func(o *lsOptions) error { got = o; return nil }), "--running", "--json"); err != nil {
		t.Fatal(err)
	}
	if got == nil || !got.Running || !got.JSON {
		t.Errorf("ls --running --json gave %+v", got)
	}
	var ue usageError
	if err := parse(t, newLsCmd(func(*lsOptions) error { return nil }), "abc"); !errors.As(err, &ue) {
		t.Errorf("ls abc = %v, want a usage error", err)
	}
}

func TestLsRunShowsEverySandboxOrTheRunningOnes(t *testing.T) {
	code := 3
	entries := []state.Entry{
		{Record: state.Record{ID: "run1", Name: "dev", Command: []string{"sleep", "1"}, Workspace: "/src"}, Status: state.Status{State: state.Running}},
		{Record: state.Record{ID: "old1", Backend: "docker"}, Status: state.Status{State: state.Exited, ExitCode: &code}},
	}
	ios, out, _ := testIO()
	o := &lsOptions{IO: ios, List: func() ([]state.Entry, error) { return entries, nil }}
	if err := lsRun(o); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") ||
		!strings.Contains(lines[1], "dev") || !strings.Contains(lines[1], "sleep 1") ||
		!strings.Contains(lines[2], "exited (3)") || !strings.Contains(lines[2], "cli/docker") {
		t.Errorf("ls printed %q", out.String())
	}
	out.Reset()
	o.Running, o.JSON = true, true
	if err := lsRun(o); err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || len(got) != 1 || got[0]["id"] != "run1" {
		t.Errorf("ls --running --json = %s (%v), want run1 alone", out.String(), err)
	}
}

func TestGetParsesOneSandbox(t *testing.T) {
	var got *getOptions
	if err := parse(t, newGetCmd(func(o *getOptions) error { got = o; return nil }), "dev"); err != nil || got == nil || got.Ref != "dev" {
		t.Errorf("get dev = %v, %+v", err, got)
	}
	var ue usageError
	if err := parse(t, newGetCmd(func(*getOptions) error { return nil }), "a", "b"); !errors.As(err, &ue) {
		t.Errorf("get a b = %v, want a usage error", err)
	}
}

func TestGetRunPrintsTheSandboxAsJSON(t *testing.T) {
	dir := t.TempDir()
	ios, out, _ := testIO()
	o := &getOptions{IO: ios, Ref: "dev", Resolve: func(ref string) (state.Entry, error) {
		if ref != "dev" {
			return state.Entry{}, errors.New("no such sandbox")
		}
		return state.Entry{Record: state.Record{ID: "abc", Name: "dev"}, Status: state.Status{State: state.Running}, Dir: dir}, nil
	}}
	if err := getRun(o); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || got["id"] != "abc" || got["state_dir"] != dir || got["llm"] != nil {
		t.Errorf("get = %s (%v), want abc's record, its dir and no llm totals", out.String(), err)
	}
	o.Ref = "other"
	if err := getRun(o); err == nil || err.Error() != "no such sandbox" {
		t.Errorf("get other = %v", err)
	}
}
