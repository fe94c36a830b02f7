//go:build linux

package main

// End-to-end tests of --protect-git: the repository is not a way out. Each
// attack is judged on the host: after the sandbox has gone, the user's own
// git runs there (a commit, as the user would next) and a canary file the
// sandbox cannot reach shows whether anything the sandbox wrote ran. Each
// attack is first run without a sandbox on a copy of the same repository,
// where the canary must appear: the attack is real, and only the sandbox
// stops it.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// hostGit runs the host's git in dir as a user would (their HOME, no
// system config) and returns its combined output.
func hostGit(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	c := exec.Command("git", append([]string{"-c", "user.name=host", "-c", "user.email=host@example.com"}, args...)...)
	c.Dir = dir
	c.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + t.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "LANG=C"}
	out, err := c.CombinedOutput()
	return string(out), err
}

// gitRepoAt makes a repository at dir with one commit.
func gitRepoAt(t *testing.T, dir string) {
	t.Helper()
	os.MkdirAll(dir, 0o755)
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, a := range [][]string{{"init", "-q"}, {"add", "README"}, {"commit", "-q", "-m", "start"}} {
		if out, err := hostGit(t, dir, a...); err != nil {
			t.Fatalf("git %v: %v\n%s", a, err, out)
		}
	}
}

// hookScript writes an executable hook at path (inside a script) that
// touches the canary.
func hookScript(path, canary string) string {
	return "mkdir -p \"$(dirname " + path + ")\" && printf '#!/bin/sh\\ntouch " + canary + "\\n' > " + path + " && chmod +x " + path
}

type gitAttack struct {
	name string
	// setup runs on the host before the attack (both runs).
	setup func(t *testing.T, dir string)
	// script is the attack, run in the workspace; CANARY stands for the
	// canary's path, SECRET for a host repository's.
	script string
	// commitIn is where the host's git commit runs afterwards.
	commitIn string
	// host is the host's git command afterwards (default: a commit).
	host []string
	// took reports, beside the canary, whether the attack worked.
	took func(t *testing.T, dir string) bool
}

