package sandbox

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/testutil"
)

// The sandbox re-executes this test binary as its guest. Sandboxes are
// registered in a state dir of the tests' own (overlay changes are kept
// there for review), never the user's.
func TestMain(m *testing.M) {
	Init()
	dir, err := os.MkdirTemp("", "airlock-api-state-")
	if err != nil {
		panic(err)
	}
	os.Setenv("AIRLOCK_STATE_DIR", dir)
	code := m.Run()
	exec.Command("chmod", "-R", "u+rwX", dir).Run() // overlay work dirs are mode 0
	os.RemoveAll(dir)
	os.Exit(code)
}

func newSandbox(t *testing.T, c *Config) *Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := Create(context.Background(), c)
	if err != nil {
		if ctx.Err() == nil && strings.Contains(err.Error(), "create namespaces") {
			t.Skipf("no user namespaces here: %v", err)
		}
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { sb.Close() })
	return sb
}

func TestExecAndFiles(t *testing.T) {
	var mu sync.Mutex
	var ops []string
	// await waits (at most 10 s) for the event want.
	await := func(want string) {
		t.Helper()
		testutil.WaitFor(t, 10*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return slices.Contains(ops, want)
		})
	}
	done := make(chan struct{})
	sb := newSandbox(t, &Config{Env: map[string]string{"GREETING": "hi"}})
	go func() {
		defer close(done)
		for e := range sb.Events() {
			if e.File != nil {
				mu.Lock()
				ops = append(ops, e.File.Op+" "+e.File.Path)
				mu.Unlock()
			}
		}
	}()
	ctx := context.Background()
	r, err := sb.Exec("echo $GREETING; pwd; echo err >&2; exit 3")
	if err != nil {
		t.Fatal(err)
	}
	if r.ExitCode != 3 || r.Stdout != "hi\n/workspace\n" || r.Stderr != "err\n" {
		t.Fatalf("Exec = %+v", r)
	}
	if err := sb.WriteFileContext(ctx, "/workspace/sub/hello.txt", []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := sb.ReadFileContext(ctx, "sub/hello.txt")
	if err != nil || string(b) != "hello" {
		t.Fatalf("ReadFile = %q, %v", b, err)
	}
	ls, err := sb.ListFilesContext(ctx, "/workspace/sub")
	if err != nil || len(ls) != 1 || ls[0].Name != "hello.txt" || ls[0].Mode != 0o600 || ls[0].Size != 5 {
		t.Fatalf("ListFiles = %+v, %v", ls, err)
	}
	if _, err := sb.ReadFileContext(ctx, "/workspace/nope"); !errors.Is(err, &Error{Kind: KindNotFound}) {
		t.Fatalf("ReadFile(missing) = %v, want kind %s", err, KindNotFound)
	}
	if err := sb.WriteFile("/etc/passwd", []byte("x")); !errors.Is(err, &Error{Kind: KindPermission}) {
		t.Fatalf("WriteFile(/etc/passwd) = %v, want kind %s", err, KindPermission)
	}
	// The watcher learns of a new directory from its create event and only
	// then watches it: a file made and removed in it before that (a loaded
	// machine can delay the watcher by milliseconds) is never seen. So the
	// file stays until its write is reported, as a file an agent leaves does.
	await("write /workspace/sub/hello.txt")
	if _, err := sb.Exec("rm sub/hello.txt"); err != nil {
		t.Fatal(err)
	}
	await("delete /workspace/sub/hello.txt")
	sb.Close()
	<-done
	got := strings.Join(ops, "\n")
	for _, want := range []string{"create /workspace/sub", "write /workspace/sub/hello.txt", "delete /workspace/sub/hello.txt"} {
		if !strings.Contains(got, want) {
			t.Errorf("file events lack %q; got:\n%s", want, got)
		}
	}
	if _, err := sb.Exec("true"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Exec after Close = %v, want ErrClosed", err)
	}
}

func TestContextCancelTearsDown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	sb, err := Create(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	pid := sb.sb.GuestPID()
	dir := sb.sb.Dir()
	cancel()
	select {
	case <-sb.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the sandbox outlived its context")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("private dir %s left behind: %v", dir, err)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); !strings.Contains(string(b), ") Z") {
			t.Errorf("guest %d still running", pid)
		}
	}
}

