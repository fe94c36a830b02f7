package workspace

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	c := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
	c.Dir = dir
	c.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(), "GIT_CONFIG_NOSYSTEM=1"}
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func TestGitGuardPinsTheGitDirAndKeepsWhatGitReadsReadOnly(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	root := t.TempDir()
	gitIn(t, root, "init", "-q")
	gitIn(t, root, "commit", "-q", "--allow-empty", "-m", "one")
	os.RemoveAll(filepath.Join(root, ".git/hooks")) // made again, empty, to be held read-only
	ro, pin := GitGuard(Config{Mode: Bind, Root: root, ProtectGit: true})
	g := func(rel string) string { return filepath.Join(root, ".git", rel) }
	for _, want := range []string{"config", "config.worktree", "commondir", "hooks", "info", "worktrees", "remotes", "branches", "objects/info/alternates", "objects/info/http-alternates"} {
		if !slices.Contains(ro, g(want)) {
			t.Errorf("read-only paths lack .git/%s: %v", want, ro)
		}
	}
	for _, want := range []string{"", "objects", "objects/info", "refs", "logs"} {
		if !slices.Contains(pin, filepath.Clean(g(want))) {
			t.Errorf("pinned paths lack .git/%s: %v", want, pin)
		}
	}
	// The placeholders change nothing git does.
	if b, _ := os.ReadFile(g("commondir")); string(b) != ".\n" {
		t.Errorf("commondir placeholder: %q", b)
	}
	gitIn(t, root, "commit", "-q", "--allow-empty", "-m", "two")
	if out := gitIn(t, root, "log", "--format=%s"); out != "two\none\n" {
		t.Errorf("git log with the placeholders: %q", out)
	}
	removePlaceholders(g(""))
	for _, n := range []string{"commondir", "config.worktree", "objects/info/alternates", "worktrees", "remotes", "branches"} {
		if _, err := os.Lstat(g(n)); err == nil {
			t.Errorf(".git/%s left after the run", n)
		}
	}
	// Other modes, and no --protect-git: nothing.
	for _, cfg := range []Config{{Mode: Overlay, Root: root, ProtectGit: true}, {Mode: Copy, Root: root, ProtectGit: true}, {Mode: Bind, Root: root}} {
		if ro, pin := GitGuard(cfg); len(ro)+len(pin) > 0 {
			t.Errorf("GitGuard(%+v) = %v, %v; want nothing", cfg, ro, pin)
		}
	}
}

func TestGitGuardKeepsAGitdirFileAndTheGitDirItNamesInside(t *testing.T) {
	root := t.TempDir()
	gd := filepath.Join(root, "store")
	for _, d := range []string{"objects", "refs", "hooks"} {
		os.MkdirAll(filepath.Join(gd, d), 0o755)
	}
	os.WriteFile(filepath.Join(gd, "HEAD"), []byte("ref: refs/heads/main\n"), 0o644)
	os.WriteFile(filepath.Join(gd, "config"), []byte("[core]\n"), 0o644)
	os.WriteFile(filepath.Join(root, ".git"), []byte("gitdir: store\n"), 0o644)
	ro, pin := GitGuard(Config{Mode: Bind, Root: root, ProtectGit: true})
	if !slices.Contains(ro, filepath.Join(root, ".git")) || !slices.Contains(ro, filepath.Join(gd, "config")) || !slices.Contains(ro, filepath.Join(gd, "hooks")) {
		t.Errorf("read-only: %v", ro)
	}
	if !slices.Contains(pin, gd) {
		t.Errorf("pinned: %v", pin)
	}
	// One that names a directory outside the workspace: the file alone.
	os.WriteFile(filepath.Join(root, ".git"), []byte("gitdir: /etc\n"), 0o644)
	if ro, pin := GitGuard(Config{Mode: Bind, Root: root, ProtectGit: true}); len(ro) != 1 || len(pin) != 0 {
		t.Errorf("a gitdir outside: %v %v", ro, pin)
	}
}