func gitAttacks(secretSHA string) []gitAttack {
	return []gitAttack{
		{name: "commondir redirect with a pre-commit hook",
			script: "cp -r .git evil && " + hookScript("evil/hooks/pre-commit", "CANARY") + " && echo \"$PWD/evil\" > .git/commondir"},
		{name: ".git moved aside and replaced",
			script: "mv .git .git.old && cp -r .git.old .git && " + hookScript(".git/hooks/pre-commit", "CANARY")},
		{name: ".git moved aside and a symlink put in its place",
			script: "cp -r .git evil && rm -f evil/commondir && " + hookScript("evil/hooks/pre-commit", "CANARY") + " && mv .git .git.old && ln -s evil .git"},
		{name: "hooksPath via config.worktree",
			setup: func(t *testing.T, dir string) {
				if out, err := hostGit(t, dir, "config", "extensions.worktreeConfig", "true"); err != nil {
					t.Fatalf("%v %s", err, out)
				}
			},
			script: hookScript("h/pre-commit", "CANARY") + " && printf '[core]\\n\\thooksPath = %s/h\\n' \"$PWD\" > .git/config.worktree"},
		{name: "hooks dir made where there was none",
			setup:  func(t *testing.T, dir string) { os.RemoveAll(filepath.Join(dir, ".git/hooks")) },
			script: hookScript(".git/hooks/pre-commit", "CANARY")},
		{name: "the hooks of a core.hooksPath in the workspace",
			setup: func(t *testing.T, dir string) {
				os.MkdirAll(filepath.Join(dir, ".githooks"), 0o755)
				if out, err := hostGit(t, dir, "config", "core.hooksPath", ".githooks"); err != nil {
					t.Fatalf("%v %s", err, out)
				}
			},
			script: hookScript(".githooks/pre-commit", "CANARY") + " || { mv .githooks .gh.old && " + hookScript(".githooks/pre-commit", "CANARY") + "; }"},
		{name: "a config file the repository includes from the workspace",
			setup: func(t *testing.T, dir string) {
				os.WriteFile(filepath.Join(dir, "team.gitconfig"), []byte("[user]\n\tname = team\n"), 0o644)
				if out, err := hostGit(t, dir, "config", "include.path", "../team.gitconfig"); err != nil {
					t.Fatalf("%v %s", err, out)
				}
			},
			script: "printf '[core]\\n\\tfsmonitor = touch CANARY\\n' >> team.gitconfig"},
		{name: "objects/info/alternates to a host repository",
			script: "echo SECRET/.git/objects > .git/objects/info/alternates && echo " + secretSHA + " > .git/refs/heads/stolen",
			took: func(t *testing.T, dir string) bool {
				_, err := hostGit(t, dir, "cat-file", "-e", secretSHA)
				return err == nil
			}},
		{name: "a legacy remotes file pointing at a host repository",
			script: "mkdir -p .git/remotes && printf 'URL: SECRET\\nPull: refs/heads/*:refs/heads/stolen/*\\n' > .git/remotes/x",
			took: func(t *testing.T, dir string) bool {
				hostGit(t, dir, "fetch", "-q", "x")
				_, err := hostGit(t, dir, "cat-file", "-e", secretSHA)
				return err == nil
			}},
		{name: "an objects dir replaced by a link to a host repository's",
			script: "rm -rf .git/objects/" + secretSHA[:2] + " && ln -s SECRET/.git/objects/" + secretSHA[:2] + " .git/objects/" + secretSHA[:2] +
				" && echo " + secretSHA + " > .git/refs/heads/stolen",
			took: func(t *testing.T, dir string) bool {
				_, err := hostGit(t, dir, "cat-file", "-e", secretSHA)
				return err == nil
			}},
		{name: "a nested repository with hooks and fsmonitor",
			script: "git init -q nested && " + hookScript("nested/.git/hooks/pre-commit", "CANARY") +
				" && git -C nested config core.fsmonitor 'touch CANARY'",
			commitIn: "nested"},
		{name: "a .git file pointing at a git dir the sandbox made",
			script: "cp -r .git evil && rm -f evil/commondir && " + hookScript("evil/hooks/pre-commit", "CANARY") +
				" && mkdir sub && printf 'gitdir: %s/evil\\n' \"$PWD\" > sub/.git",
			commitIn: "sub"},
		{name: "an existing submodule's hook and .git file",
			setup: func(t *testing.T, dir string) {
				src := filepath.Join(t.TempDir(), "src")
				gitRepoAt(t, src)
				for _, a := range [][]string{{"-c", "protocol.file.allow=always", "submodule", "add", "-q", src, "m"}, {"commit", "-q", "-m", "sub"}} {
					if out, err := hostGit(t, dir, a...); err != nil {
						t.Fatalf("git %v: %v\n%s", a, err, out)
					}
				}
			},
			script: hookScript(".git/modules/m/hooks/pre-commit", "CANARY") + "; cp -r .git/modules/m evil2 && rm -f evil2/commondir && { git config -f evil2/config --unset core.worktree || [ $? = 5 ]; } && " +
				hookScript("evil2/hooks/pre-commit", "CANARY") + " && printf 'gitdir: %s/evil2\\n' \"$PWD\" > m/.git",
			commitIn: "m"},
		{name: "a rebase left in progress with an exec line",
			script: `git -c user.name=a -c user.email=a@b commit -q --allow-empty -m two &&
				GIT_SEQUENCE_EDITOR='f() { printf "break\nexec touch CANARY\n" > "$1"; }; f' git -c user.name=a -c user.email=a@b rebase -q -i HEAD~1`,
			host: []string{"rebase", "--continue"}},
		{name: "a submodule git dir's hook",
			script: "mkdir -p .git/modules && git init -q --separate-git-dir .git/modules/m m && " +
				hookScript(".git/modules/m/hooks/pre-commit", "CANARY"),
			commitIn: "m"},
	}
}

