//go:build linux

package main

// End-to-end tests of --branch: a sandbox per branch, each in its own git
// worktree under the state dir, with real git on both sides. Isolation is
// judged on the host: after the sandbox, the user's own git runs in the
// main checkout and in the worktree, and a canary the sandbox cannot reach
// shows whether anything it wrote ran.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/fakellm"
	"github.com/airlock-dev/airlock/internal/testutil"
)

// gitIn runs the host's git in dir and fails the test on an error.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := hostGit(t, dir, args...)
	if err != nil {
		t.Fatalf("git %v in %s: %v\n%s", args, dir, err, out)
	}
	return strings.TrimSpace(out)
}

// commitInside is a commit made by the sandbox's git.
const commitInside = `git -c user.name=in -c user.email=in@example.com commit -q`

// worktreeOf is the worktree path git lists for branch in the repository at dir.
func worktreeOf(t *testing.T, dir, branch string) string {
	t.Helper()
	path := ""
	for _, l := range strings.Split(gitIn(t, dir, "worktree", "list", "--porcelain"), "\n") {
		if p, ok := strings.CutPrefix(l, "worktree "); ok {
			path = p
		}
		if l == "branch refs/heads/"+branch {
			return path
		}
	}
	return ""
}

// TestBranchTwoSandboxesAtOnce: two sandboxes on two branches run at the
// same time; each one's commit lands on its branch and the main checkout
// is untouched; ls shows the branches.
func TestBranchTwoSandboxesAtOnce(t *testing.T) {
	e := newEnv(t)
	gitRepoAt(t, e.ws)
	head := gitIn(t, e.ws, "rev-parse", "HEAD")
	var ids []string
	for _, b := range []string{"b1", "feat/b2"} {
		script := "echo " + b + " > out.txt && git add out.txt && " + commitInside + " -m 'on " + b + "' && git log --oneline | wc -l > /dev/null && git diff HEAD~1 --stat > /dev/null && sleep 3"
		r := e.run("run", "-d", "-q", "--branch", b, "--", "sh", "-c", script)
		if r.code != 0 {
			t.Fatalf("run -d --branch %s: %v", b, r)
		}
		ids = append(ids, strings.TrimSpace(r.stdout))
	}
	// Both run at once.
	ls := e.run("ls", "--running")
	for _, b := range []string{"b1", "feat/b2"} {
		if !strings.Contains(ls.stdout, " "+b+" ") {
			t.Errorf("ls --running does not show branch %s running:\n%s", b, ls.stdout)
		}
	}
	testutil.WaitFor(t, 30*time.Second, func() bool { return strings.Count(e.run("ls").stdout, "exited (0)") == 2 })
	for _, b := range []string{"b1", "feat/b2"} {
		if got := gitIn(t, e.ws, "log", "-1", "--format=%s", b); got != "on "+b {
			t.Errorf("branch %s's last commit is %q, want the sandbox's", b, got)
		}
		if got := gitIn(t, e.ws, "show", b+":out.txt"); got != b {
			t.Errorf("out.txt on %s holds %q", b, got)
		}
		if wt := worktreeOf(t, e.ws, b); !strings.HasPrefix(wt, filepath.Join(e.state, "worktrees")+"/") {
			t.Errorf("branch %s's worktree is %q, want one under the state dir", b, wt)
		}
	}
	if got := gitIn(t, e.ws, "rev-parse", "HEAD"); got != head {
		t.Errorf("the main checkout's HEAD moved: %s, was %s", got, head)
	}
	if st := gitIn(t, e.ws, "status", "--short"); st != "" {
		t.Errorf("the main checkout changed:\n%s", st)
	}
	if _, err := os.Stat(filepath.Join(e.ws, "out.txt")); err == nil {
		t.Errorf("a sandbox's file is in the main checkout")
	}
	// rm removes the worktrees; the branches and their commits stay.
	for i, b := range []string{"b1", "feat/b2"} {
		wt := worktreeOf(t, e.ws, b)
		if r := e.run("rm", ids[i]); r.code != 0 {
			t.Fatalf("rm %s: %v", ids[i], r)
		}
		if _, err := os.Stat(wt); err == nil {
			t.Errorf("rm left the worktree %s", wt)
		}
		if got := gitIn(t, e.ws, "log", "-1", "--format=%s", b); got != "on "+b {
			t.Errorf("after rm, branch %s's last commit is %q", b, got)
		}
	}
}

