package workspace

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// hostGitTimeout bounds each git command airlock runs on the host.
const hostGitTimeout = 2 * time.Minute

// HostGit runs git on the host for airlock's own work on a repository a
// sandbox may have written (making and removing --branch worktrees,
// looking for uncommitted changes): no hooks, no fsmonitor, no system or
// global config, no attributes or excludes from the home, no prompts, no
// pager, and none of the caller's GIT_* variables. The repository's own
// config is the user's (read-only inside, restored at exit).
func HostGit(dir string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), hostGitTimeout)
	defer cancel()
	full := append([]string{"-C", dir,
		"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.untrackedCache=false",
		"-c", "core.pager=cat", "-c", "protocol.allow=never", "-c", "core.sshCommand=false",
		"-c", "diff.external=", "-c", "uploadpack.packObjectsHook=", "-c", "submodule.recurse=false",
	}, args...)
	cmd := exec.CommandContext(ctx, "git", full...)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=/nonexistent", "XDG_CONFIG_HOME=/nonexistent", "LC_ALL=C",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_ATTR_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
		"GIT_OPTIONAL_LOCKS=0", "GIT_NO_REPLACE_OBJECTS=1", "GIT_ASKPASS=/bin/false", "SSH_ASKPASS=/bin/false",
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &limited{&out, 1 << 20}, &limited{&errb, 64 << 10}
	err := cmd.Run()
	if err != nil {
		msg := strings.TrimSpace(errb.String())
		if i := strings.LastIndex(msg, "\n"); i >= 0 && strings.HasPrefix(msg[i+1:], "hint:") {
			msg = msg[:i]
		}
		msg = strings.TrimPrefix(msg, "fatal: ")
		if msg == "" {
			msg = err.Error()
		}
		return out.String(), errors.New(msg)
	}
	return out.String(), nil
}

type limited struct {
	b *bytes.Buffer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// BranchWorktree is a worktree airlock made for --branch.
type BranchWorktree struct {
	Path    string // the checkout: the sandbox's workspace
	Common  string // the repository's git dir
	Branch  string
	Created bool   // the branch was made for it (from HEAD)
	Start   string // the commit it started at
}

var checkedOutAt = regexp.MustCompile(`(?:already checked out at|already used by worktree at) '([^']*)'`)

// AddBranchWorktree makes a worktree of the repository holding dir for
// branch under parent (made if missing), creating the branch from HEAD
// if it does not exist. Its errors are one line saying what to do.
func AddBranchWorktree(dir, parent, branch string) (*BranchWorktree, error) {
	if !ValidBranch(branch) {
		return nil, fmt.Errorf("--branch %q: not a branch name git takes (letters, digits, '/', '-', '_', '.'; no '..', spaces or a leading '-')", branch)
	}
	common, err := HostGit(dir, "rev-parse", "--path-format=absolute", "--git-common-dir")
	if err != nil {
		return nil, fmt.Errorf("--branch %s: %s is not in a git repository: run it in a repository's checkout (or git init one), or leave --branch out", branch, dir)
	}
	common = strings.TrimSpace(common)
	if bare, _ := HostGit(dir, "rev-parse", "--is-bare-repository"); strings.TrimSpace(bare) == "true" {
		return nil, fmt.Errorf("--branch %s: %s is a bare repository: run it in a checkout of it", branch, dir)
	}
	w := &BranchWorktree{Common: common, Branch: branch}
	if sha, err := HostGit(dir, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch+"^{commit}"); err == nil {
		w.Start = strings.TrimSpace(sha)
	} else {
		sha, err := HostGit(dir, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
		if err != nil {
			return nil, fmt.Errorf("--branch %s: the repository at %s has no commit to start the branch from: commit something first", branch, dir)
		}
		w.Start, w.Created = strings.TrimSpace(sha), true
	}
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, fmt.Errorf("--branch %s: %w", branch, err)
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	name := strings.NewReplacer("/", "-", ".", "-").Replace(filepath.Base(filepath.Dir(common))) + "-" +
		strings.NewReplacer("/", "-").Replace(branch) + "-" + hex.EncodeToString(rnd[:])
	w.Path = filepath.Join(parent, name)
	args := []string{"worktree", "add", "--quiet", w.Path, branch}
	if w.Created {
		args = []string{"worktree", "add", "--quiet", "-b", branch, w.Path, w.Start}
	}
	if _, err := HostGit(dir, args...); err != nil {
		os.Remove(w.Path)
		if m := checkedOutAt.FindStringSubmatch(err.Error()); m != nil {
			return nil, fmt.Errorf("--branch %s: the branch is checked out at %s already: pick another branch, or finish there first (airlock rm the sandbox using it)", branch, m[1])
		}
		return nil, fmt.Errorf("--branch %s: git worktree add: %v", branch, err)
	}
	if real, err := filepath.EvalSymlinks(w.Path); err == nil {
		w.Path = real
	}
	return w, nil
}

// Drop removes a worktree nothing ran in (a start that failed): the
// checkout, unless it holds changes, and the branch if it was made for it
// and has not moved.
func (w *BranchWorktree) Drop() {
	HostGit(w.Common, "worktree", "remove", w.Path)
	if w.Created {
		HostGit(w.Common, "update-ref", "-d", "refs/heads/"+w.Branch, w.Start)
	}
}

// Uncommitted lists (up to a few) what the worktree at path holds that is
// not committed: modified, staged or untracked files.
func Uncommitted(path string) ([]string, error) {
	out, err := HostGit(path, "status", "--porcelain", "--untracked-files=normal", "--ignore-submodules=all")
	if err != nil {
		return nil, err
	}
	var files []string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if len(l) > 3 {
			files = append(files, l[3:])
		}
	}
	return files, nil
}

// RemoveBranchWorktree removes airlock's worktree at path (the branch and
// its commits stay), refusing while it holds uncommitted changes unless
// force.
func RemoveBranchWorktree(path string, force bool) error {
	w, err := FindWorktree(path)
	if err != nil {
		if _, serr := os.Lstat(path); errors.Is(serr, os.ErrNotExist) {
			return nil // removed already
		}
		return fmt.Errorf("the worktree %s is no longer one: %v (remove it by hand)", path, err)
	}
	if !force {
		files, err := Uncommitted(path)
		if err != nil {
			return fmt.Errorf("cannot tell whether the worktree %s holds uncommitted changes: %v; rm -f removes it anyway", path, err)
		}
		if len(files) > 0 {
			return fmt.Errorf("its worktree %s holds uncommitted changes (%s): commit them on its branch, or rm -f to drop them", path, shorten(strings.Join(files, ", "), 120))
		}
	}
	if _, err := HostGit(w.Common, "worktree", "remove", "--force", path); err != nil {
		return fmt.Errorf("remove the worktree %s: %v", path, err)
	}
	return nil
}
