//go:build linux

package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/internal/state"
	"github.com/airlock-dev/airlock/internal/workspace"
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

func TestRmParsesSandboxesOrStoppedButNotBoth(t *testing.T) {
	var got *rmOptions
	if err := parse(t, newRmCmd(func(o *rmOptions) error { got = o; return nil }), "-f", "a", "b"); err != nil {
		t.Fatal(err)
	}
	if got == nil || strings.Join(got.Refs, ",") != "a,b" || !got.Force || got.Stopped {
		t.Errorf("rm -f a b gave %+v", got)
	}
	var ue usageError
	for _, args := range [][]string{{}, {"--stopped", "a"}} {
		if err := parse(t, newRmCmd(func(*rmOptions) error { return nil }), args...); !errors.As(err, &ue) {
			t.Errorf("rm %q = %v, want a usage error", args, err)
		}
	}
}

// rm keeps a running sandbox and one with changes to review unless -f,
// which kills first; what it removes it names.
func TestRmRunKeepsWhatIsRunningOrUnreviewedUnlessForced(t *testing.T) {
	entries := map[string]state.Entry{
		"run":  {Record: state.Record{ID: "run"}, Status: state.Status{State: state.Running}},
		"rev":  {Record: state.Record{ID: "rev"}, Status: state.Status{State: state.Exited}},
		"done": {Record: state.Record{ID: "done"}, Status: state.Status{State: state.Exited}},
	}
	var killed, removed []string
	ios, out, _ := testIO()
	o := &rmOptions{IO: ios, Refs: []string{"run", "rev", "done"},
		Pick: func(refs []string, _ bool) ([]state.Entry, error) {
			var es []state.Entry
			for _, r := range refs {
				es = append(es, entries[r])
			}
			return es, nil
		},
		Kill: func(e state.Entry) error { killed = append(killed, e.Record.ID); return nil },
		Pending: func(e state.Entry) (workspace.Counts, bool) {
			return workspace.Counts{Modified: 1}, e.Record.ID == "rev"
		},
		Remove: func(e state.Entry) error { removed = append(removed, e.Record.ID); return nil },
	}
	err := rmRun(o)
	if err == nil || !strings.Contains(err.Error(), "run: running") || !strings.Contains(err.Error(), "rev: its workspace changes") {
		t.Errorf("rm = %v, want run and rev refused", err)
	}
	if out.String() != "done\n" || strings.Join(removed, ",") != "done" || len(killed) != 0 {
		t.Errorf("rm printed %q, removed %q, killed %q: want done alone", out.String(), removed, killed)
	}
	out.Reset()
	removed = nil
	o.Force = true
	if err := rmRun(o); err != nil || strings.Join(removed, ",") != "run,rev,done" || strings.Join(killed, ",") != "run" {
		t.Errorf("rm -f = %v, removed %q, killed %q", err, removed, killed)
	}
}

func TestPruneRunKeepsUnreviewedChangesAndSweeps(t *testing.T) {
	ios, out, errOut := testIO()
	swept := false
	o := &pruneOptions{IO: ios,
		Stopped: func() ([]state.Entry, error) {
			return []state.Entry{{Record: state.Record{ID: "a"}}, {Record: state.Record{ID: "b"}}, {Record: state.Record{ID: "c"}}}, nil
		},
		Pending: func(e state.Entry) (workspace.Counts, bool) { return workspace.Counts{Created: 2}, e.Record.ID == "b" },
		Remove: func(e state.Entry) error {
			if e.Record.ID == "c" {
				return errors.New("busy")
			}
			return nil
		},
		Sweep: func(io.Writer, io.Writer, bool) error { swept = true; return nil },
	}
	if err := pruneRun(o); err != nil || out.String() != "removed 1 sandbox(es)\n" || !swept ||
		!strings.Contains(errOut.String(), "kept b") || !strings.Contains(errOut.String(), "c: busy") {
		t.Errorf("prune = %v, out %q, stderr %q, swept %v", err, out.String(), errOut.String(), swept)
	}
	if err := parse(t, newPruneCmd(func(*pruneOptions) error { return nil }), "x"); err == nil {
		t.Error("prune x: no error")
	}
}

