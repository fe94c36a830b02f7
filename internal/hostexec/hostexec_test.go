package hostexec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/approval"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/childspec"
	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/secrets"
	"github.com/airlock-dev/airlock/internal/testutil"
)

// airlockBin is the airlock binary each command's sandbox is started with:
// these tests run commands confined, as the service always does.
var airlockBin string

func TestMain(m *testing.M) {
	bin, cleanup, err := testutil.AirlockForMain(false)
	if err != nil {
		fmt.Fprintf(os.Stderr, "build airlock: %v\n", err)
		os.Exit(1)
	}
	airlockBin = bin
	// The commands' sandboxes register in a state dir of this run's own.
	state, err := os.MkdirTemp("", "hostexec-test-state-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("AIRLOCK_STATE_DIR", state)
	code := m.Run()
	os.RemoveAll(state)
	cleanup()
	os.Exit(code)
}

// recorder keeps the audit records a handler writes.
type recorder struct {
	mu   sync.Mutex
	recs []audit.Record
}

func (r *recorder) add(rec audit.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
}

func (r *recorder) all() []audit.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]audit.Record(nil), r.recs...)
}

// op returns the records of op.
func (r *recorder) op(op string) []audit.Record {
	var out []audit.Record
	for _, rec := range r.all() {
		if rec.Op == op {
			out = append(out, rec)
		}
	}
	return out
}

