package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/state"
)

func TestExecParsesTheSandboxTheCommandAndItsFlags(t *testing.T) {
	var got *execOptions
	run := func(o *execOptions) error { got = o; return nil }
	if err := parse(t, newExecCmd(run), "-t", "-e", "A=1", "-C", "/w", "dev", "--", "ls", "-l"); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Ref != "dev" || strings.Join(got.Argv, " ") != "ls -l" || !got.TTY || got.Dir != "/w" || strings.Join(got.Env, ",") != "A=1" {
		t.Errorf("exec -t -e A=1 -C /w dev -- ls -l gave %+v", got)
	}
	var ue usageError
	for _, args := range [][]string{{}, {"dev"}, {"dev", "--"}} {
		if err := parse(t, newExecCmd(run), args...); !errors.As(err, &ue) {
			t.Errorf("exec %q = %v, want a usage error", args, err)
		}
	}
}

func TestAuditParsesOneSandboxFollowAndJSON(t *testing.T) {
	var got *auditOptions
	if err := parse(t, newAuditCmd(func(o *auditOptions) error { got = o; return nil }), "-f", "--json", "dev"); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Ref != "dev" || !got.Follow || !got.JSON {
		t.Errorf("audit -f --json dev gave %+v", got)
	}
	if err := parse(t, newAuditCmd(func(*auditOptions) error { return nil })); err == nil {
		t.Error("audit without a sandbox: no error")
	}
}

func TestAuditRunPrintsTheLogOrSaysThereIsNone(t *testing.T) {
	dir := t.TempDir()
	e := state.Entry{Record: state.Record{ID: "abc"}, Status: state.Status{State: state.Exited}, Dir: dir}
	ios, out, errOut := testIO()
	o := &auditOptions{IO: ios, Ref: "dev", Resolve: func(string) (state.Entry, error) { return e, nil }}
	if err := auditRun(o); err == nil || !strings.Contains(err.Error(), "sandbox dev has no audit log") {
		t.Errorf("audit of a sandbox without a log = %v, want one saying so", err)
	}
	log := `{"time":"2026-01-02T03:04:05Z","sandbox":"abc","kind":"network","subject":"example.com","decision":"deny"}` + "\nnot json\n"
	if err := os.WriteFile(filepath.Join(dir, "audit.jsonl"), []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := auditRun(o); err != nil || !strings.Contains(out.String(), "example.com") || !strings.Contains(errOut.String(), "line 2 unreadable") {
		t.Errorf("audit = %q (stderr %q), %v; want the record and the bad line named", out.String(), errOut.String(), err)
	}
	out.Reset()
	o.JSON = true
	if err := auditRun(o); err != nil || !strings.HasPrefix(out.String(), `{"time":"2026-01-02T03:04:05Z","sandbox":"abc"`) {
		t.Errorf("audit --json = %q, %v", out.String(), err)
	}
}