// TestBranchRmRefusesUncommittedChanges: rm keeps a worktree holding
// uncommitted work (with a line saying what to do), rm -f removes it.
func TestBranchRmRefusesUncommittedChanges(t *testing.T) {
	e := newEnv(t)
	gitRepoAt(t, e.ws)
	r := e.sh("echo draft > draft.txt && echo more >> README", "--branch", "wip", "--name", "wip")
	if r.code != 0 {
		t.Fatalf("run --branch wip: %v", r)
	}
	wt := worktreeOf(t, e.ws, "wip")
	if wt == "" {
		t.Fatalf("no worktree for wip")
	}
	r = e.run("rm", "wip")
	if r.code != 125 || !strings.Contains(r.stderr, "uncommitted changes") || !strings.Contains(r.stderr, "rm -f") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Fatalf("rm of a worktree with uncommitted changes: %v, want one line and exit 125", r)
	}
	if b, err := os.ReadFile(filepath.Join(wt, "draft.txt")); err != nil || string(b) != "draft\n" {
		t.Fatalf("the refused rm lost the draft: %q %v", b, err)
	}
	if !strings.Contains(e.run("ls").stdout, "wip") {
		t.Fatalf("the refused rm removed the sandbox")
	}
	if r := e.run("rm", "-f", "wip"); r.code != 0 {
		t.Fatalf("rm -f: %v", r)
	}
	if _, err := os.Stat(wt); err == nil {
		t.Errorf("rm -f left the worktree")
	}
	if worktreeOf(t, e.ws, "wip") != "" {
		t.Errorf("git still lists the worktree")
	}
	gitIn(t, e.ws, "rev-parse", "--verify", "wip") // the branch stays
}

// TestBranchBadInput: each mistake is one line and exit 125, and leaves no
// worktree, branch or sandbox behind.
func TestBranchBadInput(t *testing.T) {
	e := newEnv(t)
	gitRepoAt(t, e.ws)
	main := gitIn(t, e.ws, "symbolic-ref", "--short", "HEAD")
	plain := t.TempDir()
	gitIn(t, e.ws, "worktree", "add", "-q", filepath.Join(t.TempDir(), "elsewhere"), "-b", "taken")
	cases := map[string]struct {
		args []string
		want string
	}{
		"outside a git repository":         {[]string{"run", "-w", plain, "--branch", "x", "--", "true"}, "not in a git repository"},
		"the branch checked out here":      {[]string{"run", "--branch", main, "--", "true"}, "is checked out at"},
		"the branch checked out elsewhere": {[]string{"run", "--branch", "taken", "--", "true"}, "is checked out at"},
		"a name git refuses":               {[]string{"run", "--branch", "a..b", "--", "true"}, "not a branch name"},
		"with another workspace mode":      {[]string{"run", "--branch", "new1", "--workspace-mode", "overlay", "--", "true"}, "bind mode"},
		"without the git guard":            {[]string{"run", "--branch", "new2", "--protect-git=false", "--", "true"}, "--protect-git"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r := e.run(c.args...)
			if r.code != 125 || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
				t.Fatalf("%v: %v, want exit 125 and one line with %q", c.args, r, c.want)
			}
		})
	}
	// Nothing half-made: no worktree but the two, no new branch, no sandbox.
	if n := strings.Count(gitIn(t, e.ws, "worktree", "list"), "\n") + 1; n != 2 {
		t.Errorf("git lists %d worktrees, want 2:\n%s", n, gitIn(t, e.ws, "worktree", "list"))
	}
	for _, b := range []string{"x", "new1", "new2"} {
		if _, err := hostGit(t, e.ws, "rev-parse", "--verify", "-q", "refs/heads/"+b); err == nil {
			t.Errorf("a failed run left branch %s", b)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(e.state, "worktrees")); len(ents) != 0 {
		t.Errorf("the state dir keeps %d worktree dirs", len(ents))
	}
	if ls := e.run("ls"); strings.Contains(ls.stdout, "exited") {
		t.Errorf("a failed run left a sandbox: %s", ls.stdout)
	}
	// The positive control: the same repository takes a new branch.
	if r := e.sh(commitInside+" --allow-empty -m ok", "--branch", "fine"); r.code != 0 {
		t.Fatalf("run --branch fine: %v", r)
	}
}