// serve starts the handler for c and env (Dir a new temp dir when empty,
// Audit a recorder) behind a real HTTP server and returns its run URL.
func serve(t testing.TB, c Config, env Env) (string, *Env, *recorder) {
	t.Helper()
	if env.Dir == "" {
		env.Dir = t.TempDir()
	}
	if env.Sandbox == "" {
		env.Sandbox = "sb1"
	}
	if env.Exe == "" {
		env.Exe = airlockBin
	}
	rec := &recorder{}
	env.Audit = rec.add
	h, err := New(c, env)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux() // as the broker mounts it
	mux.Handle(Pattern, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + Path, &env, rec
}

type output struct {
	stdout, stderr bytes.Buffer
}

func run(t testing.TB, url string, req Request) (Result, *output, error) {
	t.Helper()
	var o output
	res, err := Run(context.Background(), http.DefaultClient, url, req, &o.stdout, &o.stderr)
	return res, &o, err
}

// mustRun runs req and fails unless the command ran and exited 0.
func mustRun(t testing.TB, url string, req Request) *output {
	t.Helper()
	res, o, err := run(t, url, req)
	if err != nil || res.Exit != 0 || res.Reason != EndExited {
		t.Fatalf("Run(%q) = %+v, %v; stderr: %s", req.Argv, res, err, o.stderr.String())
	}
	return o
}

// refusedWith fails unless err is a refusal with status.
func refusedWith(t testing.TB, err error, status int) *RefusedError {
	t.Helper()
	var r *RefusedError
	if !errors.As(err, &r) || r.Status != status {
		t.Fatalf("err = %v, want a refusal with status %d", err, status)
	}
	return r
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// TestApprovedGitPushReachesWhatTheRuleGrants: an approved git runs
// (confined) in the workspace and pushes to a host repository its rule
// grants (rw); the same push to a repository the rule does not name fails
// and leaves it as it was.
func TestApprovedGitPushReachesWhatTheRuleGrants(t *testing.T) {
	granted := filepath.Join(t.TempDir(), "origin.git")
	other := filepath.Join(t.TempDir(), "other.git")
	for _, bare := range []string{granted, other} {
		if out, err := exec.Command("git", "init", "-q", "--bare", bare).CombinedOutput(); err != nil {
			t.Fatalf("git init --bare: %v: %s", err, out)
		}
	}
	url, env, rec := serve(t, Config{Rules: []Rule{{Match: `^git( |$)`, RW: []string{granted}}}}, Env{WorkspaceMode: "bind"})
	git := func(args ...string) *output {
		return mustRun(t, url, Request{Argv: append([]string{"git", "-c", "user.name=a", "-c", "user.email=a@example.com"}, args...)})
	}
	git("init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(env.Dir, "f"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", "f")
	git("commit", "-q", "-m", "first")
	git("push", "-q", granted, "main")

	want, _ := exec.Command("git", "-C", env.Dir, "rev-parse", "HEAD").Output()
	got, err := exec.Command("git", "--git-dir", granted, "rev-parse", "main").Output()
	if err != nil || len(want) == 0 || !bytes.Equal(got, want) {
		t.Fatalf("granted main = %q (%v), want the workspace's HEAD %q", got, err, want)
	}
	res, _, err := run(t, url, Request{Argv: []string{"git", "push", "-q", other, "main"}})
	if err != nil || res.Exit == 0 {
		t.Errorf("a push to a repository no rule grants: %+v, %v; want it to fail", res, err)
	}
	if out, err := exec.Command("git", "--git-dir", other, "rev-parse", "--verify", "-q", "main").Output(); err == nil {
		t.Fatalf("the ungranted repository has main %q", out)
	}
	ends := rec.op("end")
	if len(rec.op("request")) != 5 || len(rec.op("decide")) != 5 || len(ends) != 5 {
		t.Fatalf("audit: %d request, %d decide, %d end records, want 5 each", len(rec.op("request")), len(rec.op("decide")), len(ends))
	}
	for _, r := range rec.all() {
		if r.Kind != audit.KindHostExec || r.Sandbox != "sb1" || r.Subject == "" {
			t.Errorf("audit record %+v: want kind hostexec, sandbox sb1, a subject", r)
		}
	}
	if d := rec.op("decide")[3]; d.Decision != audit.Allow || d.Rule != `^git( |$)` || d.Extra["by"] != "auto" {
		t.Errorf("decide record %+v: want allow by auto with the rule", d)
	}
	if e := ends[3]; e.ExitCode == nil || *e.ExitCode != 0 || e.Duration <= 0 || e.Reason != EndExited {
		t.Errorf("end record %+v: want exit 0, a duration, reason exited", e)
	}
}

func TestPolicyRefusalsRunNothing(t *testing.T) {
	witness := filepath.Join(t.TempDir(), "x")
	if err := os.WriteFile(witness, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{AutoApprove: []string{`^rm `, `^touch `}, AutoDeny: []string{`^rm -rf( |$)`}}
	tests := map[string]struct {
		argv    []string
		message string
	}{
		"rm -rf is denied by its regex though rm is approved": {[]string{"rm", "-rf", witness}, "denied by policy: matches auto_deny ^rm -rf( |$)"},
		"a command no rule matches is denied":                 {[]string{"unlink", witness}, "denied by policy: no rule matches"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			url, _, rec := serve(t, cfg, Env{})
			_, _, err := run(t, url, Request{Argv: tt.argv})
			r := refusedWith(t, err, http.StatusForbidden)
			if r.Reason != RefusedDenied || !strings.HasPrefix(r.Error(), tt.message) {
				t.Errorf("refusal %+v, want %q", r.Refusal, tt.message)
			}
			if !exists(witness) {
				t.Fatal("the witness file is gone: the command ran")
			}
			if d := rec.op("decide"); len(d) != 1 || d[0].Decision != audit.Deny || len(rec.op("end")) != 0 {
				t.Errorf("audit: %+v, want one deny and no end", rec.all())
			}
		})
	}
}

func TestAskGoesToTheApprovalQueue(t *testing.T) {
	tests := map[string]struct {
		decide  func(ctx context.Context) approval.Decision
		nilAsk  bool
		cancel  bool
		ran     bool
		message string
	}{
		"a human who allows runs it": {
			decide: func(context.Context) approval.Decision {
				return approval.Decision{Allow: true, Scope: approval.Once, By: "ui"}
			},
			ran: true,
		},
		"a human who denies refuses it": {
			decide:  func(context.Context) approval.Decision { return approval.Decision{Scope: approval.Once, By: "cli"} },
			message: "denied by cli",
		},
		"a request nobody answers in time is refused": {
			decide:  func(context.Context) approval.Decision { return approval.Decision{By: "timeout"} },
			message: "denied by timeout",
		},
		"nobody to ask refuses it": {nilAsk: true, message: "denied by nobody"},
		"a client that goes away while waiting runs nothing": {
			decide: func(ctx context.Context) approval.Decision {
				<-ctx.Done()
				return approval.Decision{Allow: true, By: "ui"} // too late to count
			},
			cancel: true,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			ws := t.TempDir()
			marker := filepath.Join(ws, "ran")
			var mu sync.Mutex
			var asked []approval.Request
			env := Env{Sandbox: "sb7", Dir: ws, Ask: func(ctx context.Context, r approval.Request) approval.Decision {
				mu.Lock()
				asked = append(asked, r)
				mu.Unlock()
				return tt.decide(ctx)
			}}
			if tt.nilAsk {
				env.Ask = nil
			}
			url, env2, rec := serve(t, Config{Ask: []string{`^touch `}}, env)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancel {
				go func() {
					testutil.WaitFor(t, 5*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(asked) == 1 })
					cancel()
				}()
			}
			_, err := Run(ctx, http.DefaultClient, url, Request{Argv: []string{"touch", marker}}, &bytes.Buffer{}, &bytes.Buffer{})
			switch {
			case tt.ran && err != nil:
				t.Fatalf("Run: %v", err)
			case tt.cancel && !errors.Is(err, context.Canceled):
				t.Fatalf("Run: %v, want canceled", err)
			case tt.message != "":
				if r := refusedWith(t, err, http.StatusForbidden); !strings.HasPrefix(r.Error(), tt.message) {
					t.Fatalf("refusal %q, want %q", r.Error(), tt.message)
				}
			}
			if tt.cancel { // the handler's decision comes after the client left
				testutil.WaitFor(t, 5*time.Second, func() bool { return len(rec.op("decide")) == 1 })
				time.Sleep(100 * time.Millisecond)
			}
			if exists(marker) != tt.ran {
				t.Fatalf("marker exists = %v, want %v", exists(marker), tt.ran)
			}
			if tt.nilAsk {
				return
			}
			bin, _ := exec.LookPath("touch")
			root := mustEval(t, env2.Dir)
			want := approval.Request{Sandbox: "sb7", Kind: approval.KindHostExec, Subject: Canonical([]string{"touch", marker}),
				Detail: "runs in a sandbox of its own, not on the host\nbinary: " + bin + "\ndir: " + root + "\nworkspace (writable): " + root +
					"\nnetwork: none\nsecrets (placeholders inside): none\nhost paths, read-only: none\nhost paths, writable: none\nssh agent: no",
				Reason: "matches ask ^touch "}
			if len(asked) != 1 || asked[0] != want {
				t.Fatalf("asked %+v, want %+v", asked, want)
			}
			d := rec.op("decide")
			if len(d) != 1 || !strings.HasPrefix(d[0].Extra["by"], "human:") && !tt.cancel {
				t.Fatalf("decide records %+v, want one by a human", d)
			}
		})
	}
}