func TestDefuseGitMakesWhatTheRunMadeHarmless(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	root := t.TempDir()
	before, err := Scan(root, ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// What a run makes: a nested repository with a hook and an fsmonitor,
	// a .git file pointing at a bare one with a hook, a plain file.
	nested := filepath.Join(root, "nested")
	os.MkdirAll(nested, 0o755)
	gitIn(t, nested, "init", "-q")
	gitIn(t, nested, "config", "core.fsmonitor", "touch /tmp/x")
	gitIn(t, nested, "config", "user.name", "kept")
	os.WriteFile(filepath.Join(nested, ".git/hooks/pre-commit"), []byte("#!/bin/sh\n"), 0o755)
	gitIn(t, root, "init", "-q", "--bare", "evil")
	os.WriteFile(filepath.Join(root, "evil/hooks/post-checkout"), []byte("#!/bin/sh\n"), 0o755)
	os.MkdirAll(filepath.Join(root, "sub"), 0o755)
	os.WriteFile(filepath.Join(root, "sub/.git"), []byte("gitdir: ../evil\n"), 0o644)
	os.WriteFile(filepath.Join(root, "plain.txt"), []byte("x\n"), 0o644)
	after, err := Scan(root, ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range DefuseGit(root, Compare(before, after, nil)) {
		got[d.Path] = d.Action
	}
	for _, p := range []string{"nested/.git/hooks/pre-commit", "nested/.git/config", "evil/hooks/post-checkout", "sub/.git"} {
		if !strings.HasPrefix(got[p], "renamed") && !strings.HasPrefix(got[p], "reduced") {
			t.Errorf("%s not defused: %q (all: %v)", p, got[p], got)
		}
	}
	if len(got) != 4 {
		t.Errorf("defused %d paths, want 4 (samples, excludes and plain files stay): %v", len(got), got)
	}
	if _, err := os.Lstat(filepath.Join(nested, ".git/hooks/pre-commit")); err == nil {
		t.Error("the nested hook is still there")
	}
	if out := gitIn(t, nested, "config", "--list", "--local"); strings.Contains(out, "fsmonitor") || !strings.Contains(out, "user.name=kept") {
		t.Errorf("the nested config after defusing:\n%s", out)
	}
	if b, _ := os.ReadFile(filepath.Join(nested, ".git/config"+defusedSuffix)); !strings.Contains(string(b), "fsmonitor") {
		t.Errorf("the old nested config is not kept beside: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(root, "sub/.git")); err == nil {
		t.Error("the .git file is still there")
	}
}

func TestWhatTheRepositoryConfigNamesInTheWorkspaceIsGuarded(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{".git/objects", ".git/refs", ".githooks", "scripts"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.WriteFile(filepath.Join(root, ".git/HEAD"), []byte("ref: refs/heads/main\n"), 0o644)
	os.WriteFile(filepath.Join(root, "team.gitconfig"), []byte("[filter \"x\"]\n\tclean = scripts/clean.sh %f\n"), 0o644)
	os.WriteFile(filepath.Join(root, "scripts/clean.sh"), []byte("#!/bin/sh\n"), 0o755)
	os.Symlink(t.TempDir(), filepath.Join(root, "away"))
	os.MkdirAll(filepath.Join(root, "away/bin"), 0o755)
	os.WriteFile(filepath.Join(root, ".git/config"), []byte("[core]\n\thooksPath = .githooks\n\tfsmonitor = away/bin\n[include]\n\tpath = ../team.gitconfig\n[remote \"o\"]\n\turl = https://example.com/r\n"), 0o644)
	ro, pin := GitGuard(Config{Mode: Bind, Root: root, ProtectGit: true})
	for _, want := range []string{".githooks", "team.gitconfig", "scripts/clean.sh"} {
		if !slices.Contains(ro, filepath.Join(root, want)) {
			t.Errorf("read-only paths lack %s: %v", want, ro)
		}
	}
	if !slices.Contains(pin, filepath.Join(root, "scripts")) {
		t.Errorf("scripts/ is not pinned: %v", pin)
	}
	// A mount follows links: a path through one (out of the workspace) is
	// never bound, read-only or writable.
	for _, p := range append(ro, pin...) {
		if strings.HasPrefix(p, filepath.Join(root, "away")) {
			t.Errorf("%s, through a link, is bound", p)
		}
	}
	cs := []Change{
		{Path: "team.gitconfig", Kind: Modified, Before: &Entry{Type: TypeFile}, After: &Entry{Type: TypeFile}},
		{Path: ".githooks/pre-commit", Kind: Created, After: &Entry{Type: TypeFile}},
		{Path: "scripts/clean.sh", Kind: Modified, Before: &Entry{Type: TypeFile}, After: &Entry{Type: TypeFile}},
		{Path: "scripts/other.sh", Kind: Modified, Before: &Entry{Type: TypeFile}, After: &Entry{Type: TypeFile}},
	}
	FlagGitReferenced(root, cs)
	for _, c := range cs[:3] {
		if !c.Risky() {
			t.Errorf("%s is not risky", c.Path)
		}
	}
	if cs[3].Risky() {
		t.Errorf("%s is risky: %v", cs[3].Path, cs[3].Risks)
	}
}

// FuzzReduceConfig: whatever a config held, its reduced form parses, and
// holds safe keys only, with the values they had.
func FuzzReduceConfig(f *testing.F) {
	f.Add([]byte("[core]\n\tbare = false\n\tfsmonitor = touch /x\n[user]\n\tname = \"a \\\"b\\\" \\\\c\"\n"))
	f.Add([]byte("[branch \"ma\\\"in\"]\n\tremote = origin\n[include]\n\tpath = x\n"))
	f.Add([]byte("[core]\n\teditor = vi\n[extensions]\n\tworktreeConfig = true\n"))
	f.Add([]byte("[user]\n\tname = tab\there ; comment\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		root := t.TempDir()
		if err := os.WriteFile(filepath.Join(root, "config"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		in, _ := ParseGitConfig(b)
		if _, ok := reduceConfig(root, "config"); !ok {
			return
		}
		out, err := os.ReadFile(filepath.Join(root, "config"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseGitConfig(out)
		if err != nil {
			t.Fatalf("the reduced config does not parse: %v\n%s", err, out)
		}
		want := map[string]bool{}
		for _, v := range in {
			want[strings.ToLower(v.Key)+"\x00"+v.Value] = true
		}
		for _, v := range got {
			if !safeGitKey(v.Key) {
				t.Errorf("kept %s", v.Key)
			}
			if !want[strings.ToLower(v.Key)+"\x00"+v.Value] {
				t.Errorf("%s = %q was not in the config:\n%s\nreduced:\n%s", v.Key, v.Value, b, out)
			}
		}
	})
}