// branchAttack writes, from inside a worktree, everything the host's git
// later reads from the repository's shared parts: config, hooks, another
// branch's ref (moved and deleted), packed-refs, alternates, the admin
// dir's commondir, gitdir and config.worktree, links there, a forged
// object standing in for the main branch's README, HEAD on another
// branch. Each step may fail; the script goes on.
const branchAttack = `C=$(git rev-parse --path-format=absolute --git-common-dir); A=$(git rev-parse --path-format=absolute --git-dir)
M=$(sed 's,ref: refs/heads/,,' "$C/HEAD")
hook() { mkdir -p "$(dirname "$1")"; printf '#!/bin/sh\ntouch CANARY\n' > "$1"; chmod +x "$1"; }
printf '[core]\n\tfsmonitor = touch CANARY\n' >> "$C/config"
hook "$C/hooks/pre-commit"; hook "$C/hooks/post-checkout"
echo 0123456789012345678901234567890123456789 > "$C/refs/heads/$M"; rm -f "$C/refs/heads/$M"
echo "$C/refs/heads/$M" > "$C/packed-refs"
mkdir -p "$C/objects/info"; echo "$PWD/evil/objects" > "$C/objects/info/alternates"
cp -r "$C" "$PWD/evil" 2>/dev/null; hook "$PWD/evil/hooks/pre-commit"
echo "$PWD/evil" > "$A/commondir"
echo "$PWD/evil/x" > "$A/gitdir"
hook "$PWD/h/pre-commit"; printf '[core]\n\thooksPath = %s/h\n' "$PWD" > "$A/config.worktree"
rm -f "$A/config.worktree"; printf '[core]\n\thooksPath = %s/h\n' "$PWD" > "$A/config.worktree"
mkdir -p "$A/logs"; ln -s "$C/config" "$A/logs/evil"
B=$(git rev-parse HEAD:README); O="$C/objects/$(echo $B | cut -c1-2)/$(echo $B | cut -c3-)"
chmod u+w "$O"; rm -f "$O"; printf 'blob 5\0evil\n' | python3 -c 'import sys,zlib; sys.stdout.buffer.write(zlib.compress(sys.stdin.buffer.read()))' > "$O"
ln -s /tmp "$C/objects/zz"
git branch made-inside
`

