//go:build linux

package main

// git credentials at the gateway: a stand-in for GitHub served as
// https://github.com on loopback (a test CA, --add-host, --upstream-ca) with
// a real git http-backend behind an auth front that admits only tokens its
// App token endpoint minted, for the repositories they were minted for. The
// sandbox holds a placeholder; the host mints the token from the App's key.

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/ghapp"
	"github.com/airlock-dev/airlock/internal/ghapp/ghapptest"
)

// githubAddr is where the stand-in listens (port 443: the gateway
// intercepts 80 and 443 only), moved by AIRLOCK_TEST_GITHUB_LISTEN.
var githubAddr = cmp.Or(os.Getenv("AIRLOCK_TEST_GITHUB_LISTEN"), "127.0.0.39:443")

type fakeGitHub struct {
	srv     *ghapptest.Server
	ip      string
	caFile  string
	keyFile string
	root    string // bare repositories: root/org/NAME.git
}

var (
	githubOnce sync.Once
	githubInfo *fakeGitHub
	githubErr  error
)

func testGitHub(t *testing.T) *fakeGitHub {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("binding the stand-in's port 443 needs root")
	}
	githubOnce.Do(func() { githubInfo, githubErr = startGitHub() })
	if githubErr != nil {
		t.Fatal(githubErr)
	}
	return githubInfo
}

func startGitHub() (*fakeGitHub, error) {
	dir, err := os.MkdirTemp("", "airlock-github-")
	if err != nil {
		return nil, err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	ca, err := ghapptest.NewCA()
	if err != nil {
		return nil, err
	}
	ip, _, _ := net.SplitHostPort(githubAddr)
	g := &fakeGitHub{ip: ip, caFile: filepath.Join(dir, "ca.pem"), keyFile: filepath.Join(dir, "app.pem"), root: filepath.Join(dir, "git"),
		srv: &ghapptest.Server{AppID: "4242", InstallationID: "77", Key: &key.PublicKey, Repos: []string{"demo", "other"}}}
	if err := os.WriteFile(g.caFile, ca.PEM, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(g.keyFile, ghapptest.KeyPEM(key), 0o600); err != nil {
		return nil, err
	}
	work := filepath.Join(dir, "work")
	cmds := [][]string{{"init", "-q", work},
		{"-C", work, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "hello from github"}}
	for _, name := range []string{"demo", "other"} {
		repo := filepath.Join(g.root, "org", name+".git")
		cmds = append(cmds, []string{"init", "-q", "--bare", repo}, []string{"-C", work, "push", "-q", repo, "HEAD:refs/heads/main"},
			[]string{"-C", repo, "symbolic-ref", "HEAD", "refs/heads/main"}, []string{"-C", repo, "config", "http.receivepack", "true"})
	}
	for _, args := range cmds {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("git %v: %v: %s", args, err, out)
		}
	}
	backend := &cgi.Handler{Path: "/usr/lib/git-core/git-http-backend",
		Env: []string{"GIT_PROJECT_ROOT=" + g.root, "GIT_HTTP_EXPORT_ALL=1", "REMOTE_USER=app"}}
	mux := http.NewServeMux()
	mux.Handle("/app/", g.srv)          // the API (reached by the host, at the address)
	mux.Handle("/", g.srv.Git(backend)) // git's smart HTTP (reached from the sandbox, as github.com)
	leaf, err := ca.Leaf("github.com", "other.test", ip)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", githubAddr)
	if err != nil {
		return nil, err
	}
	// Refused handshakes (a client without the test CA) are the point of some tests.
	srv := &http.Server{Handler: mux, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{leaf}}))
	return g, nil
}

// secret is the --secret flag for a token minted from key, limited to repos.
func (g *fakeGitHub) secret(key, repos string) string {
	return "GH_TOKEN=github-app:app=4242;installation=77;key=" + key + ";repos=" + repos +
		";permissions=contents:write;api=https://" + g.ip + "@github.com:git"
}

func (g *fakeGitHub) flags(extra ...string) []string {
	return append([]string{"run", "-q", "--add-host", "github.com:" + g.ip, "--upstream-ca", g.caFile}, extra...)
}