// runGitAttack runs a on the host without a sandbox (the control: it must
// work) and in a sandbox with flags, then commits on the host and looks
// for the canary. apply, if set, runs after the sandbox (overlay, copy).
func runGitAttack(t *testing.T, a gitAttack, secret, secretSHA string, flags []string, apply bool) {
	expand := func(s, canary string) string {
		return strings.NewReplacer("CANARY", canary, "SECRET", secret).Replace(s)
	}
	tookIn := func(dir, canary string) bool {
		commitIn := filepath.Join(dir, a.commitIn)
		if a.host != nil {
			hostGit(t, commitIn, a.host...)
		} else {
			hostGit(t, commitIn, "commit", "-q", "--allow-empty", "-m", "host")
		}
		_, err := os.Stat(canary)
		return err == nil || (a.took != nil && a.took(t, dir))
	}
	// The control.
	ctl := filepath.Join(t.TempDir(), "ctl")
	gitRepoAt(t, ctl)
	if a.setup != nil {
		a.setup(t, ctl)
	}
	ctlCanary := filepath.Join(t.TempDir(), "canary")
	c := exec.Command("sh", "-c", expand(a.script, ctlCanary))
	c.Dir = ctl
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("control: the attack fails without a sandbox: %v\n%s", err, out)
	}
	if !tookIn(ctl, ctlCanary) {
		t.Fatalf("control: the attack does not work even without a sandbox")
	}
	// The sandbox.
	e := newEnv(t)
	gitRepoAt(t, e.ws)
	if a.setup != nil {
		a.setup(t, e.ws)
	}
	canary := filepath.Join(t.TempDir(), "canary")
	// The user's next commit is made inside: it must still work (bind mode).
	r := e.sh(expand(a.script, canary)+"\ngit -c user.name=in -c user.email=in@example.com commit -q --allow-empty -m inside && echo COMMITTED",
		append([]string{"--name", "att"}, flags...)...)
	if strings.Contains(r.stderr, "review failed") {
		t.Fatalf("the review failed: %v", r)
	}
	if apply {
		if ar := e.run("apply", "--yes", "att"); ar.code != 0 && !strings.Contains(ar.stderr, "risky") {
			t.Fatalf("apply --yes: %v", ar)
		}
	}
	if tookIn(e.ws, canary) {
		t.Fatalf("the attack got through: the host's git ran or read what the sandbox wrote\nsandbox: %v", r)
	}
	if len(flags) == 0 && !strings.Contains(r.stdout, "COMMITTED") {
		t.Errorf("git commit inside failed: %v", r)
	}
	if out, err := hostGit(t, e.ws, "status", "--short"); err != nil && len(flags) == 0 {
		t.Errorf("the host's git status after the run: %v\n%s", err, out)
	}
}

// secretRepo makes a host repository outside the workspace with a commit
// of its own, and returns where and the commit.
func secretRepo(t *testing.T) (string, string) {
	secret := filepath.Join(t.TempDir(), "secret")
	gitRepoAt(t, secret)
	os.WriteFile(filepath.Join(secret, "secret.txt"), []byte("only here\n"), 0o644)
	for _, a := range [][]string{{"add", "secret.txt"}, {"commit", "-q", "-m", "secret"}} {
		if out, err := hostGit(t, secret, a...); err != nil {
			t.Fatalf("%v %s", err, out)
		}
	}
	sha, _ := hostGit(t, secret, "rev-parse", "HEAD")
	return secret, strings.TrimSpace(sha)
}

// TestProtectGitAttacksInBindMode: in bind mode every attack is stopped
// while the sandbox runs or defused when it exits.
func TestProtectGitAttacksInBindMode(t *testing.T) {
	secret, sha := secretRepo(t)
	for _, a := range gitAttacks(sha) {
		t.Run(a.name, func(t *testing.T) { runGitAttack(t, a, secret, sha, nil, false) })
	}
}

// TestProtectGitAttacksInOverlayAndCopyModes: the host sees nothing during
// the run, and an apply without --risky carries none of it.
func TestProtectGitAttacksInOverlayAndCopyModes(t *testing.T) {
	secret, sha := secretRepo(t)
	for _, mode := range []string{"overlay", "copy"} {
		for _, a := range gitAttacks(sha) {
			t.Run(mode+"/"+a.name, func(t *testing.T) {
				runGitAttack(t, a, secret, sha, []string{"--workspace-mode", mode}, true)
			})
		}
	}
}