// TestBranchHostileSandbox: nothing a sandbox writes through its worktree
// runs or is read by the host's git after it (a commit and a status in the
// main checkout and in the worktree, as the user does next), other
// branches keep their commits, and a forged object is taken out; the
// same script without a sandbox does get the canary touched (the attack
// is real).
func TestBranchHostileSandbox(t *testing.T) {
	// The control: a repository with a worktree, the script run on the host.
	ctl := filepath.Join(t.TempDir(), "ctl")
	gitRepoAt(t, ctl)
	gitIn(t, ctl, "config", "extensions.worktreeConfig", "true")
	ctlWT := filepath.Join(t.TempDir(), "wt")
	gitIn(t, ctl, "worktree", "add", "-q", "-b", "evil", ctlWT)
	ctlCanary := filepath.Join(t.TempDir(), "canary")
	c := exec.Command("sh", "-c", strings.ReplaceAll(branchAttack, "CANARY", ctlCanary))
	c.Dir = ctlWT
	c.CombinedOutput()
	hostGit(t, ctl, "commit", "-q", "--allow-empty", "-m", "host")
	hostGit(t, ctlWT, "commit", "-q", "--allow-empty", "-m", "host")
	if _, err := os.Stat(ctlCanary); err != nil {
		t.Fatalf("control: the attack does not work even without a sandbox")
	}

	e := newEnv(t)
	gitRepoAt(t, e.ws)
	gitIn(t, e.ws, "config", "extensions.worktreeConfig", "true")
	main := gitIn(t, e.ws, "symbolic-ref", "--short", "HEAD")
	mainSHA := gitIn(t, e.ws, "rev-parse", "HEAD")
	canary := filepath.Join(t.TempDir(), "canary")
	r := e.run("run", "--branch", "evil", "--", "sh", "-c", strings.ReplaceAll(branchAttack, "CANARY", canary)+
		"\necho inside >> README && git add README && "+commitInside+" -m inside && echo COMMITTED\n"+
		`echo "ref: refs/heads/$M" > "$A/HEAD"`)
	if !strings.Contains(r.stdout, "COMMITTED") {
		t.Fatalf("git commit inside the worktree failed after the attack: %v", r)
	}
	wt := worktreeOf(t, e.ws, "evil")
	if wt == "" {
		t.Fatalf("no worktree on evil after the run: HEAD was not put back\n%v", r)
	}
	// The user's next moves, on the host.
	for _, dir := range []string{e.ws, wt} {
		hostGit(t, dir, "status")
		if out, err := hostGit(t, dir, "commit", "-q", "--allow-empty", "-m", "host"); err != nil {
			t.Errorf("the host's commit in %s: %v\n%s", dir, err, out)
		}
		hostGit(t, dir, "checkout", "-q", "-b", "after-"+filepath.Base(dir))
	}
	if _, err := os.Stat(canary); err == nil {
		t.Fatalf("the attack got through: the host's git ran what the sandbox wrote\n%v", r)
	}
	if got := gitIn(t, e.ws, "rev-parse", main+"~1"); got != mainSHA {
		t.Errorf("branch %s was moved or lost: its parent is %s, was %s", main, got, mainSHA)
	}
	if got := gitIn(t, e.ws, "log", "-1", "--format=%s", "evil~1"); got != "inside" {
		t.Errorf("the sandbox's commit is not on evil: %q", got)
	}
	if v, _ := hostGit(t, e.ws, "config", "--get", "core.fsmonitor"); strings.TrimSpace(v) != "" {
		t.Errorf("the sandbox's fsmonitor is in the repository's config: %q", v)
	}
	// The forged object is taken out and the original put back.
	if blob, err := hostGit(t, e.ws, "cat-file", "-p", mainSHA+":README"); err != nil || blob != "hello\n" {
		t.Errorf("the main branch's README after the run: %q %v, want its own bytes back", blob, err)
	}
	if out, err := hostGit(t, e.ws, "fsck"); err != nil {
		t.Errorf("git fsck after the run: %v\n%s", err, out)
	}
	for _, want := range []string{"an object whose content does not match its name", "an object the run removed", "put back", "objects/zz", "logs/evil", "made-inside"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the exit review does not report %q:\n%s", want, r.stderr)
		}
	}
}

