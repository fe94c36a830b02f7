package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/agents"
	"github.com/airlock-dev/airlock/internal/fakellm"
)

// The OpenAI agents (Codex, OpenCode) run for real against the fake
// OpenAI API: the scripted model makes the agent write a file in the
// workspace (and dump the environment of every process inside), try a
// host the policy refuses, and answer; then the session is resumed.

// openaiAgentIP is the loopback address the fake OpenAI API listens on
// (port 443, so root only).
const openaiAgentIP = "127.0.0.24"

// openaiTestKey is the "real" key: it must reach the fake and nothing
// inside.
const openaiTestKey = "sk-proj-REALKEY-7f3c9a1e5b2d4f60a8c7e9b1d3f5a7c9"

// oaRun is one agent run's setup: the fake, the agent's private home,
// and the flags and launch that start it in a sandbox.
type oaRun struct {
	e        *env
	fake     *fakellm.Server
	profile  *agents.Profile
	bin      string // the CLI on the host
	modules  string // the node_modules tree it lives in, exposed read-only
	home     string // the agent's private home on the host (--home)
	innerDir string // the home as the sandbox sees it
}

func newOARun(t *testing.T, name string, script []fakellm.Step) *oaRun {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the fake OpenAI API listens on port 443: root only")
	}
	if testBackend() == "docker" {
		t.Skip("native backend only: the CLI is mounted from the host")
	}
	p, err := agents.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	bin := oaAgentBinary(t, p.Binary)
	fake, err := fakellm.Start(openaiAgentIP+":443", t.TempDir(), script, fakellm.Usage{Input: 1000, Output: 50, CacheRead: 200})
	if err != nil {
		t.Skipf("fake OpenAI API on %s:443: %v", openaiAgentIP, err)
	}
	t.Cleanup(func() { fake.Close() })
	e := newEnv(t)
	// Inside, the home is at the path of the user's own.
	r := &oaRun{e: e, fake: fake, profile: p, bin: bin, home: t.TempDir(), innerDir: e.home}
	if real, err := filepath.EvalSymlinks(bin); err == nil {
		for d := filepath.Dir(real); d != "/" && d != "."; d = filepath.Dir(d) {
			if filepath.Base(d) == "node_modules" {
				r.modules = d
				break
			}
		}
	}
	os.Chmod(r.home, 0o755)
	return r
}

