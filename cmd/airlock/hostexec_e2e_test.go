package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostCommandsGoThroughTheBroker: inside, `hostexec git push` runs on
// the host (to a bare repository outside the sandbox's reach) because config
// auto-approves it; `rm` is refused by an auto_deny rule and runs nothing; a
// command on the ask list waits for a human; two sandboxes each run commands
// in their own workspace only.
func TestHostCommandsGoThroughTheBroker(t *testing.T) {
	if testBackend() == "docker" {
		t.Skip("TestDockerBackend: the binary inside a container is at /run/airlock/bin too, but git is not in the image")
	}
	eachMode(t, func(t *testing.T, mode string) {
		e := newEnv(t)
		e.writeConfig("version: 1\nhostexec:\n  auto_approve: ['^git push( |$)', '^touch ']\n  auto_deny: ['^rm ']\n  ask: ['^echo ']\n")
		bare := filepath.Join(t.TempDir(), "bare.git")
		if out, err := exec.Command("git", "init", "-q", "--bare", bare).CombinedOutput(); err != nil {
			t.Fatalf("git init --bare: %v %s", err, out)
		}
		os.Chmod(filepath.Dir(bare), 0o777)
		exec.Command("chmod", "-R", "a+rwX", bare).Run()
		if r := e.run("run", "-d", "-q", "--name", "h", "--network-mode", mode); r.code != 0 {
			t.Fatalf("run -d: %v", r)
		}
		defer e.run("kill", "--all")
		r := e.run("exec", "h", "--", "sh", "-c", `git init -q && git -c user.name=t -c user.email=t@t commit -q --allow-empty -m "from the sandbox" &&
			git remote add origin `+bare+` && hostexec git push -q origin HEAD:refs/heads/main && echo END`)
		if r.code != 0 || !strings.HasSuffix(r.stdout, "END\n") {
			t.Fatalf("hostexec git push: %v", r)
		}
		if out, err := exec.Command("git", "--git-dir", bare, "log", "--format=%s", "main").Output(); err != nil || strings.TrimSpace(string(out)) != "from the sandbox" {
			t.Fatalf("the bare repository has %q, %v: want the sandbox's commit", out, err)
		}
		witness := filepath.Join(e.ws, "witness")
		os.WriteFile(witness, []byte("x"), 0o644)
		if r := e.run("exec", "h", "--", "hostexec", "rm", "-f", witness); r.code != 125 || !strings.Contains(r.stderr, "denied") {
			t.Fatalf("hostexec rm: %v, want 125 and denied", r)
		}
		if _, err := os.Stat(witness); err != nil {
			t.Fatalf("the denied rm ran: %v", err)
		}
		// Unmatched is denied too; control: an approved touch works.
		if r := e.run("exec", "h", "--", "hostexec", "ls", "/"); r.code != 125 {
			t.Fatalf("hostexec ls (no rule): %v, want 125", r)
		}
		// Asked: it waits for a human's yes.
		wait := e.background("exec", "h", "--", "hostexec", "echo", "asked", "nicely")
		req := pendingIn(t, e, "echo asked nicely")
		if req.Kind != "hostexec" || !strings.Contains(req.Detail, "echo") {
			t.Errorf("request %+v: want kind hostexec showing the binary", req)
		}
		if r := e.run("approve", req.ID); r.code != 0 {
			t.Fatalf("approve: %v", r)
		}
		if r := wait(); r.code != 0 || r.stdout != "asked nicely\n" {
			t.Fatalf("hostexec echo after approve: %v", r)
		}
		// A second sandbox's commands run in its own workspace, never the first's.
		other := filepath.Join(t.TempDir(), "other")
		os.MkdirAll(other, 0o777)
		if r := e.run("run", "-d", "-q", "--name", "g", "--network-mode", mode, "--workspace", other); r.code != 0 {
			t.Fatalf("run -d g: %v", r)
		}
		if r := e.run("exec", "g", "--", "hostexec", "touch", "made-by-g"); r.code != 0 {
			t.Fatalf("hostexec touch in g: %v", r)
		}
		if _, err := os.Stat(filepath.Join(other, "made-by-g")); err != nil {
			t.Errorf("g's file is not in g's workspace: %v", err)
		}
		if _, err := os.Stat(filepath.Join(e.ws, "made-by-g")); err == nil {
			t.Error("g's command ran in h's workspace")
		}
		var asked, ran bool
		for _, rec := range auditRecords(t, e, "h") {
			asked = asked || rec.Kind == "approval" && rec.Subject == "echo asked nicely"
			ran = ran || rec.Kind == "hostexec" && rec.Op == "end" && strings.HasPrefix(rec.Subject, "git push") && rec.ExitCode != nil && *rec.ExitCode == 0
		}
		if !asked || !ran {
			t.Errorf("audit: the approval asked %v, git push's end recorded %v", asked, ran)
		}
	})
}

// TestHostCommandsOnEveryBackend: the same service from a container (the
// docker re-run of the suite) and from a native sandbox: an approved touch
// runs on the host in the workspace, an unlisted command is refused.
func TestHostCommandsOnEveryBackend(t *testing.T) {
	e := newEnv(t)
	e.writeConfig("version: 1\nhostexec:\n  auto_approve: ['^touch made-on-the-host$']\n")
	r := e.run("run", "-q", "--", "sh", "-c", "hostexec touch made-on-the-host && ! hostexec touch other 2>/dev/null && echo END")
	if r.code != 0 || !strings.HasSuffix(r.stdout, "END\n") {
		t.Fatalf("hostexec inside (%s backend): %v", map[bool]string{true: "docker", false: "native"}[testBackend() == "docker"], r)
	}
	if _, err := os.Stat(filepath.Join(e.ws, "made-on-the-host")); err != nil {
		t.Fatalf("the approved command did not run in the workspace: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e.ws, "other")); err == nil {
		t.Fatal("the unlisted command ran")
	}
}