func TestGitUsesAnAppTokenThatNeverEntersTheSandbox(t *testing.T) {
	g := testGitHub(t)
	eachMode(t, func(t *testing.T, mode string) {
		e := newEnv(t)
		before := len(g.srv.Seen())
		c := e.cmd(append(g.flags("--network-mode", mode, "--secret", g.secret(g.keyFile, "demo"),
			"--allow-host", "other.test", "--add-host", "other.test:"+g.ip), "--", "sh", "-c", `
		echo "PH=$GH_TOKEN"
		git clone -q https://github.com/org/demo.git d1 && echo CLONE-OK
		cd d1 && git -c user.name=t -c user.email=t@t commit -q --allow-empty -m "from inside $$" &&
			git push -q origin HEAD:refs/heads/main && echo PUSH-OK
		git fetch -q origin && echo FETCH-OK
		git push -q https://github.com/org/other.git HEAD:refs/heads/inside 2>&1; echo "OTHER-PUSH=$?"
		cd .. && git clone -q git@github.com:org/demo.git d2 && echo SSH-OK
		git clone -q ssh://git@github.com/org/demo.git d3 && echo SSHURL-OK
		curl -sS -o /dev/null -w "OTHER-HOST %{http_code}\n" -u "x-access-token:$GH_TOKEN" https://other.test/org/demo.git/info/refs?service=git-upload-pack
		curl -sS -o /dev/null -w "GITHUB %{http_code}\n" -u "x-access-token:$GH_TOKEN" https://github.com/org/demo.git/info/refs?service=git-upload-pack
		git config --show-origin --get-regexp 'credential|insteadof' | sed 's/password=[^;]*;/password=…;/'
		echo LEAKS: ; grep -als 'gh[s]_' /proc/[0-9]*/environ /proc/[0-9]*/cmdline ; grep -rls 'gh[s]_' . ; env | grep 'gh[s]_'
		echo END`)...)
		r := e.runCmd(c)
		for _, want := range []string{"CLONE-OK", "PUSH-OK", "FETCH-OK", "SSH-OK", "SSHURL-OK", "END"} {
			if !strings.Contains(r.stdout, want+"\n") {
				t.Errorf("missing %s: %v", want, r)
			}
		}
		if !strings.Contains(r.stdout, "PH=airlock-ph-") {
			t.Errorf("the sandbox should see a placeholder in GH_TOKEN: %v", r)
		}
		// The server got the real token; the sandbox never had it.
		tokens := g.srv.Tokens()
		seen := g.srv.Seen()[before:]
		if len(seen) == 0 {
			t.Fatalf("the server was sent no credentials: %v", r)
		}
		for _, p := range seen {
			if !strings.HasPrefix(p, "ghs_") {
				t.Errorf("the server was sent %q, not a minted token (a placeholder got through?)", p)
			}
		}
		for _, tok := range tokens {
			if strings.Contains(r.stdout+r.stderr, tok) {
				t.Errorf("a real token shows in the sandbox's output: %v", r)
			}
		}
		if _, after, _ := strings.Cut(r.stdout, "LEAKS:"); strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(after), "END")) != "" {
			t.Errorf("the sandbox found the real token in its processes or files: %q", after)
		}
		// The placeholder toward a host that is not the secret's is refused
		// by the gateway (it never reaches the server); toward github.com
		// the same request is admitted.
		if !strings.Contains(r.stdout, "OTHER-HOST 403\n") || !strings.Contains(r.stdout, "GITHUB 200\n") {
			t.Errorf("want the placeholder refused toward other.test (403) and admitted toward github.com (200): %v", r)
		}
		// A push outside the token's repositories: refused by the server.
		if !strings.Contains(r.stdout, "OTHER-PUSH=128") && !strings.Contains(r.stdout, "OTHER-PUSH=1") {
			t.Errorf("a push to org/other should be refused (the token covers demo only): %v", r)
		}
		if out, _ := exec.Command("git", "--git-dir", filepath.Join(g.root, "org", "other.git"), "branch", "--list", "inside").Output(); len(out) > 0 {
			t.Errorf("org/other got the branch the token may not push")
		}
		// The positive control: the push to demo arrived.
		out, err := exec.Command("git", "--git-dir", filepath.Join(g.root, "org", "demo.git"), "log", "-1", "--format=%s", "main").Output()
		if err != nil || !strings.HasPrefix(string(out), "from inside") {
			t.Errorf("org/demo's main = %q (%v), want the commit pushed from inside", out, err)
		}
		// Nothing was written into the repository: the helper and the
		// rewrite came from the environment ("command line:" origin).
		for _, l := range strings.Split(r.stdout, "\n") {
			if strings.HasPrefix(l, "file:") && strings.Contains(l, "github.com") {
				t.Errorf("git read a github.com setting from a file: %s", l)
			}
		}
		if !strings.Contains(r.stdout, "command line:\turl.https://github.com/.insteadof git@github.com:") {
			t.Errorf("the ssh rewrite should come from the environment: %v", r)
		}
		filepath.WalkDir(e.ws, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, tok := range tokens {
				if strings.Contains(string(b), tok) {
					t.Errorf("%s holds a real token", p)
				}
			}
			if strings.HasSuffix(p, ".git/config") && strings.Contains(string(b), "credential") {
				t.Errorf("%s holds credential settings:\n%s", p, b)
			}
			return nil
		})
	})
}