func TestGatewayParsesItsRulesAndNeedsListen(t *testing.T) {
	var got *gatewayOptions
	run := func(o *gatewayOptions) error { got = o; return nil }
	if err := parse(t, newGatewayCmd(run), "--listen", "tcp:127.0.0.1:0", "--allow-host", "a.com", "--secret", "K@a.com", "--deny-host", "b.com"); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Listen != "tcp:127.0.0.1:0" || strings.Join(got.Flags.AllowHosts, ",") != "a.com" || strings.Join(got.Secrets, ",") != "K@a.com" {
		t.Errorf("gateway flags gave %+v", got)
	}
	var ue usageError
	if err := parse(t, newGatewayCmd(run), "--allow-host", "a.com"); !errors.As(err, &ue) {
		t.Errorf("gateway without --listen = %v, want a usage error", err)
	}
}

// The file's rules come first, the flags add to them; a bad secret flag is
// an error naming it.
func TestGatewayNetworkIsTheFileThenTheFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "gw.json")
	os.WriteFile(file, []byte(`{"allow_hosts": ["file.com"], "secrets": ["F@file.com"]}`), 0o600)
	o := &gatewayOptions{ConfigFile: file, Secrets: []string{"K@flag.com"}}
	o.Flags.AllowHosts = []string{"flag.com"}
	n, err := gatewayNetwork(o)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(n.AllowHosts, ",") != "file.com,flag.com" || len(n.Secrets) != 2 || n.Secrets[1].String() != "K@flag.com" {
		t.Errorf("gatewayNetwork = %+v", n)
	}
	o.Secrets = []string{"NOHOST"}
	if _, err := gatewayNetwork(o); err == nil || !strings.Contains(err.Error(), "--secret") {
		t.Errorf("a secret without a host = %v", err)
	}
}

func TestUIDoctorAndRPCParseTheirFlags(t *testing.T) {
	var ui *uiOptions
	if err := parse(t, newUICmd(func(o *uiOptions) error { ui = o; return nil }), "--listen", "127.0.0.1:8765", "--open"); err != nil || ui == nil || ui.Listen != "127.0.0.1:8765" || !ui.Open {
		t.Errorf("ui --listen --open = %v, %+v", err, ui)
	}
	var doc *doctorOptions
	if err := parse(t, newDoctorCmd(func(o *doctorOptions) error { doc = o; return nil }), "--json", "--fix"); err != nil || doc == nil || !doc.JSON || !doc.Fix {
		t.Errorf("doctor --json --fix = %v, %+v", err, doc)
	}
	called := false
	if err := parse(t, newRPCCmd(func(*rpcOptions) error { called = true; return nil })); err != nil || !called {
		t.Errorf("rpc = %v, called %v", err, called)
	}
	for name, c := range map[string]*cobra.Command{
		"ui":     newUICmd(func(*uiOptions) error { return nil }),
		"doctor": newDoctorCmd(func(*doctorOptions) error { return nil }),
		"rpc":    newRPCCmd(func(*rpcOptions) error { return nil }),
	} {
		if err := parse(t, c, "extra"); err == nil {
			t.Errorf("%s extra: no error", name)
		}
	}
}

func TestConfigAndTrustParseTheirFlags(t *testing.T) {
	var show *configShowOptions
	if err := parse(t, newConfigShowCmd(func(o *configShowOptions) error { show = o; return nil }), "--origin", "--json", "-w", "/src"); err != nil || show == nil || !show.Origin || !show.JSON || show.Workspace != "/src" {
		t.Errorf("config show --origin --json -w /src = %v, %+v", err, show)
	}
	var edit *configEditOptions
	if err := parse(t, newConfigEditCmd(func(o *configEditOptions) error { edit = o; return nil }), "-w", "/src"); err != nil || edit == nil || edit.Workspace != "/src" {
		t.Errorf("config edit -w /src = %v, %+v", err, edit)
	}
	var tr *trustOptions
	if err := parse(t, newTrustCmd(func(o *trustOptions) error { tr = o; return nil }), "--revoke", "/src"); err != nil || tr == nil || !tr.Revoke || tr.Dir != "/src" {
		t.Errorf("trust --revoke /src = %v, %+v", err, tr)
	}
	if err := parse(t, newTrustCmd(func(*trustOptions) error { return nil }), "a", "b"); err == nil {
		t.Error("trust a b: no error")
	}
}