// TestProtectGitCommitsInsideAreApplied is the positive control of the
// overlay and copy attacks: a commit made inside is no risky change and is
// applied with a plain apply --yes; git works inside in bind mode.
func TestProtectGitCommitsInsideAreApplied(t *testing.T) {
	for _, mode := range []string{"bind", "overlay", "copy"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			gitRepoAt(t, e.ws)
			r := e.sh(`set -e
				g() { git -c user.name=in -c user.email=in@example.com "$@"; }
				echo more >> README && g status --short && g add README && g commit -q -m inside
				g branch side && g checkout -q side && g checkout -q - && g log --oneline | wc -l && g diff HEAD~1 --stat >/dev/null
				g stash list && g gc -q 2>/dev/null; echo DONE`, "--name", "ok", "--workspace-mode", mode)
			if r.code != 0 || !strings.Contains(r.stdout, "DONE") {
				t.Fatalf("git inside: %v", r)
			}
			if mode != "bind" {
				d := e.diffJSON("ok")
				for p, c := range d {
					if len(c.Risks) > 0 {
						t.Errorf("a commit's %s is risky: %v", p, c.Risks)
					}
				}
				if ar := e.run("apply", "--yes", "ok"); ar.code != 0 {
					t.Fatalf("apply: %v", ar)
				}
			}
			if out, err := hostGit(t, e.ws, "log", "--format=%s", "-1"); err != nil || out != "inside\n" {
				t.Errorf("the host's git log: %q %v", out, err)
			}
			if out, err := hostGit(t, e.ws, "status", "--short"); err != nil || out != "" {
				t.Errorf("the host's git status: %q %v", out, err)
			}
			if strings.Contains(r.stderr, "defused") {
				t.Errorf("plain git use was defused: %v", r)
			}
			for _, n := range []string{"commondir", "config.worktree", "objects/info/alternates", "worktrees"} {
				if _, err := os.Lstat(filepath.Join(e.ws, ".git", n)); err == nil {
					t.Errorf(".git/%s left behind", n)
				}
			}
		})
	}
}

// TestProtectGitWorktreeGitdirFile: a workspace that is a linked worktree
// (its .git a gitdir: file) cannot point it elsewhere.
func TestProtectGitWorktreeGitdirFile(t *testing.T) {
	e := newEnv(t)
	main := filepath.Join(t.TempDir(), "main")
	gitRepoAt(t, main)
	os.Remove(e.ws)
	if out, err := hostGit(t, main, "worktree", "add", "-q", e.ws); err != nil {
		t.Fatalf("worktree add: %v\n%s", err, out)
	}
	before := e.read(".git")
	canary := filepath.Join(t.TempDir(), "canary")
	r := e.sh(`git init -q evil
		` + hookScript("evil/.git/hooks/pre-commit", canary) + `
		printf 'gitdir: %s/evil/.git\n' "$PWD" > .git 2>/dev/null || echo gitfile-ro
		mv .git .git.old 2>/dev/null || echo gitfile-pinned
		git status --short >/dev/null && echo STATUS`)
	if !strings.Contains(r.stdout, "gitfile-ro") || !strings.Contains(r.stdout, "gitfile-pinned") {
		t.Errorf("the .git file was writable or movable inside: %v", r)
	}
	if e.read(".git") != before {
		t.Errorf(".git changed: %q", e.read(".git"))
	}
	hostGit(t, e.ws, "commit", "-q", "--allow-empty", "-m", "host")
	if _, err := os.Stat(canary); err == nil {
		t.Fatal("the host's git ran the sandbox's hook")
	}
}

// TestProtectGitSubdirectoryOfARepository: where the workspace is a
// subdirectory of a repository, the repository's .git is read-only inside,
// and a git dir the run makes in the workspace is defused at exit.
func TestProtectGitSubdirectoryOfARepository(t *testing.T) {
	e := newEnv(t)
	gitRepoAt(t, e.ws)
	sub := filepath.Join(e.ws, "sub")
	os.MkdirAll(sub, 0o755)
	canary := filepath.Join(t.TempDir(), "canary")
	script := `touch ../.git/hooks/pre-commit 2>/dev/null && echo PARENT-WRITABLE
		git init -q . && ` + hookScript(".git/hooks/pre-commit", canary) + ` && git config core.fsmonitor 'touch ` + canary + `' && echo MADE`
	c := e.cmd("run", "-q", "--", "sh", "-c", script)
	c.Dir = sub
	r := e.runCmd(c)
	if strings.Contains(r.stdout, "PARENT-WRITABLE") {
		t.Errorf("the repository's .git above the workspace is writable inside: %v", r)
	}
	if !strings.Contains(r.stdout, "MADE") {
		t.Fatalf("git init inside: %v", r)
	}
	hostGit(t, sub, "commit", "-q", "--allow-empty", "-m", "host")
	hostGit(t, sub, "status")
	if _, err := os.Stat(canary); err == nil {
		t.Fatalf("the host's git ran what the sandbox set up in the git dir it made: %v", r)
	}
	if _, err := os.Lstat(filepath.Join(e.ws, ".git/hooks/pre-commit")); err == nil {
		t.Error("a hook reached the repository's own .git")
	}
}