// TestBranchSandboxCommitsInUserWorktree: a workspace that is a `git
// worktree` the user made (no --branch) takes commits inside too, while
// its repository's config stays read-only.
func TestBranchSandboxCommitsInUserWorktree(t *testing.T) {
	e := newEnv(t)
	repo := filepath.Join(t.TempDir(), "repo")
	gitRepoAt(t, repo)
	os.RemoveAll(e.ws)
	gitIn(t, repo, "worktree", "add", "-q", "-b", "feat", e.ws)
	r := e.sh(`echo x >> README && git add README && ` + commitInside + ` -m inside && git log --oneline | head -1 && git diff HEAD~1 --stat
		git config core.fsmonitor "touch /x" 2>&1 | grep -q 'Read-only' && echo CONFIG-READONLY`)
	if r.code != 0 || !strings.Contains(r.stdout, "inside") || !strings.Contains(r.stdout, "CONFIG-READONLY") {
		t.Fatalf("commit in a user's worktree: %v", r)
	}
	if got := gitIn(t, repo, "log", "-1", "--format=%s", "feat"); got != "inside" {
		t.Errorf("feat's last commit is %q", got)
	}
}

// branchAgentIP serves the fake Anthropic API for the --branch agent test.
const branchAgentIP = "127.0.0.61"

// TestAgentRunOnTwoBranches: the real Claude Code (pinned), against the
// fake Anthropic API, runs with `airlock agent run claude --branch B`
// twice, on two branches; each time the scripted model commits with the
// Bash tool, and the commit is on that branch in the user's repository
// while the main checkout stays as it was.
func TestAgentRunOnTwoBranches(t *testing.T) {
	a := newAgentTest(t, branchAgentIP, nil)
	gitRepoAt(t, a.ws)
	head := gitIn(t, a.ws, "rev-parse", "HEAD")
	for _, b := range []string{"agent-a", "agent-b"} {
		script := []fakellm.Step{
			{Tool: "Bash", Args: map[string]any{
				"command":     "echo " + b + " > " + b + ".txt && git add " + b + ".txt && git -c user.name=agent -c user.email=agent@example.com commit -q -m 'by " + b + "' && git log --oneline | head -1",
				"description": "Commit the change",
			}},
			{Text: "Committed on " + b + "."},
		}
		a.fake.Set(func(s *fakellm.Server) { s.Script = script })
		r := a.agent("claude", "ANTHROPIC_API_KEY", "api.anthropic.com", []string{"--branch", b, "--timeout", "4m"},
			"-p", "commit a file", "--output-format", "json")
		if r.code != 0 {
			t.Fatalf("airlock agent run claude --branch %s: %v", b, r)
		}
		if res := parseClaudeResult(t, r); res.IsError || !strings.Contains(res.Result, "Committed on "+b) {
			t.Errorf("claude's result on %s: %+v", b, res)
		}
		if got, err := hostGit(t, a.ws, "log", "-1", "--format=%s", b); err != nil || strings.TrimSpace(got) != "by "+b {
			t.Errorf("branch %s's last commit: %q %v, want the agent's", b, got, err)
		}
	}
	if got := gitIn(t, a.ws, "rev-parse", "HEAD"); got != head {
		t.Errorf("the main checkout's HEAD moved")
	}
	if st := gitIn(t, a.ws, "status", "--short"); st != "" {
		t.Errorf("the main checkout changed:\n%s", st)
	}
	ls := a.run("ls")
	for _, b := range []string{"agent-a", "agent-b"} {
		if !strings.Contains(ls.stdout, " "+b+" ") {
			t.Errorf("ls does not show branch %s:\n%s", b, ls.stdout)
		}
	}
}