// trust shows the file it trusts and records it; a file that does not
// parse is not trusted; --revoke forgets it.
func TestTrustRunShowsTrustsAndRevokes(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	dir := t.TempDir()
	ios, out, _ := testIO()
	o := &trustOptions{IO: ios, Dir: dir}
	os.WriteFile(filepath.Join(dir, ".airlock.yaml"), []byte("network:\n  alow_hosts: [x.com]\n"), 0o644)
	if err := trustRun(o); err == nil || !strings.Contains(err.Error(), "not trusted") {
		t.Errorf("trust of a bad file = %v", err)
	}
	os.WriteFile(filepath.Join(dir, ".airlock.yaml"), []byte("network:\n  allow_hosts: [x.com]\n"), 0o644)
	if err := trustRun(o); err != nil || !strings.Contains(out.String(), "allow_hosts: [x.com]") || !strings.Contains(out.String(), "airlock: trusted") {
		t.Errorf("trust = %v, printed %q", err, out.String())
	}
	out.Reset()
	o.Revoke = true
	if err := trustRun(o); err != nil || !strings.Contains(out.String(), "is no longer trusted") {
		t.Errorf("trust --revoke = %v, printed %q", err, out.String())
	}
}

func TestApproveDenyAndRevokeParseTheirDecision(t *testing.T) {
	var got *decideOptions
	run := func(o *decideOptions) error { got = o; return nil }
	if err := parse(t, newDecideCmd(true, run), "--scope", "project", "--wildcard", "--expires", "24h", "r1"); err != nil {
		t.Fatal(err)
	}
	if d := got.Decision; got.ID != "r1" || got.Verb != "approve" || !d.Allow || d.Scope != "project" || !d.Wildcard || d.By != "cli" || d.Expires.IsZero() {
		t.Errorf("approve --scope project --wildcard --expires 24h r1 gave %+v", got)
	}
	got = nil
	if err := parse(t, newDecideCmd(false, run), "r2"); err != nil || got == nil || got.Decision.Allow || got.Decision.Scope != "once" || got.Verb != "deny" {
		t.Errorf("deny r2 = %v, %+v", err, got)
	}
	var ue usageError
	for _, args := range [][]string{{}, {"--scope", "forever", "r"}, {"--expires", "1h", "r"}, {"--expires", "-1h", "--scope", "global", "r"}} {
		got = nil
		if err := parse(t, newDecideCmd(true, run), args...); !errors.As(err, &ue) || got != nil {
			t.Errorf("approve %q = %v (ran: %v), want a usage error before running", args, err, got != nil)
		}
	}
	var rv *revokeOptions
	if err := parse(t, newRevokeCmd(func(o *revokeOptions) error { rv = o; return nil }), "rule1"); err != nil || rv == nil || rv.ID != "rule1" {
		t.Errorf("revoke rule1 = %v, %+v", err, rv)
	}
	var ap *approvalsOptions
	if err := parse(t, newApprovalsCmd(func(o *approvalsOptions) error { ap = o; return nil }), "--decisions", "--json"); err != nil || ap == nil || !ap.Decisions || !ap.JSON || ap.Follow {
		t.Errorf("approvals --decisions --json = %v, %+v", err, ap)
	}
}

func TestImagesBuildLsAndRmParse(t *testing.T) {
	var got *imagesBuildOptions
	run := func(o *imagesBuildOptions) error { got = o; return nil }
	if err := parse(t, newImagesBuildCmd(run), "--format", "vm", "--variant", "standard", "--kernel-only"); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Format != "vm" || got.Build.Variant != "standard" || !got.Build.KernelOnly {
		t.Errorf("images build --format vm --variant standard --kernel-only gave %+v", got)
	}
	var ue usageError
	for _, args := range [][]string{{"--variant", "huge"}, {"--format", "iso"}, {"--kernel-only"}} {
		got = nil
		if err := parse(t, newImagesBuildCmd(run), args...); !errors.As(err, &ue) || got != nil {
			t.Errorf("images build %q = %v (ran: %v), want a usage error before running", args, err, got != nil)
		}
	}
	var rm *imagesRmOptions
	if err := parse(t, newImagesRmCmd(func(o *imagesRmOptions) error { rm = o; return nil }), "vm:minimal", "airlock/agents"); err != nil || rm == nil || strings.Join(rm.Refs, ",") != "vm:minimal,airlock/agents" {
		t.Errorf("images rm = %v, %+v", err, rm)
	}
	if err := parse(t, newImagesRmCmd(func(*imagesRmOptions) error { return nil })); !errors.As(err, &ue) {
		t.Errorf("images rm without an image = %v, want a usage error", err)
	}
	if err := parse(t, newImagesLsCmd(func(*imagesLsOptions) error { return nil }), "x"); err == nil {
		t.Error("images ls x: no error")
	}
}