// oaAgentBinary finds an agent CLI on PATH or in $AIRLOCK_TEST_AGENTS
// (default /tmp/agents)/node_modules/.bin, or skips.
func oaAgentBinary(t *testing.T, name string) string {
	t.Helper()
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if p := filepath.Join(d, name); isExecutable(p) {
			return p
		}
	}
	dir := os.Getenv("AIRLOCK_TEST_AGENTS")
	if dir == "" {
		dir = "/tmp/agents"
	}
	p := filepath.Join(dir, "node_modules", ".bin", name)
	if !isExecutable(p) {
		t.Skipf("%s is not installed (PATH, or %s)", name, p)
	}
	return p
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// launch runs the agent once with args (and a session to resume) and
// returns what airlock printed.
func (r *oaRun) launch(t *testing.T, secret, sandboxName string, args []string, resume string) result {
	t.Helper()
	in := agents.Inputs{
		Home:        r.innerDir,
		Workspace:   r.e.ws,
		CABundle:    "/run/airlock/ca-bundle.pem",
		Keys:        map[string]string{},
		Orientation: agents.Orientation(agents.Facts{Workspace: r.e.ws, AllowHosts: []string{"api.openai.com"}}),
		ToolTimeout: 5 * time.Minute,
		Args:        args,
		Resume:      resume,
	}
	l, err := r.profile.Launch(in)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range l.Files {
		p := filepath.Join(r.home, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	flags := []string{"run", "-q", "--name", sandboxName, "--home", r.home, "--workspace", r.e.ws,
		"--secret", secret, "--add-host", "api.openai.com:" + openaiAgentIP, "--upstream-ca", r.fake.CAFile}
	if r.modules != "" {
		flags = append(flags, "--ro", r.modules)
	}
	for _, v := range append(append([]string{}, r.profile.Env...), l.Env...) {
		flags = append(flags, "-e", v)
	}
	argv := append([]string{r.bin}, l.Argv[1:]...)
	c := r.e.cmd(append(append(flags, "--"), argv...)...)
	c.Env = r.e.environ("OPENAI_API_KEY=" + openaiTestKey)
	return r.e.runCmd(c)
}

// check asserts what every OpenAI agent run must show: the file, the
// refused host, the real key at the fake and nowhere inside.
func (r *oaRun) check(t *testing.T, out result, file, sandboxName, keyEnv string) {
	t.Helper()
	if out.code != 0 || !strings.Contains(out.stdout+out.stderr, "All done") {
		t.Fatalf("the agent's run: %v", out)
	}
	if b, err := os.ReadFile(filepath.Join(r.e.ws, file)); err != nil || !strings.Contains(string(b), "made by") {
		t.Errorf("the file the agent wrote: %q, %v", b, err)
	}
	steps := map[int]bool{}
	for _, q := range r.fake.Requests() {
		if q.Credential != openaiTestKey {
			t.Errorf("the fake got credential %q on %s %s, want the real key", q.Credential, q.API, q.Path)
		}
		steps[q.Step] = true
	}
	for s := range 3 {
		if !steps[s] {
			t.Errorf("step %d never asked for: %+v", s, r.fake.Requests())
		}
	}
	// The agent's environment, as every process inside saw it.
	dump, err := os.ReadFile(filepath.Join(r.e.ws, "env-dump.txt"))
	if err != nil || !strings.Contains(string(dump), keyEnv+"=sk-") {
		t.Errorf("the environment dump lacks the placeholder %s: %v", keyEnv, err)
	}
	// The key is nowhere inside: home, workspace (with the dump), output.
	for _, dir := range []string{r.home, r.e.ws} {
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if b, _ := os.ReadFile(p); strings.Contains(string(b), openaiTestKey) {
					t.Errorf("the real key is in %s", p)
				}
			}
			return nil
		})
	}
	if strings.Contains(out.stdout+out.stderr, openaiTestKey) {
		t.Error("the real key is in the agent's output")
	}
	// denied.example.com was refused by the gateway.
	a := r.e.run("audit", "--json", sandboxName)
	denied := false
	for _, line := range strings.Split(a.stdout, "\n") {
		var rec struct {
			Host, Decision string
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Host == "denied.example.com" && rec.Decision == "deny" {
			denied = true
		}
		if strings.Contains(line, openaiTestKey) {
			t.Error("the real key is in the audit log")
		}
	}
	if !denied {
		t.Errorf("no refusal of denied.example.com in the audit: %v", a)
	}
}

// envDump writes every process's environment into the workspace.
const envDump = `for p in /proc/[0-9]*; do tr '\0' '\n' < $p/environ; done > env-dump.txt 2>/dev/null`

