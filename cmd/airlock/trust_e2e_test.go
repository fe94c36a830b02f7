//go:build linux

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/config"
)

// TestTrustFailsClosed: a sandbox that edits, removes, links or replaces
// by a FIFO a trusted .airlock.yaml does not remove its deny_hosts: every
// later run still keeps example.com out (the host's server sees nothing),
// says why in one line, and none blocks. Judged by what the server got.
func TestTrustFailsClosed(t *testing.T) {
	u := testUpstream(t)
	e := newEnv(t)
	get := func(path string) string { return "curl -fsS --max-time 20 https://example.com/" + path }
	saw := func(path string) bool { return strings.Contains(u.received(t), "GET /"+path+" ") }
	run := func(script string) result {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		c := e.cmd(append(u.flags("--allow-host", "example.com", "--"), "sh", "-c", script)...)
		c = exec.CommandContext(ctx, c.Path, c.Args[1:]...)
		c.Env, c.Dir = e.environ(), e.ws
		r := e.runCmd(c)
		if ctx.Err() != nil {
			t.Fatalf("airlock run blocked: %v", r)
		}
		return r
	}
	// Control: the flag's allow works.
	if r := run(get("trust-control")); r.code != 0 || !saw("trust-control") {
		t.Fatalf("control: %v", r)
	}
	repo := filepath.Join(e.ws, ".airlock.yaml")
	os.WriteFile(repo, []byte("network: {deny_hosts: [example.com]}\n"), 0o644)
	if r := e.run("trust"); r.code != 0 {
		t.Fatalf("trust: %v", r)
	}
	if r := run(get("trusted")); r.code == 0 || saw("trusted") {
		t.Fatalf("the trusted deny: %v", r)
	}
	for _, c := range []struct{ name, change, warn string }{
		{"appended comment", "echo '# just a comment' >> .airlock.yaml", "changed since you trusted it"},
		{"rewrite", "echo 'network: {allow_hosts: [example.com]}' > .airlock.yaml", "changed since you trusted it"},
		{"removed", "rm .airlock.yaml", "is gone"},
		{"link", "echo 'env: [A=1]' > other.yaml; rm -f .airlock.yaml; ln -s other.yaml .airlock.yaml", "a symbolic link"},
		{"fifo", "rm -f .airlock.yaml; mkfifo .airlock.yaml", "a FIFO"},
	} {
		// The sandbox itself makes the change (bind mode: it lands); where
		// its file system cannot make a FIFO (a VM's shared directory), the
		// host makes the same change.
		if r := run(c.change); r.code != 0 {
			t.Logf("%s: the sandbox could not make the change (%v); the host makes it", c.name, r)
			if out, err := exec.Command("sh", "-c", "cd "+e.ws+" && "+c.change).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v %s", c.name, err, out)
			}
		}
		path := "after-" + strings.ReplaceAll(c.name, " ", "-")
		r := run(get(path))
		if r.code == 0 || saw(path) {
			t.Errorf("%s: the trusted deny was dropped: %v", c.name, r)
		}
		// Said in one line (run -q keeps quiet; config show says it).
		if r := e.run("config", "show"); !strings.Contains(r.stderr, c.warn) || !strings.Contains(r.stderr, "deny rules as last trusted") || !strings.Contains(r.stdout, "example.com") {
			t.Errorf("%s: config show = %v, want a line saying %q and that the trusted denies apply", c.name, r, c.warn)
		}
	}
	// Other commands in the project do not block on the FIFO either.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, args := range [][]string{{"config", "show"}, {"trust"}} {
		c := exec.CommandContext(ctx, airlockBin, args...)
		c.Env, c.Dir = e.environ(), e.ws
		out, _ := c.CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("airlock %v blocked on a FIFO .airlock.yaml: %s", args, out)
		}
	}
}