// TestBranchAirlocksGitRunsNoHooks: airlock's own git commands (worktree
// add, the uncommitted-changes check, worktree remove) run none of the
// repository's hooks and no fsmonitor, where the same git commands run
// plainly on the host do (the control).
func TestBranchAirlocksGitRunsNoHooks(t *testing.T) {
	arm := func(t *testing.T, dir, canary string) {
		hook := filepath.Join(dir, ".git/hooks/post-checkout")
		os.MkdirAll(filepath.Dir(hook), 0o755)
		if err := os.WriteFile(hook, []byte("#!/bin/sh\ntouch "+canary+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		gitIn(t, dir, "config", "core.fsmonitor", "touch "+canary+"; echo")
	}
	ctl := filepath.Join(t.TempDir(), "ctl")
	gitRepoAt(t, ctl)
	ctlCanary := filepath.Join(t.TempDir(), "canary")
	arm(t, ctl, ctlCanary)
	wt := filepath.Join(t.TempDir(), "wt")
	hostGit(t, ctl, "worktree", "add", "-q", "-b", "x", wt)
	hostGit(t, wt, "status", "--porcelain")
	if _, err := os.Stat(ctlCanary); err != nil {
		t.Fatalf("control: git worktree add and status on the host run neither hook nor fsmonitor")
	}

	e := newEnv(t)
	gitRepoAt(t, e.ws)
	canary := filepath.Join(t.TempDir(), "canary")
	arm(t, e.ws, canary)
	r := e.sh("echo x > new.txt", "--branch", "x", "--name", "x")
	if r.code != 0 {
		t.Fatalf("run --branch x: %v", r)
	}
	if rm := e.run("rm", "x"); rm.code != 125 {
		t.Fatalf("rm with an untracked file: %v", rm)
	}
	if rm := e.run("rm", "-f", "x"); rm.code != 0 {
		t.Fatalf("rm -f: %v", rm)
	}
	if _, err := os.Stat(canary); err == nil {
		t.Fatalf("airlock's own git ran the repository's hook or fsmonitor")
	}
}

// TestBranchSymrefAndPackSideFilesAreDefused: a branch ref turned into a
// symbolic ref to the main branch (so the host's next commit in the
// worktree would move main) and a multi-pack-index written beside the
// packs are defused at exit; without a sandbox the symref does move main
// (the control).
func TestBranchSymrefAndPackSideFilesAreDefused(t *testing.T) {
	const attack = `C=$(git rev-parse --path-format=absolute --git-common-dir)
M=$(sed 's,ref: refs/heads/,,' "$C/HEAD"); B=$(git symbolic-ref --short HEAD)
echo "ref: refs/heads/$M" > "$C/refs/heads/$B"
echo junk > "$C/objects/pack/multi-pack-index"`
	ctl := filepath.Join(t.TempDir(), "ctl")
	gitRepoAt(t, ctl)
	ctlMain := gitIn(t, ctl, "rev-parse", "HEAD")
	ctlWT := filepath.Join(t.TempDir(), "wt")
	gitIn(t, ctl, "worktree", "add", "-q", "-b", "side", ctlWT)
	c := exec.Command("sh", "-c", attack)
	c.Dir = ctlWT
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("control: %v\n%s", err, out)
	}
	hostGit(t, ctlWT, "commit", "-q", "--allow-empty", "-m", "host")
	if gitIn(t, ctl, "rev-parse", "HEAD") == ctlMain {
		t.Fatalf("control: the host's commit in the worktree did not move the main branch")
	}

	e := newEnv(t)
	gitRepoAt(t, e.ws)
	mainSHA := gitIn(t, e.ws, "rev-parse", "HEAD")
	r := e.run("run", "--branch", "side", "--", "sh", "-c", attack)
	if r.code != 0 {
		t.Fatalf("run: %v", r)
	}
	for _, want := range []string{"holds no object id", "multi-pack-index"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the exit review does not report %q:\n%s", want, r.stderr)
		}
	}
	wt := worktreeOf(t, e.ws, "side")
	hostGit(t, wt, "commit", "-q", "--allow-empty", "-m", "host")
	if got := gitIn(t, e.ws, "rev-parse", "HEAD"); got != mainSHA {
		t.Errorf("the host's commit in the worktree moved the main branch")
	}
	if out, err := hostGit(t, e.ws, "fsck"); err != nil {
		t.Errorf("git fsck after the run: %v\n%s", err, out)
	}
}