func mustEval(t testing.TB, p string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestASessionDecisionIsRemembered(t *testing.T) {
	n := 0
	url, _, rec := serve(t, Config{Ask: []string{`^true$`}}, Env{Ask: func(context.Context, approval.Request) approval.Decision {
		n++
		return approval.Decision{Allow: true, Scope: approval.Session, By: "ui"}
	}})
	mustRun(t, url, Request{Argv: []string{"true"}})
	mustRun(t, url, Request{Argv: []string{"true"}})
	if n != 1 {
		t.Fatalf("asked %d times, want once", n)
	}
	if d := rec.op("decide"); len(d) != 2 || d[1].Extra["by"] != "remembered:ui" {
		t.Fatalf("decide records %+v, want the second remembered", d)
	}
}

func TestBadRequestsAreRefusedAndRunNothing(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	touch := func(extra ...string) []string { return append([]string{"touch", marker}, extra...) }
	many := touch()
	for len(many) <= MaxArgs {
		many = append(many, "x")
	}
	tests := map[string]string{
		"a NUL byte in an argument":          mustJSON(t, Request{Argv: touch("a\x00b")}),
		"an argument over 8 KiB":             mustJSON(t, Request{Argv: touch(strings.Repeat("a", MaxArg+1))}),
		"more than 256 arguments":            mustJSON(t, Request{Argv: many}),
		"an empty argv[0]":                   mustJSON(t, Request{Argv: []string{"", marker}}),
		"no argv":                            `{}`,
		"a body over 64 KiB":                 mustJSON(t, Request{Argv: touch(strings.Repeat("a", 8000), strings.Repeat("a", 8000), strings.Repeat("a", 8000), strings.Repeat("a", 8000), strings.Repeat("a", 8000), strings.Repeat("a", 8000), strings.Repeat("a", 8000), strings.Repeat("a", 8000), strings.Repeat("a", 8000))}),
		"a NUL byte in dir":                  `{"argv":["touch",` + mustJSON(t, marker) + `],"dir":"a\u0000"}`,
		"a sandbox claimed in the request":   `{"argv":["touch",` + mustJSON(t, marker) + `],"sandbox":"other"}`,
		"stdin is not a field":               `{"argv":["touch",` + mustJSON(t, marker) + `],"stdin":"x"}`,
		"env is not a field":                 `{"argv":["touch",` + mustJSON(t, marker) + `],"env":["GIT_DIR=/etc"]}`,
		"nor is a working directory by path": `{"argv":["touch",` + mustJSON(t, marker) + `],"cwd":"/"}`,
		"not JSON":                           `touch`,
	}
	url, _, _ := serve(t, Config{AutoApprove: []string{`^touch `}}, Env{Dir: dir})
	for name, body := range tests {
		resp, err := http.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var r Refusal
		json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || r.Reason != RefusedBadRequest || r.Error == "" {
			t.Errorf("%s: status %d %+v, want 400 bad_request", name, resp.StatusCode, r)
		}
		if exists(marker) {
			t.Fatalf("%s: the command ran", name)
		}
	}
	// The same request without the fault runs: the refusals were the faults.
	mustRun(t, url, Request{Argv: touch()})
	if !exists(marker) {
		t.Fatal("the valid request did not run")
	}
}

func mustJSON(t testing.TB, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestTimeoutKillsTheGroupAndKeepsPartialOutput(t *testing.T) {
	marker := fmt.Sprintf("1000.%d", time.Now().UnixNano()%1000000) // a sleep only this test runs
	url, _, rec := serve(t, Config{AutoApprove: []string{`^sh `}, Timeout: 500 * time.Millisecond}, Env{})
	start := time.Now()
	res, o, err := run(t, url, Request{Argv: []string{"sh", "-c", "echo partial; sleep " + marker + " & sleep " + marker}})
	if err != nil {
		t.Fatal(err)
	}
	// SIGTERM (143) reaches the command through its sandbox; what ignores
	// it is killed with the whole sandbox (137).
	if res.Reason != EndTimeout || (res.Exit != 143 && res.Exit != 137) || !strings.Contains(res.Message, "timed out after 500ms") {
		t.Errorf("result %+v, want timeout, exit 143 or 137", res)
	}
	if o.stdout.String() != "partial\n" {
		t.Errorf("stdout %q, want the partial output", o.stdout.String())
	}
	if took := time.Since(start); took > 3*time.Second+killGrace {
		t.Errorf("took %v", took)
	}
	testutil.NoProcsWithin(t, "sleep\x00"+marker, 2*time.Second)
	if e := rec.op("end"); len(e) != 1 || e[0].Reason != EndTimeout || e[0].BytesIn != int64(len("partial\n")) {
		t.Errorf("end records %+v, want one with reason timeout and the bytes", e)
	}
}

func TestTheOutputCapCutsAndKills(t *testing.T) {
	url, _, _ := serve(t, Config{AutoApprove: []string{`^yes$`}, MaxOutput: 10000}, Env{})
	res, o, err := run(t, url, Request{Argv: []string{"yes"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != EndOutputLimit || o.stdout.Len() != 10000 || strings.Trim(o.stdout.String(), "y\n") != "" {
		t.Fatalf("result %+v with %d bytes of stdout, want output_limit after exactly 10000", res, o.stdout.Len())
	}
}

// TestNoHostVariableReachesTheCommand: the command's sandbox has its own
// environment (PATH, locale, terminal, its HOME and TMPDIR); a host
// variable, a token among them, never reaches it.
func TestNoHostVariableReachesTheCommand(t *testing.T) {
	t.Setenv("SECRET_X", "hunter2")
	t.Setenv("GIT_DIR", "/etc")
	t.Setenv("SSH_AUTH_SOCK", "/tmp/agent.sock")
	url, _, _ := serve(t, Config{AutoApprove: []string{`^env$`}}, Env{})
	o := mustRun(t, url, Request{Argv: []string{"env"}})
	allowed := map[string]bool{"PATH": true, "HOME": true, "TERM": true, "LANG": true, "TMPDIR": true, "PWD": true, "AIRLOCK_SANDBOX": true}
	for _, kv := range strings.Split(strings.TrimSpace(o.stdout.String()), "\n") {
		name, _, _ := strings.Cut(kv, "=")
		if !allowed[name] && !strings.HasPrefix(name, "LC_") {
			t.Errorf("the command sees %s", kv)
		}
	}
	if strings.Contains(o.stdout.String(), "hunter2") || !strings.Contains(o.stdout.String(), "PATH=") {
		t.Errorf("environment %q: want PATH, not SECRET_X", o.stdout.String())
	}
}

func TestTheWorkingDirectoryStaysInTheWorkspace(t *testing.T) {
	ws := t.TempDir()
	outside := t.TempDir()
	for _, d := range []string{"sub/deeper", "sub/inner"} {
		if err := os.MkdirAll(filepath.Join(ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, to := range map[string]string{"out": outside, "sub/up": "../..", "sub/in": "inner", "file": "/etc/hostname"} {
		if err := os.Symlink(to, filepath.Join(ws, link)); err != nil {
			t.Fatal(err)
		}
	}
	url, _, _ := serve(t, Config{AutoApprove: []string{`^pwd$`}}, Env{Dir: ws})
	root := mustEval(t, ws)
	runs := map[string]string{
		"no dir runs in the workspace":               "",
		"a subdirectory runs there":                  "sub/deeper",
		"a path that comes back inside is cleaned":   "sub/deeper/../../sub",
		"a symlink inside the workspace is followed": "sub/in",
	}
	for name, dir := range runs {
		o := mustRun(t, url, Request{Argv: []string{"pwd"}, Dir: dir})
		want := root
		if dir != "" {
			want = mustEval(t, filepath.Join(ws, dir))
		}
		if got := strings.TrimSpace(o.stdout.String()); got != want {
			t.Errorf("%s: pwd = %q, want %q", name, got, want)
		}
	}
	refused := map[string]string{
		"dot-dot out is refused":            "../..",
		"dot-dot out after a subdirectory":  "sub/../../x",
		"an absolute path is refused":       "/etc",
		"a symlink pointing out is refused": "out",
		"a relative symlink climbing out":   "sub/up",
		"a file is not a directory":         "file",
		"a missing directory is refused":    "nope",
	}
	for name, dir := range refused {
		_, _, err := run(t, url, Request{Argv: []string{"pwd"}, Dir: dir})
		var r *RefusedError
		if !errors.As(err, &r) || r.Status != http.StatusBadRequest {
			t.Errorf("%s: dir %q: err = %v, want a 400 refusal", name, dir, err)
		}
	}
}

func TestOverlayAndCopyWorkspacesAreRefusedUnlessAllowed(t *testing.T) {
	tests := map[string]struct {
		mode  string
		allow bool
		runs  bool
	}{
		"bind runs":                       {"bind", false, true},
		"overlay is refused":              {"overlay", false, false},
		"copy is refused":                 {"copy", false, false},
		"overlay runs when config allows": {"overlay", true, true},
		"copy runs when config allows":    {"copy", true, true},
	}
	for name, tt := range tests {
		url, _, _ := serve(t, Config{AutoApprove: []string{`^true$`}, AllowCopyMode: tt.allow}, Env{WorkspaceMode: tt.mode})
		_, _, err := run(t, url, Request{Argv: []string{"true"}})
		if tt.runs && err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if !tt.runs {
			var r *RefusedError
			if !errors.As(err, &r) || r.Status != http.StatusConflict || !strings.Contains(r.Error(), "does not hold the sandbox's edits") {
				t.Errorf("%s: err = %v, want a 409 that says why", name, err)
			}
		}
	}
}

func TestACommandTheHostLacksIsNotFound(t *testing.T) {
	url, _, _ := serve(t, Config{AutoApprove: []string{`.`}}, Env{})
	for _, argv0 := range []string{"no-such-command-airlock", "./no-such-file"} {
		_, _, err := run(t, url, Request{Argv: []string{argv0}})
		if r := refusedWith(t, err, http.StatusNotFound); r.Reason != RefusedNotFound {
			t.Errorf("%s: %+v", argv0, r.Refusal)
		}
	}
}

func TestTheClientStreamsInOrderAndPassesTheExitCode(t *testing.T) {
	url, _, _ := serve(t, Config{AutoApprove: []string{`^sh `}}, Env{})
	var mu sync.Mutex
	var seq []string
	var firstAt time.Time
	w := func(name string) writerFunc {
		return func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			if firstAt.IsZero() {
				firstAt = time.Now()
			}
			seq = append(seq, name+":"+string(p))
			return len(p), nil
		}
	}
	start := time.Now()
	res, err := Run(context.Background(), http.DefaultClient, url,
		Request{Argv: []string{"sh", "-c", "echo one; sleep 0.2; echo two >&2; sleep 0.2; echo three; sleep 0.6; exit 7"}}, w("out"), w("err"))
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if res.Exit != 7 || res.Reason != EndExited {
		t.Errorf("result %+v, want exit 7", res)
	}
	if want := []string{"out:one\n", "err:two\n", "out:three\n"}; strings.Join(seq, "|") != strings.Join(want, "|") {
		t.Errorf("frames %q, want %q", seq, want)
	}
	if lag := firstAt.Sub(start); lag > took-700*time.Millisecond {
		t.Errorf("the first output arrived after %v of %v: not streamed", lag, took)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestACanceledClientKillsTheCommand(t *testing.T) {
	marker := fmt.Sprintf("2000.%d", time.Now().UnixNano()%1000000)
	url, _, rec := serve(t, Config{AutoApprove: []string{`^sleep `}}, Env{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		testutil.WaitFor(t, 5*time.Second, func() bool { return len(testutil.ProcsWith("sleep\x00"+marker)) > 0 })
		cancel()
	}()
	_, err := Run(ctx, http.DefaultClient, url, Request{Argv: []string{"sleep", marker}}, &bytes.Buffer{}, &bytes.Buffer{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want canceled", err)
	}
	testutil.NoProcsWithin(t, "sleep\x00"+marker, 2*time.Second)
	testutil.WaitFor(t, 2*time.Second, func() bool { e := rec.op("end"); return len(e) == 1 && e[0].Reason == EndCanceled })
}

// BenchmarkRoundTrip runs /bin/true through the client, HTTP and handler.
func BenchmarkRoundTrip(b *testing.B) {
	url, _, _ := serve(b, Config{AutoApprove: []string{`^/bin/true$`}}, Env{})
	req := Request{Argv: []string{"/bin/true"}}
	var took []time.Duration
	for b.Loop() {
		start := time.Now()
		if res, err := Run(context.Background(), http.DefaultClient, url, req, &bytes.Buffer{}, &bytes.Buffer{}); err != nil || res.Exit != 0 {
			b.Fatal(res, err)
		}
		took = append(took, time.Since(start))
	}
	slicesSort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
}

func slicesSort(d []time.Duration) { slices.Sort(d) }

// specs parses --secret forms, as the config does once.
func specs(flags ...string) []secrets.Spec {
	var out []secrets.Spec
	for _, f := range flags {
		sp, err := secrets.ParseSpec(f)
		if err != nil {
			panic(err)
		}
		out = append(out, sp)
	}
	return out
}

func TestChildSpecGrantsExactlyTheRule(t *testing.T) {
	g := &Rule{Match: "^git push", AllowHosts: []string{"github.com"}, Secrets: specs("GITHUB_TOKEN@github.com"),
		RO: []string{"/home/u/.gitconfig"}, RW: []string{"/srv/mirror.git"}}
	argv := []string{"git", "push", "--", "-e"}
	got := ChildSpec("hostexec-sb-1", "/ws", "/ws/sub", time.Minute, g, argv)
	want := childspec.New(argv...)
	want.Name, want.Workdir = "hostexec-sb-1", "/ws/sub"
	want.Config.Workspace = config.Workspace{Path: "/ws", Mode: config.WorkspaceBind, ProtectGit: true}
	want.Config.Limits.Timeout = time.Minute + backstop
	want.Config.Network.AllowHosts = []string{"github.com"}
	want.Config.Network.Secrets = specs("GITHUB_TOKEN@github.com")
	want.Config.RO, want.Config.RW = []string{"/home/u/.gitconfig"}, []string{"/srv/mirror.git"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ChildSpec = %+v\nwant %+v", got, want)
	}
	// The plain lists grant nothing: no network, no path, no variable.
	got = ChildSpec("hostexec-sb-2", "/ws", "/ws", time.Minute, nil, []string{"make"})
	if c := got.Config; c.Network.Enabled() || len(c.RO)+len(c.RW)+len(c.Env) > 0 || c.Home != "" || !got.Quiet {
		t.Errorf("ChildSpec without a grant grants %+v", c)
	}
}

func TestGrantsThatCannotBeGivenStopTheStart(t *testing.T) {
	own := t.TempDir()
	state := filepath.Join(own, "state")
	os.MkdirAll(state, 0o700)
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(state, link)
	fine := t.TempDir()
	t.Setenv("HOSTEXEC_TEST_TOKEN", "s3cret-value")
	tests := map[string]struct {
		rule Rule
		want string
	}{
		"a read-only grant of airlock's state dir":   {Rule{Match: "^a", RO: []string{state}}, `rule "^a": ro ` + state + ": it would show airlock's own config or state"},
		"a writable grant of a directory holding it": {Rule{Match: "^b", RW: []string{own}}, `rule "^b": rw ` + own + ": it would show airlock's own config or state"},
		"a symlink to it":                              {Rule{Match: "^c", RO: []string{link}}, "it would show airlock's own config or state"},
		"a path that does not exist":                   {Rule{Match: "^d", RO: []string{filepath.Join(fine, "nope")}}, `rule "^d": ro ` + filepath.Join(fine, "nope")},
		"a relative path":                              {Rule{Match: "^e", RO: []string{"rel"}}, "not an absolute path"},
		"a secret whose source fails":                  {Rule{Match: "^f", Secrets: specs("HOSTEXEC_NO_SUCH_VAR@github.com")}, `rule "^f": secret HOSTEXEC_NO_SUCH_VAR`},
		"a secret whose command fails":                 {Rule{Match: "^g", Secrets: specs("TOK=cmd:false@github.com")}, `rule "^g": secret TOK`},
		"the SSH agent, which no sandbox can be shown": {Rule{Match: "^h", SSHAgent: true}, `rule "^h": ssh_agent`},
	}
	for name, tt := range tests {
		_, err := New(Config{Rules: []Rule{tt.rule}}, Env{Dir: t.TempDir(), Exe: airlockBin, Protected: []string{state}})
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: err = %v, want one line with %q", name, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret-value") {
			t.Errorf("%s: the error shows a secret's value", name)
		}
	}
	// The control: grants that can be given start.
	ok := Rule{Match: "^ok", RO: []string{fine}, RW: []string{t.TempDir()}, Secrets: specs("HOSTEXEC_TEST_TOKEN@github.com"), AllowHosts: []string{"github.com"}}
	if _, err := New(Config{Rules: []Rule{ok}}, Env{Dir: t.TempDir(), Exe: airlockBin, Protected: []string{state}}); err != nil {
		t.Fatalf("New with grants that can be given: %v", err)
	}
}

// TestAnApprovalShowsTheWholeCommandOrIsNotAsked: the human sees the whole
// command line, the part after a long refspec too, and what it will reach;
// a request too long to show whole is denied without asking.
func TestAnApprovalShowsTheWholeCommandOrIsNotAsked(t *testing.T) {
	var asked []approval.Request
	ws := t.TempDir()
	t.Setenv("HOSTEXEC_TEST_TOKEN", "s3cret-value")
	url, _, _ := serve(t, Config{Rules: []Rule{{Match: `^echo `, Ask: true, AllowHosts: []string{"github.com"},
		Secrets: specs("HOSTEXEC_TEST_TOKEN@github.com"), RO: []string{ws}}}},
		Env{Dir: ws, Ask: func(_ context.Context, r approval.Request) approval.Decision {
			asked = append(asked, r)
			return approval.Decision{Allow: true, Scope: approval.Once, By: "ui"}
		}})
	long := []string{"echo", strings.Repeat("r", 4000), "--receive-pack=evil"}
	mustRun(t, url, Request{Argv: long})
	if len(asked) != 1 || asked[0].Subject != Canonical(long) || !strings.HasSuffix(asked[0].Subject, "--receive-pack=evil") {
		t.Fatalf("asked %d, subject ends %q: want the whole command", len(asked), asked[0].Subject[max(0, len(asked[0].Subject)-40):])
	}
	for _, want := range []string{"network: github.com", "secrets (placeholders inside): HOSTEXEC_TEST_TOKEN (to github.com)", "host paths, read-only: " + ws, "ssh agent: no"} {
		if !strings.Contains(asked[0].Detail, want) {
			t.Errorf("detail %q lacks %q", asked[0].Detail, want)
		}
	}
	if strings.Contains(asked[0].Detail, "s3cret-value") {
		t.Error("the detail shows a secret's value")
	}
	// Each ' becomes '\'' when quoted: a body under 64 KiB whose command
	// line is over it.
	quotes := []string{"echo"}
	for range 8 {
		quotes = append(quotes, strings.Repeat("'", 7000))
	}
	_, _, err := run(t, url, Request{Argv: quotes})
	if r := refusedWith(t, err, http.StatusForbidden); !strings.Contains(r.Error(), "more than the 65536 an approval shows whole") {
		t.Errorf("refusal %q, want it to say the request is too long to show", r.Error())
	}
	if len(asked) != 1 {
		t.Errorf("a request too long to show whole was asked about")
	}
}

// TestACommandThatIgnoresSIGTERMIsKilledSandboxAndAll: past the time limit
// a command that ignores SIGTERM is killed with its whole sandbox, and
// nothing of that sandbox stays: no process, no record (airlock ls).
func TestACommandThatIgnoresSIGTERMIsKilledSandboxAndAll(t *testing.T) {
	marker := fmt.Sprintf("3000.%d", time.Now().UnixNano()%1000000)
	url, _, _ := serve(t, Config{AutoApprove: []string{`^sh `}, Timeout: 300 * time.Millisecond}, Env{})
	res, o, err := run(t, url, Request{Argv: []string{"sh", "-c", `trap "" TERM; echo started; sleep ` + marker}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != EndTimeout || o.stdout.String() != "started\n" {
		t.Errorf("result %+v, stdout %q: want a timeout after the output", res, o.stdout.String())
	}
	testutil.NoProcsWithin(t, "sleep\x00"+marker, 2*time.Second)
	testutil.WaitFor(t, 10*time.Second, func() bool {
		out, err := exec.Command(airlockBin, "ls").CombinedOutput()
		return err == nil && !strings.Contains(string(out), "hostexec-")
	})
}

// TestASandboxRunsABoundedNumberOfCommandsAtOnce: each command is a sandbox
// of its own, so a flood of approved commands is refused past the limit,
// and runs again once one ends.
func TestASandboxRunsABoundedNumberOfCommandsAtOnce(t *testing.T) {
	marker := fmt.Sprintf("4000.%d", time.Now().UnixNano()%1000000)
	url, _, _ := serve(t, Config{AutoApprove: []string{`^sleep `, `^true$`}, MaxRunning: 1}, Env{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, http.DefaultClient, url, Request{Argv: []string{"sleep", marker}}, &bytes.Buffer{}, &bytes.Buffer{})
		done <- err
	}()
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(testutil.ProcsWith("sleep\x00"+marker)) > 0 })
	_, _, err := run(t, url, Request{Argv: []string{"true"}})
	if r := refusedWith(t, err, http.StatusTooManyRequests); r.Reason != RefusedBusy {
		t.Errorf("refusal %+v, want busy", r.Refusal)
	}
	cancel()
	<-done
	testutil.NoProcsWithin(t, "sleep\x00"+marker, 5*time.Second)
	testutil.WaitFor(t, 5*time.Second, func() bool {
		res, _, err := run(t, url, Request{Argv: []string{"true"}})
		return err == nil && res.Exit == 0
	})
}

// TestWhatACommandDidOnTheNetworkIsInThisSandboxsLog: a command granted a
// network is audited by its own sandbox's gateway; those records come
// into the asking sandbox's log, tagged, so a hook that used the grants is
// on the record. A host the rule does not name is refused there.
func TestWhatACommandDidOnTheNetworkIsInThisSandboxsLog(t *testing.T) {
	url, _, rec := serve(t, Config{Rules: []Rule{{Match: `^curl `, AllowHosts: []string{"allowed.invalid"}}}}, Env{})
	res, _, err := run(t, url, Request{Argv: []string{"curl", "-s", "-m", "5", "http://not-granted.example/"}})
	if err != nil || res.Exit == 0 {
		t.Fatalf("curl to a host no rule grants: %+v, %v; want it to fail", res, err)
	}
	// They come once the command's sandbox has ended, after its last frame.
	var adopted []audit.Record
	testutil.WaitFor(t, 10*time.Second, func() bool {
		adopted = nil
		for _, r := range rec.all() {
			if strings.HasPrefix(r.Extra["hostexec"], "hostexec-sb1-") {
				adopted = append(adopted, r)
			}
		}
		return len(adopted) > 0
	})
	found := false
	for _, r := range adopted {
		if r.Sandbox != "sb1" || r.Kind == audit.KindExec || r.Kind == audit.KindLifecycle {
			t.Errorf("adopted record %+v: want this sandbox's, no exec or lifecycle", r)
		}
		found = found || strings.Contains(r.Host, "not-granted.example") && r.Decision == audit.Deny
	}
	if !found {
		t.Errorf("adopted records %+v: want the refusal of not-granted.example", adopted)
	}
}
