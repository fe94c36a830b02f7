//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostCommandsGoThroughTheBroker: inside, `hostexec git push` reaches a
// bare repository outside the sandbox's reach because a config rule
// approves it and grants that path (the command runs in a sandbox of its
// own); `rm` is refused by an auto_deny rule and runs nothing; a
// command on the ask list waits for a human, who is shown what it will
// reach; two sandboxes each run commands in their own workspace only.
func TestHostCommandsGoThroughTheBroker(t *testing.T) {
	if testBackend() == "docker" {
		t.Skip("TestDockerBackend: the binary inside a container is at /run/airlock/bin too, but git is not in the image")
	}
	eachMode(t, func(t *testing.T, mode string) {
		e := newEnv(t)
		bare := filepath.Join(t.TempDir(), "bare.git")
		e.writeConfig("version: 1\nhostexec:\n  commands: [{match: '^git push( |$)', rw: [" + bare + "]}]\n  auto_approve: ['^touch ']\n  auto_deny: ['^rm ']\n  ask: ['^echo ']\n")
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
		if req.Kind != "hostexec" || !strings.Contains(req.Detail, "echo") || !strings.Contains(req.Detail, "runs in a sandbox of its own") ||
			!strings.Contains(req.Detail, "network: none") {
			t.Errorf("request %+v: want kind hostexec showing the binary and what it reaches", req)
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
// runs (in a sandbox of its own) in the workspace, an unlisted command is
// refused.
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

// TestHostCommandsRunConfined: with the README's kind of rule (git and make
// approved at once), a bind-mode sandbox tries every way it knows to make
// an approved command run something with the host's authority: hooks and
// config of every kind git reads, options that name a command, a Makefile,
// git's indirections toward a repository elsewhere on the host, variables
// set around hostexec, and a dir swapped for a symlink to / while requests
// fly. Each payload writes a canary into host directories outside the
// workspace (one under /tmp, one under /var/tmp that the command's sandbox
// can see but not write, /etc) and a marker into the workspace. Judged on
// the host: every payload ran (its marker is there: it ran, confined) and
// no canary exists; the host repository's history reached nothing; a plain
// approved command streams its output and passes its exit status.
func TestHostCommandsRunConfined(t *testing.T) {
	if testBackend() == "docker" {
		t.Skip("TestDockerBackend: git is not in the image")
	}
	e := newEnv(t)
	e.writeConfig("version: 1\nhostexec:\n  auto_approve: ['^git ', '^make( |$)']\n")
	canary := t.TempDir()
	varCanary, err := os.MkdirTemp("/var/tmp", "airlock-canary-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(varCanary) })
	os.Chmod(varCanary, 0o777)
	tmpCanary := filepath.Join("/tmp", filepath.Base(varCanary)) // not made: a write would make it
	t.Cleanup(func() { os.RemoveAll(tmpCanary) })

	// A repository elsewhere on the host, which the workspace's git
	// indirections point at.
	hostRepo := filepath.Join(t.TempDir(), "host")
	for _, args := range [][]string{{"init", "-q", "-b", "main", hostRepo},
		{"-C", hostRepo, "-c", "user.name=h", "-c", "user.email=h@h", "commit", "-q", "--allow-empty", "-m", "host-secret-commit"}} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	ws := e.ws
	payload := "#!/bin/sh\nn=$1\n" +
		"echo pwned > " + canary + "/$n\necho pwned > " + varCanary + "/$n\necho pwned > /etc/airlock-canary-$n\n" +
		"mkdir -p " + tmpCanary + " && echo pwned > " + tmpCanary + "/$n\n" +
		"mkdir -p " + ws + "/markers && id -u > " + ws + "/markers/$n\nexit 0\n"
	if err := os.WriteFile(filepath.Join(ws, "payload.sh"), []byte(payload), 0o755); err != nil {
		t.Fatal(err)
	}
	hook := func(name string) string { return "printf '#!/bin/sh\\nsh " + ws + "/payload.sh " + name + "\\n'" }
	P := "sh " + ws + "/payload.sh"
	script := `
export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@a GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@a
cd ` + ws + ` && mkdir -p markers
mk() { git init -q -b main "$1" && echo x > "$1/f" && git -C "$1" add f && git -C "$1" commit -q -m init; }
git init -q --bare remote.git
# a nested repository's own hook
mk hook && ` + hook("hook") + ` > hook/.git/hooks/pre-push && chmod +x hook/.git/hooks/pre-push
(cd hook && hostexec git push -q ` + ws + `/remote.git main)
# the remote's receive-pack, set in config
mk receivepack && git -C receivepack remote add origin ` + ws + `/remote.git && git -C receivepack config remote.origin.receivepack "` + P + ` receivepack; exit 1 #"
(cd receivepack && hostexec git push origin main)
mk uploadpack && git -C uploadpack remote add origin ` + ws + `/remote.git && git -C uploadpack config remote.origin.uploadpack "` + P + ` uploadpack; exit 1 #"
(cd uploadpack && hostexec git fetch origin)
# core.sshCommand with an ssh remote
mk sshcommand && git -C sshcommand remote add origin ssh://git@example.invalid/x.git && git -C sshcommand config core.sshCommand "` + P + ` sshcommand; exit 1 #"
(cd sshcommand && hostexec git push origin main)
# core.hooksPath
mk hookspath && mkdir -p hookspath/h && ` + hook("hookspath") + ` > hookspath/h/pre-push && chmod +x hookspath/h/pre-push && git -C hookspath config core.hooksPath ` + ws + `/hookspath/h
(cd hookspath && hostexec git push -q ` + ws + `/remote.git main)
# core.fsmonitor, and the same through include.path
` + hook("fsmonitor") + ` > fsm.sh && ` + hook("include") + ` > fsm-include.sh && chmod +x fsm.sh fsm-include.sh
mk fsmonitor && git -C fsmonitor config core.fsmonitor ` + ws + `/fsm.sh
(cd fsmonitor && hostexec git status >/dev/null)
printf '[core]\n\tfsmonitor = ` + ws + `/fsm-include.sh\n' > include.cfg
mk include && git -C include config include.path ` + ws + `/include.cfg
(cd include && hostexec git status >/dev/null)
# credential.helper: a proxy user without a password asks it before any network
mk credhelper && git -C credhelper config credential.helper "!` + P + ` credhelper; echo password=x #" && git -C credhelper config http.proxy http://u@127.0.0.1:9
(cd credhelper && GIT_TERMINAL_PROMPT=0 hostexec git push http://example.invalid/x.git main)
# git's ext:: transport, allowed in config
mk ext && git -C ext config protocol.ext.allow always
(cd ext && hostexec git fetch "ext::sh ` + ws + `/payload.sh ext")
# options that name a command
mk opts
(cd opts && hostexec git push --receive-pack="` + P + ` optreceivepack; exit 1 #" ` + ws + `/remote.git main)
(cd opts && hostexec git push --exec="` + P + ` optexec; exit 1 #" ` + ws + `/remote.git main)
(cd opts && hostexec git fetch --upload-pack="` + P + ` optuploadpack; exit 1 #" ` + ws + `/remote.git)
# a Makefile for an approved make
mkdir -p mk && printf 'all:\n\t` + P + ` make\n' > mk/Makefile
(cd mk && hostexec make -s)
# variables set around hostexec stay in this sandbox
mk envsmuggle && git -C envsmuggle remote add origin ssh://git@example.invalid/x.git
(cd envsmuggle && GIT_SSH_COMMAND="` + P + ` envssh; exit 1 #" GIT_CONFIG_PARAMETERS="'core.sshcommand'='` + P + ` envcfg; exit 1 #'" GIT_DIR=` + ws + `/remote.git hostexec git push origin main)
hostexec env GIT_SSH_COMMAND=x git push; echo $? > markers/argv-env-rc
hostexec GIT_SSH_COMMAND=x git push; echo $? > markers/argv-assign-rc
# git's indirections toward a repository elsewhere on the host
mkdir -p viacommondir/.git && echo 'ref: refs/heads/main' > viacommondir/.git/HEAD && echo ` + hostRepo + `/.git > viacommondir/.git/commondir
(cd viacommondir && hostexec git log --format=%s main) > markers/commondir-log 2>&1
mkdir -p viagitdir && echo 'gitdir: ` + hostRepo + `/.git' > viagitdir/.git
(cd viagitdir && hostexec git log --format=%s) > markers/gitdir-log 2>&1
(cd viagitdir && hostexec git bundle create ` + ws + `/stolen.bundle --all) 2>/dev/null
# a dir swapped for a symlink to / while requests fly
printf 'all:\n\tpwd >> ` + ws + `/markers/race-pwd; touch pwned-race; ` + P + ` race\n' > race.mk
mkdir -p race/d
( i=0; while [ ! -e race/stop ] && [ $i -lt 5000 ]; do rm -rf race/d; ln -s / race/d; rm -f race/d; mkdir race/d; i=$((i+1)); done ) &
for i in $(seq 40); do
  curl -s --proxy "${HTTP_PROXY:-}" -X POST --data '{"argv":["make","-s","-f","` + ws + `/race.mk"],"dir":"race/d"}' http://airlock.internal/hostexec/run >/dev/null
done
touch race/stop; wait
# the control: an approved command's output and exit status come back
(cd hook && hostexec git log --format=%s) > markers/log-out
(cd hook && hostexec git rev-parse --verify -q nope); echo $? > markers/rc
echo END
`
	r := e.run("run", "-q", "--", "sh", "-c", script)
	if r.code != 0 || !strings.HasSuffix(r.stdout, "END\n") {
		t.Fatalf("the sandbox's script: %v", r)
	}
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(ws, "markers", name))
		return strings.TrimSpace(string(b))
	}
	ran := []string{"hook", "receivepack", "uploadpack", "sshcommand", "hookspath", "fsmonitor", "include", "credhelper", "ext",
		"optreceivepack", "optexec", "optuploadpack", "make", "race"}
	for _, n := range append(ran, "envssh", "envcfg") {
		for _, c := range []string{filepath.Join(canary, n), filepath.Join(varCanary, n), filepath.Join(tmpCanary, n), "/etc/airlock-canary-" + n} {
			if _, err := os.Lstat(c); err == nil {
				t.Errorf("%s: the payload wrote %s on the host", n, c)
				os.Remove(c)
			}
		}
	}
	for _, n := range ran {
		if _, err := os.Stat(filepath.Join(ws, "markers", n)); err != nil {
			t.Errorf("%s: the payload never ran (no marker in the workspace), so this case proves nothing: %v", n, err)
		}
	}
	for _, n := range []string{"envssh", "envcfg"} {
		if _, err := os.Stat(filepath.Join(ws, "markers", n)); err == nil {
			t.Errorf("%s: a variable set around hostexec reached the command", n)
		}
	}
	for _, n := range []string{"argv-env-rc", "argv-assign-rc"} {
		if got := read(n); got != "125" {
			t.Errorf("%s: hostexec exited %q, want 125 (no rule matches)", n, got)
		}
	}
	for _, n := range []string{"commondir-log", "gitdir-log"} {
		if got := read(n); strings.Contains(got, "host-secret-commit") {
			t.Errorf("%s: the host repository's history reached the workspace: %q", n, got)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "stolen.bundle")); err == nil {
		t.Error("a bundle of the host repository was written into the workspace")
	}
	// The run's own `gitdir:` file was defused at its exit (--protect-git),
	// so the host's git does not follow it either.
	if _, err := os.Lstat(filepath.Join(ws, "viagitdir", ".git")); err == nil {
		t.Error("the gitdir: file the run made outlived its exit review")
	}
	// The indirection is real: made again on the host, git follows it.
	if err := os.WriteFile(filepath.Join(ws, "viagitdir", ".git"), []byte("gitdir: "+hostRepo+"/.git\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _ := exec.Command("git", "-C", filepath.Join(ws, "viagitdir"), "log", "--format=%s").Output(); !strings.Contains(string(out), "host-secret-commit") {
		t.Errorf("git on the host through viagitdir shows %q: the test's indirection is broken", out)
	}
	if _, err := os.Lstat("/pwned-race"); err == nil {
		os.Remove("/pwned-race")
		t.Error("the raced dir ran make in the host's /")
	}
	for _, line := range strings.Split(read("race-pwd"), "\n") {
		// "/" is the command's own sandbox's root: a swap after the
		// check moves it there, read-only, never to the host's; "" is a
		// directory removed under the running command.
		if line != filepath.Join(ws, "race", "d") && line != "/" && line != "" {
			t.Errorf("make ran in %q, want the raced dir inside the workspace", line)
		}
	}
	if got := read("log-out"); got != "init" {
		t.Errorf("hostexec git log printed %q, want init", got)
	}
	if got := read("rc"); got != "1" {
		t.Errorf("hostexec git rev-parse --verify of a missing ref exited %q, want 1", got)
	}
}

// TestHostCommandRulesThatCannotBeGivenStopTheRun: an unknown grant key, a
// secret whose source fails, a path holding airlock's own config or state:
// one line naming the rule (never a value), exit 125, nothing started. The
// control: the same rule with a grant that can be given runs.
func TestHostCommandRulesThatCannotBeGivenStopTheRun(t *testing.T) {
	e := newEnv(t)
	marker := filepath.Join(e.ws, "started")
	cases := map[string]struct{ rule, want string }{
		"an unknown grant key":         {"{match: '^git push', allow_host: [github.com]}", "(^git push).allow_host: unknown key"},
		"a secret whose source fails":  {"{match: '^git push', secrets: [HOSTEXEC_E2E_UNSET@github.com]}", `rule "^git push": secret HOSTEXEC_E2E_UNSET`},
		"a secret whose command fails": {"{match: '^git push', secrets: ['TOK=cmd:echo s3cret-value; exit 3@github.com']}", `rule "^git push": secret TOK`},
		"airlock's state dir":          {"{match: '^git push', ro: [" + e.state + "]}", "it would show airlock's own config or state"},
		"the directory holding config": {"{match: '^git push', rw: [" + filepath.Join(e.home, ".config") + "]}", "it would show airlock's own config or state"},
	}
	for name, c := range cases {
		e.writeConfig("version: 1\nhostexec:\n  commands: [" + c.rule + "]\n")
		r := e.run("run", "-q", "--", "touch", marker)
		msg := strings.TrimSpace(r.stderr)
		if r.code != 125 || !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") || strings.Contains(msg, "s3cret-value") {
			t.Errorf("%s: %v; want exit 125 and one line with %q", name, r, c.want)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("%s: the run started", name)
		}
	}
	e.writeConfig("version: 1\nhostexec:\n  commands: [{match: '^git push', ro: [" + e.ws + "]}]\n")
	if r := e.run("run", "-q", "--", "touch", marker); r.code != 0 {
		t.Fatalf("a rule whose grants can be given: %v", r)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the control run did not run: %v", err)
	}
}

// TestAHostCommandIsShownWholeToWhoeverApproves: the part of a command
// that matters (--receive-pack=… after a long refspec) reaches every
// surface a human decides from: the JSON list (RPC and the web page read
// the same request) and the terminal's, with what the command will reach.
func TestAHostCommandIsShownWholeToWhoeverApproves(t *testing.T) {
	if testBackend() == "docker" {
		t.Skip("TestDockerBackend: git is not in the image")
	}
	e := newEnv(t)
	e.writeConfig("version: 1\nhostexec:\n  commands: [{match: '^git push ', ask: true, allow_hosts: [github.com]}]\n")
	if r := e.run("run", "-d", "-q", "--name", "h"); r.code != 0 {
		t.Fatalf("run -d: %v", r)
	}
	refspec := "HEAD:refs/heads/" + strings.Repeat("a", 3000)
	wait := e.background("exec", "h", "--", "hostexec", "git", "push", "origin", refspec, "--receive-pack=touch /tmp/x")
	subject := "git push origin " + refspec + " '--receive-pack=touch /tmp/x'"
	req := pendingIn(t, e, subject) // the whole subject, or it is never found
	if !strings.Contains(req.Detail, "network: github.com") || !strings.Contains(req.Detail, "runs in a sandbox of its own") {
		t.Errorf("detail %q: want what the command will reach", req.Detail)
	}
	r := e.run("approvals")
	if r.code != 0 || !strings.Contains(r.stdout, subject) || !strings.Contains(r.stdout, "    network: github.com") {
		t.Errorf("airlock approvals: %v; want the whole command and what it reaches", r)
	}
	if r := e.run("deny", req.ID); r.code != 0 {
		t.Fatalf("deny: %v", r)
	}
	if r := wait(); r.code != 125 || !strings.Contains(r.stderr, "denied") {
		t.Errorf("hostexec after deny: %v, want 125 and denied", r)
	}
}

// TestAFileMovesBetweenWritableDirectories: Landlock lets a file be linked
// or renamed from one writable directory into another (git's receive-pack
// moves its quarantined objects so; without it a push into a local
// repository fails with "Invalid cross-device link"), while writes outside
// the writable places still fail.
func TestAFileMovesBetweenWritableDirectories(t *testing.T) {
	if testBackend() == "docker" {
		t.Skip("TestDockerBackend: git is not in the image")
	}
	e := newEnv(t)
	r := e.sh(`mkdir a b && echo x > a/f && ln a/f b/g && mv a/f b/h &&
		git init -q --bare bare.git && git init -q r && cd r && git -c user.name=a -c user.email=a@a commit -q --allow-empty -m pushed &&
		git push -q ../bare.git HEAD:refs/heads/main && ! touch /etc/airlock-refer-probe 2>/dev/null && echo END`)
	if r.code != 0 || !strings.HasSuffix(r.stdout, "END\n") {
		t.Fatalf("%v", r)
	}
	if out, err := exec.Command("git", "--git-dir", filepath.Join(e.ws, "bare.git"), "log", "--format=%s", "main").Output(); err != nil || strings.TrimSpace(string(out)) != "pushed" {
		t.Fatalf("the pushed repository has %q, %v", out, err)
	}
	if _, err := os.Stat("/etc/airlock-refer-probe"); err == nil {
		os.Remove("/etc/airlock-refer-probe")
		t.Fatal("a write outside the writable places landed")
	}
}