// TestProjectCannotBeRehomed: where the workspace is a repository's
// subdirectory, a .git the sandbox makes in it does not turn the next run
// into another project: the repository's project file (its deny) holds.
func TestProjectCannotBeRehomed(t *testing.T) {
	u := testUpstream(t)
	e := newEnv(t)
	repoDir := e.ws
	if out, err := exec.Command("git", "init", "-q", repoDir).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	sub := filepath.Join(repoDir, "sub")
	os.MkdirAll(sub, 0o755)
	run := func(script string) result {
		c := e.cmd(append(u.flags("--allow-host", "example.com", "--"), "sh", "-c", script)...)
		c.Dir = sub
		return e.runCmd(c)
	}
	saw := func(path string) bool { return strings.Contains(u.received(t), "GET /"+path+" ") }
	// Control: no project file yet, the flag's allow works (and this first
	// use records the project).
	if r := run("curl -fsS --max-time 20 https://example.com/rehome-control"); r.code != 0 || !saw("rehome-control") {
		t.Fatalf("control: %v", r)
	}
	pf := config.ProjectFile(filepath.Join(e.home, ".config", "airlock"), repoDir)
	os.MkdirAll(filepath.Dir(pf), 0o700)
	os.WriteFile(pf, []byte("network: {deny_hosts: [example.com]}\n"), 0o600)
	if r := run("curl -fsS --max-time 20 https://example.com/rehome-denied"); r.code == 0 || saw("rehome-denied") {
		t.Fatalf("the project file's deny: %v", r)
	}
	// The sandbox makes a .git of its own in the workspace.
	if r := run("mkdir .git && git init -q . 2>/dev/null; ls -a"); r.code != 0 || !strings.Contains(r.stdout, ".git") {
		t.Fatalf("the sandbox's .git: %v", r)
	}
	if r := run("curl -fsS --max-time 20 https://example.com/rehome-after"); r.code == 0 || saw("rehome-after") {
		t.Errorf("after a .git made inside, the project file's deny was dropped: %v", r)
	}
	// A sandbox of the whole repository plants a .git in a directory not
	// yet used as a workspace; its first use still keeps the repository's
	// denies (those of an enclosing repository hold), and its saved
	// project denies too.
	top := e.cmd(append(u.flags("--"), "sh", "-c", "mkdir -p sub2 && git init -q sub2")...)
	top.Dir = repoDir
	if r := e.runCmd(top); r.code != 0 {
		t.Fatalf("the sandbox's nested repository: %v", r)
	}
	sub2 := func(path string) result {
		c := e.cmd(append(u.flags("--allow-host", "example.com", "--"), "sh", "-c", "curl -fsS --max-time 20 https://example.com/"+path)...)
		c.Dir = filepath.Join(repoDir, "sub2")
		return e.runCmd(c)
	}
	if r := sub2("rehome-nested"); r.code == 0 || saw("rehome-nested") {
		t.Errorf("a nested repository the sandbox made escapes the project file's deny: %v", r)
	}
	os.Remove(pf)
	if r := sub2("rehome-nested-control"); r.code != 0 || !saw("rehome-nested-control") {
		t.Fatalf("control: without the project file the nested workspace reaches the host: %v", r)
	}
	saveDecisions(t, e, "host: example.com, decision: deny, scope: project, project: "+repoDir)
	if r := sub2("rehome-nested-saved"); r.code == 0 || saw("rehome-nested-saved") {
		t.Errorf("a nested repository the sandbox made escapes the project's saved deny: %v", r)
	}
}

// TestTrustedFileCannotNameASandboxFile: a trusted .airlock.yaml naming a
// decisions file by a relative path names a file the sandbox can write:
// the run stops with one line naming the rule, and the allow the sandbox
// wrote there reaches nothing.
func TestTrustedFileCannotNameASandboxFile(t *testing.T) {
	u := testUpstream(t)
	e := newEnv(t)
	repo := filepath.Join(e.ws, ".airlock.yaml")
	os.WriteFile(repo, []byte("approvals: {mode: ask, decisions: .airlock/decisions.yaml}\n"), 0o644)
	if r := e.run("trust"); r.code != 0 {
		t.Fatalf("trust: %v", r)
	}
	// What a sandbox would write there.
	os.MkdirAll(filepath.Join(e.ws, ".airlock"), 0o755)
	os.WriteFile(filepath.Join(e.ws, ".airlock", "decisions.yaml"),
		[]byte("version: 1\ndecisions:\n  - {host: example.com, decision: allow, scope: session}\n"), 0o644)
	r := e.run(append(u.flags("--"), "sh", "-c", "curl -fsS --max-time 20 https://example.com/sandbox-decisions")...)
	if r.code != 125 || !strings.Contains(r.stderr, ".airlock.yaml:1: approvals.decisions") || !strings.Contains(r.stderr, "which the sandbox can write") {
		t.Errorf("run = %v; want exit 125 naming the rule", r)
	}
	if strings.Contains(u.received(t), "GET /sandbox-decisions ") {
		t.Error("the allow the sandbox wrote reached the server")
	}
	// Positive control: the same file kept in the config dir is obeyed.
	cfg := filepath.Join(e.home, ".config", "airlock", "ci-decisions.yaml")
	os.WriteFile(cfg, []byte("version: 1\ndecisions:\n  - {host: example.com, decision: allow, scope: session}\n"), 0o600)
	os.WriteFile(repo, []byte("approvals: {mode: ask, decisions: "+cfg+"}\n"), 0o644)
	if r := e.run("trust"); r.code != 0 {
		t.Fatalf("trust: %v", r)
	}
	r = e.run(append(u.flags("--"), "sh", "-c", "curl -fsS --max-time 20 https://example.com/config-decisions")...)
	if r.code != 0 || !strings.Contains(u.received(t), "GET /config-decisions ") {
		t.Errorf("a decisions file in the config dir: %v", r)
	}
}