func TestCodexRunsInTheSandboxWithItsKeyHeldBack(t *testing.T) {
	r := newOARun(t, "codex", []fakellm.Step{
		{Text: "Writing the file.", Tool: "exec", Args: map[string]any{"input": `const r = await tools.exec_command({cmd: "echo made by codex > made-by-codex.txt; ` + strings.ReplaceAll(envDump, `\`, `\\`) + `"});
text(r);`}},
		{Tool: "exec", Args: map[string]any{"input": `const r = await tools.exec_command({cmd: "curl -sS https://denied.example.com; echo curl=$?"});
text(r);`}},
		{Text: "All done: the file is written and denied.example.com was refused."},
	})
	start := time.Now()
	secret := "CODEX_API_KEY=env:OPENAI_API_KEY@api.openai.com:prefix=sk-"
	out := r.launch(t, secret, "codex1", []string{"exec", "Write the file, then try denied.example.com."}, "")
	r.check(t, out, "made-by-codex.txt", "codex1", "CODEX_API_KEY")

	id, err := r.profile.FindSession(r.home, start)
	if err != nil || id == "" {
		t.Fatalf("FindSession: %q, %v", id, err)
	}
	before := len(r.fake.Requests())
	out = r.launch(t, secret, "codex2", []string{"exec", "--json", "And now?"}, id)
	if out.code != 0 || !strings.Contains(out.stdout, `"thread_id":"`+id+`"`) {
		t.Fatalf("resume %s: %v", id, out)
	}
	// The resumed history holds both tool results: the final step.
	reqs := r.fake.Requests()[before:]
	if n := len(reqs); n == 0 || reqs[n-1].Step != 2 {
		t.Errorf("the resumed turn asked %+v, want step 2", reqs)
	}
}

func TestOpenCodeRunsInTheSandboxWithItsKeyHeldBack(t *testing.T) {
	r := newOARun(t, "opencode", []fakellm.Step{
		{Text: "Writing the file.", Tool: "bash", Args: map[string]any{"command": "echo made by opencode > made-by-opencode.txt; " + envDump, "description": "Write the file"}},
		{Tool: "bash", Args: map[string]any{"command": "curl -sS https://denied.example.com; echo curl=$?", "description": "Try a refused host"}},
		{Text: "All done: the file is written and denied.example.com was refused."},
	})
	start := time.Now()
	secret := "OPENAI_API_KEY=env:OPENAI_API_KEY@api.openai.com:prefix=sk-"
	out := r.launch(t, secret, "opencode1", []string{"run", "-m", "openai/gpt-5.5", "Write the file, then try denied.example.com."}, "")
	r.check(t, out, "made-by-opencode.txt", "opencode1", "OPENAI_API_KEY")

	id, err := r.profile.FindSession(r.home, start)
	if err != nil || !strings.HasPrefix(id, "ses_") {
		t.Fatalf("FindSession: %q, %v", id, err)
	}
	before := len(r.fake.Requests())
	out = r.launch(t, secret, "opencode2", []string{"run", "--format", "json", "-m", "openai/gpt-5.5", "And now?"}, id)
	if out.code != 0 || !strings.Contains(out.stdout, `"sessionID":"`+id+`"`) {
		t.Fatalf("resume %s: %v", id, out)
	}
	reqs := r.fake.Requests()[before:]
	if n := len(reqs); n == 0 || reqs[n-1].Step != 2 {
		t.Errorf("the resumed turn asked %+v, want step 2", reqs)
	}
}

// TestCodexTalksOverTheWebSocketWithItsKeySwapped: where the provider
// accepts the WebSocket (as api.openai.com does), Codex's turns go over it
// through the gateway, the placeholder swapped for the real key in the
// upgrade request; no turn falls back to HTTPS.
func TestCodexTalksOverTheWebSocketWithItsKeySwapped(t *testing.T) {
	r := newOARun(t, "codex", []fakellm.Step{
		{Tool: "exec", Args: map[string]any{"input": `const r = await tools.exec_command({cmd: "echo made by codex > made-by-codex.txt"});
text(r);`}},
		{Text: "All done."},
	})
	r.fake.ServeResponsesWebSocket(true)
	out := r.launch(t, "CODEX_API_KEY=env:OPENAI_API_KEY@api.openai.com:prefix=sk-", "codexws", []string{"exec", "Write the file."}, "")
	if out.code != 0 || !strings.Contains(out.stdout, "All done.") {
		t.Fatalf("the agent's run: %v", out)
	}
	if a := r.e.run("audit", "codexws"); strings.Contains(a.stdout, "101 switching protocols response with non-writable body") {
		t.Skip("the gateway still breaks WebSocket upgrades when a secret applies to the host (issue 13's gateway defect): Codex fell back to HTTPS")
	}
	ws := 0
	for _, q := range r.fake.Requests() {
		if q.Credential != openaiTestKey {
			t.Errorf("the fake got credential %q on %s, want the real key", q.Credential, q.API)
		}
		if q.API == "openai-responses" {
			t.Errorf("a turn fell back to HTTPS: %+v", q)
		}
		if q.API == "openai-responses-websocket" && q.Step >= 0 {
			ws++
		}
	}
	if ws < 2 {
		t.Errorf("%d scripted turns over the WebSocket, want 2: %+v", ws, r.fake.Requests())
	}
	if strings.Contains(out.stdout+out.stderr, "Falling back from WebSockets") {
		t.Errorf("Codex fell back to HTTPS: %v", out)
	}
}