// A token that lapses while the sandbox runs is replaced on the host, and
// the running gateway swaps in the new one: a fetch after the first token
// expired works, with another token.
func TestAnAppTokenIsRefreshedWhileTheSandboxRuns(t *testing.T) {
	g := testGitHub(t)
	g.srv.SetTTL(4 * time.Second) // refreshed halfway, at 2 s
	defer g.srv.SetTTL(0)
	e := newEnv(t)
	before := len(g.srv.Seen())
	r := e.run(append(g.flags("--secret", g.secret(g.keyFile, "demo")), "--", "sh", "-c",
		`git clone -q https://github.com/org/demo.git d && sleep 6 && git -C d fetch -q && echo FETCH-AFTER-EXPIRY-OK`)...)
	if !strings.Contains(r.stdout, "FETCH-AFTER-EXPIRY-OK") {
		t.Fatalf("a fetch after the first token lapsed: %v", r)
	}
	distinct := map[string]bool{}
	for _, p := range g.srv.Seen()[before:] {
		distinct[p] = true
	}
	if len(distinct) < 2 {
		t.Errorf("the server saw %d distinct tokens, want the first and a refreshed one", len(distinct))
	}
}

// A token from the host's environment (as from a file or `gh auth token`)
// marked :git works the same way: the sandbox holds the placeholder.
func TestAGitSecretFromTheEnvironmentWorksWithGit(t *testing.T) {
	g := testGitHub(t)
	key, err := ghapp.LoadKey(g.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	pem, _ := os.ReadFile(g.caFile)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	m := &ghapp.Minter{App: ghapp.App{AppID: "4242", InstallationID: "77", Repositories: []string{"demo"}, API: "https://" + g.ip},
		Key: key, Client: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}}
	tok, err := m.Mint(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	c := e.cmd(append(g.flags("--secret", "GH_TOKEN@github.com:git"), "--", "sh", "-c",
		`git clone -q git@github.com:org/demo.git d && echo CLONE-OK; env | grep -c 'gh[s]_'`)...)
	c.Env = e.environ("GH_TOKEN=" + tok.Value)
	r := e.runCmd(c)
	if !strings.Contains(r.stdout, "CLONE-OK\n0\n") || strings.Contains(r.stdout+r.stderr, tok.Value) {
		t.Errorf("want a clone with the placeholder and no token inside: %v", r)
	}
}

// The App's private key never shows inside, wherever it is on the host; in
// the workspace it is refused.
func TestTheAppKeyIsHiddenFromTheSandbox(t *testing.T) {
	g := testGitHub(t)
	dir, err := os.MkdirTemp("/var/tmp", "airlock-appkey-") // a host path sandboxes see, read-only
	if err != nil {
		t.Skip(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	key, _ := os.ReadFile(g.keyFile)
	os.WriteFile(filepath.Join(dir, "app.pem"), key, 0o644)
	os.WriteFile(filepath.Join(dir, "beside.txt"), []byte("visible\n"), 0o644)
	e := newEnv(t)
	r := e.run(append(g.flags("--secret", g.secret(filepath.Join(dir, "app.pem"), "demo")), "--", "sh", "-c",
		"cat "+dir+"/beside.txt; cat "+dir+"/app.pem 2>/dev/null | head -c 40; echo END")...)
	if !strings.Contains(r.stdout, "visible\n") {
		t.Fatalf("the positive control: a file beside the key should be readable: %v", r)
	}
	if strings.Contains(r.stdout, "PRIVATE KEY") {
		t.Errorf("the sandbox read the App's key: %v", r)
	}
	e2 := newEnv(t)
	os.WriteFile(filepath.Join(e2.ws, "app.pem"), key, 0o600)
	r = e2.run(append(g.flags("--secret", g.secret(filepath.Join(e2.ws, "app.pem"), "demo")), "--", "true")...)
	if r.code != 125 || !strings.Contains(r.stderr, "GH_TOKEN") || !strings.Contains(r.stderr, "in the workspace") {
		t.Errorf("a key in the workspace should be refused: %v", r)
	}
}

// The user's own git environment config is kept; airlock's follows it.
func TestGitEnvironmentConfigMergesWithTheUsers(t *testing.T) {
	g := testGitHub(t)
	e := newEnv(t)
	r := e.run(append(g.flags("--secret", g.secret(g.keyFile, "demo"),
		"-e", "GIT_CONFIG_COUNT=1", "-e", "GIT_CONFIG_KEY_0=user.name", "-e", "GIT_CONFIG_VALUE_0=Mine"),
		"--", "sh", "-c", `git config user.name; git ls-remote -q https://github.com/org/demo.git main >/dev/null && echo LS-OK`)...)
	if r.code != 0 || !strings.Contains(r.stdout, "Mine\n") || !strings.Contains(r.stdout, "LS-OK") {
		t.Errorf("want the user's user.name and a working helper: %v", r)
	}
}

// Bad sources stop the run before anything starts: exit 125, one line
// naming the secret, no value.
func TestABadGitHubAppSourceStopsTheRunWithOneLine(t *testing.T) {
	g := testGitHub(t)
	dir := t.TempDir()
	otherKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	wrong := filepath.Join(dir, "wrong.pem")
	os.WriteFile(wrong, ghapptest.KeyPEM(otherKey), 0o600)
	notRSA := filepath.Join(dir, "cert.pem")
	os.WriteFile(notRSA, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), 0o600)
	for name, c := range map[string]struct{ secret, want string }{
		"a key the endpoint refuses (401)": {g.secret(wrong, "demo"), "answered 401"},
		"a key file that is not RSA":       {g.secret(notRSA, "demo"), "not an RSA private key"},
		"a missing key file":               {g.secret(filepath.Join(dir, "none.pem"), "demo"), "no such file"},
		"a failing command":                {"GH_TOKEN=cmd:exit 3@github.com:git", "running the command"},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			canary := filepath.Join(e.ws, "ran") // the workspace: the sandbox's /tmp is its own
			r := e.run(append(g.flags("--secret", c.secret), "--", "touch", canary)...)
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			if r.code != 125 || len(lines) != 1 || !strings.Contains(lines[0], "GH_TOKEN") || !strings.Contains(lines[0], c.want) {
				t.Errorf("want exit 125 and one line naming GH_TOKEN with %q: %v", c.want, r)
			}
			if _, err := os.Stat(canary); err == nil {
				t.Errorf("the command ran")
			}
		})
	}
	// The host-side client verifies the API's certificate: without
	// --upstream-ca the stand-in's test CA is not trusted.
	e0 := newEnv(t)
	r := e0.run("run", "-q", "--add-host", "github.com:"+g.ip, "--secret", g.secret(g.keyFile, "demo"), "--", "true")
	if r.code != 125 || !strings.Contains(r.stderr, "GH_TOKEN") || !strings.Contains(r.stderr, "certificate") {
		t.Errorf("an API whose certificate the host does not trust should stop the run: %v", r)
	}
	// The positive control: the same flags with the App's key run.
	e := newEnv(t)
	canary := filepath.Join(e.ws, "ran")
	if r := e.run(append(g.flags("--secret", g.secret(g.keyFile, "demo")), "--", "touch", canary)...); r.code != 0 {
		t.Errorf("with the App's key: %v", r)
	}
	if _, err := os.Stat(canary); err != nil {
		t.Errorf("with the App's key the command should run: %v", err)
	}
}
