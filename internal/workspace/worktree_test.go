package workspace

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidBranch(t *testing.T) {
	cases := map[string]struct {
		name string
		want bool
	}{
		"a plain name":                    {"feature", true},
		"a name with a slash":             {"feat/login-fix_2", true},
		"empty":                           {"", false},
		"a leading dash (an option)":      {"-f", false},
		"a parent step":                   {"a/../b", false},
		"two dots":                        {"a..b", false},
		"a leading slash":                 {"/etc", false},
		"a trailing slash":                {"a/", false},
		"an empty component":              {"a//b", false},
		"a hidden component":              {"a/.git", false},
		"a lock file's name":              {"main.lock", false},
		"a reflog selector":               {"a@{1}", false},
		"a space":                         {"a b", false},
		"a control character":             {"a\nb", false},
		"a glob":                          {"a*", false},
		"a trailing dot":                  {"a.", false},
		"a lone at sign":                  {"@", false},
		"a colon (a refspec)":             {"a:b", false},
		"a backslash":                     {`a\b`, false},
		"unicode is git's to take or not": {"café", true},
	}
	for name, c := range cases {
		if got := ValidBranch(c.name); got != c.want {
			t.Errorf("%s: ValidBranch(%q) = %v, want %v", name, c.name, got, c.want)
		}
	}
}

// FuzzValidBranch: a name ValidBranch takes stays beneath refs/heads as a
// path and is one git's check-ref-format takes too (checked where git is).
func FuzzValidBranch(f *testing.F) {
	for _, s := range []string{"main", "a/b", "../x", "a..b", "-x", "a.lock", "x/.y", "a@{0}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b string) {
		if !ValidBranch(b) {
			return
		}
		p := filepath.Join("/r/refs/heads", b)
		if !strings.HasPrefix(p, "/r/refs/heads/") || filepath.Clean(p) != p {
			t.Fatalf("ValidBranch(%q) but it leaves refs/heads: %s", b, p)
		}
	})
}

// TestFindWorktreeReadsAWorktreeAndRefusesAForgedOne: a real `git worktree
// add` is found with its branch; a .git file whose admin dir does not
// point back, or that names a dir outside a worktrees/ dir, is not a
// worktree (and gets no writable git dir).
func TestFindWorktreeReadsAWorktreeAndRefusesAForgedOne(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	root := t.TempDir()
	repo := filepath.Join(root, "repo")
	git := func(dir string, args ...string) {
		t.Helper()
		c := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"}, args...)...)
		c.Dir = dir
		c.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + root, "GIT_CONFIG_NOSYSTEM=1"}
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	os.MkdirAll(repo, 0o755)
	git(repo, "init", "-q")
	git(repo, "commit", "-q", "--allow-empty", "-m", "x")
	wt := filepath.Join(root, "wt")
	git(repo, "worktree", "add", "-q", "-b", "feat/x", wt)
	w, err := FindWorktree(wt)
	if err != nil {
		t.Fatalf("FindWorktree(%s): %v", wt, err)
	}
	if w.Branch != "feat/x" || w.Common != filepath.Join(repo, ".git") || filepath.Dir(w.Admin) != filepath.Join(repo, ".git", "worktrees") {
		t.Errorf("FindWorktree = %+v", w)
	}
	ro, rw, err := w.guard()
	if err != nil {
		t.Fatal(err)
	}
	has := func(list []string, p string) bool {
		for _, x := range list {
			if x == p {
				return true
			}
		}
		return false
	}
	for _, p := range []string{w.Admin, filepath.Join(repo, ".git/objects"), filepath.Join(repo, ".git/refs/heads/feat"), filepath.Join(repo, ".git/logs/refs/heads/feat")} {
		if !has(rw, p) {
			t.Errorf("%s is not writable: rw = %v", p, rw)
		}
	}
	for _, p := range []string{filepath.Join(repo, ".git"), filepath.Join(w.Admin, "commondir"), filepath.Join(w.Admin, "gitdir"), filepath.Join(w.Admin, "config.worktree"), filepath.Join(repo, ".git/objects/info")} {
		if !has(ro, p) {
			t.Errorf("%s is not read-only: ro = %v", p, ro)
		}
	}
	// Forged: a .git file naming an admin dir that does not name it back.
	forged := filepath.Join(root, "forged")
	os.MkdirAll(forged, 0o755)
	os.WriteFile(filepath.Join(forged, ".git"), []byte("gitdir: "+w.Admin+"\n"), 0o644)
	if _, err := FindWorktree(forged); err == nil {
		t.Errorf("a .git file naming another checkout's admin dir is taken as a worktree")
	}
	// Forged: a .git file naming the repository's own git dir.
	os.WriteFile(filepath.Join(forged, ".git"), []byte("gitdir: "+filepath.Join(repo, ".git")+"\n"), 0o644)
	if _, err := FindWorktree(forged); err == nil {
		t.Errorf("a .git file naming the common dir is taken as a worktree")
	}
}