func TestExecTimeoutAndCancel(t *testing.T) {
	sb := newSandbox(t, &Config{Resources: &Resources{TimeoutSeconds: 30}})
	r, err := sb.ExecContext(context.Background(), ExecRequest{Command: "sleep 10", TimeoutMS: 100})
	if err != nil || r.ExitCode == 0 || r.Reason == "" {
		t.Fatalf("timed out exec = %+v, %v", r, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	r, err = sb.ExecContext(ctx, ExecRequest{Args: []string{"sleep", "10"}})
	if err != nil || r.ExitCode != 137 || time.Since(start) > 5*time.Second {
		t.Fatalf("canceled exec = %+v, %v after %s", r, err, time.Since(start))
	}
}

// TestHTTPHooks: Go-function hooks see intercepted requests (placeholders,
// never values) and responses, and can refuse a request.
func TestHTTPHooks(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("the upstream listens on 127.0.0.3:443, which needs root")
	}
	var mu sync.Mutex
	var got []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.URL.Path+" hook="+r.Header.Get("X-Hook")+" auth="+r.Header.Get("Authorization"))
		mu.Unlock()
		fmt.Fprintln(w, "ok")
	}))
	ln, err := net.Listen("tcp", "127.0.0.3:443")
	if err != nil {
		t.Skipf("listen 127.0.0.3:443: %v", err)
	}
	srv.Listener = ln
	srv.StartTLS()
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.TLS.Certificates[0].Certificate[0]}), 0o644)
	var seenAuth []string
	sb := newSandbox(t, &Config{
		Network: &NetworkConfig{
			AllowedHosts: []string{"example.com"},
			AddHosts:     []string{"example.com:127.0.0.3"},
			UpstreamCA:   caFile,
			Secrets:      map[string]Secret{"TOKEN": {Value: "real-secret-value", Hosts: []string{"example.com"}}},
			Hooks: HTTPHooks{
				OnRequest: func(r *http.Request) (*http.Request, error) {
					mu.Lock()
					seenAuth = append(seenAuth, r.Header.Get("Authorization"))
					mu.Unlock()
					if strings.HasPrefix(r.URL.Path, "/admin") {
						return nil, ErrBlocked
					}
					r.Header.Set("X-Hook", "yes")
					return r, nil
				},
				OnResponse: func(resp *http.Response, req *http.Request) (*http.Response, error) {
					resp.Header.Set("X-Seen", req.URL.Path)
					return resp, nil
				},
			},
		},
		Env: map[string]string{"TOKEN": "${TOKEN}"},
	})
	r, err := sb.Exec(`curl -sS -D - -H "Authorization: Bearer $TOKEN" https://example.com/v1; curl -sS -o /dev/null -w '%{http_code}\n' https://example.com/admin`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.ToLower(r.Stdout), "x-seen: /v1") || !strings.HasSuffix(r.Stdout, "403\n") {
		t.Fatalf("sandbox saw:\n%s%s", r.Stdout, r.Stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != "/v1 hook=yes auth=Bearer real-secret-value" {
		t.Fatalf("upstream got %q", got)
	}
	for _, a := range seenAuth {
		if strings.Contains(a, "real-secret-value") {
			t.Fatalf("OnRequest saw the real secret: %q", a)
		}
	}
}

func TestHiddenPathsStayHiddenUnderAMount(t *testing.T) {
	sb := newSandbox(t, &Config{VFS: &VFSConfig{DirectMounts: map[string]DirectMount{"/hostetc": {HostPath: "/etc", Readonly: true}}}})
	r, err := sb.Exec("cat /hostetc/hostname >/dev/null && echo visible; cat /hostetc/shadow 2>/dev/null | wc -c")
	if err != nil {
		t.Fatal(err)
	}
	if r.Stdout != "visible\n0\n" {
		t.Fatalf("got %q, want /hostetc/hostname readable and /hostetc/shadow empty", r.Stdout)
	}
}

func TestRealFSAndOverlayWorkspaces(t *testing.T) {
	host := t.TempDir()
	os.Chmod(host, 0o755)
	os.WriteFile(filepath.Join(host, "base.txt"), []byte("base"), 0o644)

	// real_fs: the host directory, live, at /workspace.
	sb := newSandbox(t, &Config{VFS: &VFSConfig{Mounts: map[string]Mount{"/workspace": {Type: MountRealFS, HostPath: host}}}})
	var mu sync.Mutex
	var events []string
	go func() {
		for e := range sb.Events() {
			if e.File != nil {
				mu.Lock()
				events = append(events, e.File.Op+" "+e.File.Path)
				mu.Unlock()
			}
		}
	}()
	if r, err := sb.Exec("cat base.txt && echo new > made.txt"); err != nil || r.Stdout != "base" {
		t.Fatalf("real_fs exec = %+v, %v", r, err)
	}
	if b, err := os.ReadFile(filepath.Join(host, "made.txt")); err != nil || string(b) != "new\n" {
		t.Fatalf("host sees %q, %v; want the sandbox's write", b, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		got := strings.Join(events, ",")
		mu.Unlock()
		if strings.Contains(got, "write /workspace/made.txt") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("file events = %s", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	sb.Close()

	// overlay: the host directory below, writes in memory above; the host sees nothing.
	ov, err := Create(context.Background(), &Config{VFS: &VFSConfig{Mounts: map[string]Mount{"/workspace": {
		Type: MountOverlay, Upper: &Mount{Type: MountMemory}, Lower: &Mount{Type: MountRealFS, HostPath: host}}}}})
	if err != nil {
		if strings.Contains(err.Error(), "overlay") {
			t.Skipf("no overlay here: %v", err)
		}
		t.Fatal(err)
	}
	defer ov.Close()
	if r, err := ov.Exec("cat base.txt && echo changed > base.txt && cat base.txt && rm made.txt"); err != nil || r.Stdout != "basechanged\n" || r.ExitCode != 0 {
		t.Fatalf("overlay exec = %+v, %v", r, err)
	}
	if b, _ := os.ReadFile(filepath.Join(host, "base.txt")); string(b) != "base" {
		t.Fatalf("host base.txt = %q after an overlay write", b)
	}
	if _, err := os.Stat(filepath.Join(host, "made.txt")); err != nil {
		t.Fatalf("host made.txt gone after an overlay delete: %v", err)
	}
}

// TestUnprivileged re-runs this package's tests as uid 65534 (where the
// network is the proxy door and cgroups may be missing), as root only.
func TestUnprivileged(t *testing.T) {
	testutil.RerunAsNobody(t, testutil.Nobody{Run: "^Test"})
}

// A secret given by value with Git set reaches git inside as its placeholder,
// through the credential helper in git's environment config.
func TestAnAPISecretWithGitIsGitsCredential(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // the CA's dir: uid 65534's HOME does not exist
	sb := newSandbox(t, &Config{Network: &NetworkConfig{
		Secrets: map[string]Secret{"GH": {Value: "real-git-token-value", Hosts: []string{"github.com"}, Git: "x-access-token"}},
	}})
	r, err := sb.Exec(`printf 'protocol=https\nhost=github.com\n\n' | GIT_TERMINAL_PROMPT=0 git credential fill; echo "env=$GH"`)
	if err != nil {
		t.Fatal(err)
	}
	ph, _ := strings.CutPrefix(r.Stdout[strings.LastIndex(r.Stdout, "env="):], "env=")
	ph = strings.TrimSpace(ph)
	if !strings.HasPrefix(ph, "airlock-ph-") || !strings.Contains(r.Stdout, "username=x-access-token\npassword="+ph+"\n") || strings.Contains(r.Stdout, "real-git-token") {
		t.Fatalf("git credential fill inside gave:\n%s%s", r.Stdout, r.Stderr)
	}
}

// A real_fs workspace holding a repository is guarded as the CLI's bind
// workspace is: the sandbox commits, but cannot plant a hook or redirect the
// git dir that the host's git reads next.
func TestARealFSWorkspacesRepositoryIsNoWayOut(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	host := t.TempDir()
	os.Chmod(host, 0o755)
	git := func(args ...string) string {
		t.Helper()
		c := exec.Command("git", append([]string{"-C", host, "-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
		c.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+host)
		b, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, b)
		}
		return string(b)
	}
	git("init", "-q")
	os.WriteFile(filepath.Join(host, "a.txt"), []byte("a"), 0o644)
	git("add", "a.txt")
	git("commit", "-qm", "first")
	if testutil.IsNobodyRerun() || os.Getuid() != 0 {
		t.Skip("the repository belongs to root here") // uid 65534 could not write it at all
	}

	sb := newSandbox(t, &Config{VFS: &VFSConfig{Mounts: map[string]Mount{"/workspace": {Type: MountRealFS, HostPath: host}}}})
	canary := filepath.Join(t.TempDir(), "canary")
	hook := "#!/bin/sh\ntouch " + canary + "\n"
	r, err := sb.Exec(`export HOME=/tmp GIT_CONFIG_NOSYSTEM=1
git config --global --add safe.directory '*'
printf '` + hook + `' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && echo planted-hook
echo /tmp > .git/commondir && echo planted-commondir
mv .git .git.old && echo moved-git
echo b > b.txt && git add b.txt && git -c user.name=s -c user.email=s@s commit -qm inside && echo committed`)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"planted-hook", "planted-commondir", "moved-git"} {
		if strings.Contains(r.Stdout, bad) {
			t.Errorf("inside: %s succeeded:\n%s%s", bad, r.Stdout, r.Stderr)
		}
	}
	if !strings.Contains(r.Stdout, "committed") {
		t.Fatalf("a commit inside failed (the positive control):\n%s%s", r.Stdout, r.Stderr)
	}
	sb.Close()
	if log := git("log", "--format=%s"); !strings.Contains(log, "inside") {
		t.Errorf("host git log = %q, want the sandbox's commit", log)
	}
	os.WriteFile(filepath.Join(host, "c.txt"), []byte("c"), 0o644)
	git("add", "c.txt")
	git("commit", "-qm", "host")
	if _, err := os.Stat(canary); err == nil {
		t.Fatal("the host's git commit ran a hook the sandbox planted")
	}
}
