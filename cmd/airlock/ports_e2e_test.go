//go:build linux

package main

// Published ports (-p): real servers inside (python3 -m http.server, node)
// reached from the host's curl and a headless Chromium, on every door this
// user's sandboxes get (the netstack as root, the guest's hand-over through
// the proxy door; the docker and vm re-runs of the suite take theirs).

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/testutil"
)

// freePort is a TCP port free on 127.0.0.1 a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// curl fetches url with the host's curl: its body, or "" and the error.
func curl(url string) (string, error) {
	out, err := exec.Command("curl", "-sS", "--fail", "-m", "5", url).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("curl %s: %v: %s", url, err, out)
	}
	return string(out), nil
}

// curlUntil fetches url until it answers with a body containing want (the
// server inside takes a moment to listen), failing the test after limit.
func curlUntil(t *testing.T, url, want string, limit time.Duration) string {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl on the host")
	}
	deadline := time.Now().Add(limit)
	for {
		body, err := curl(url)
		if err == nil && strings.Contains(body, want) {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer %q within %s: %q, %v", url, want, limit, body, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// serveLimit is how long a server inside may take to answer: a VM under
// TCG boots in seconds, more on a loaded machine.
func serveLimit() time.Duration {
	if testBackend() == "vm" {
		return 2 * time.Minute
	}
	return 30 * time.Second
}

// inbound are the inbound records of sandbox name's audit log.
func inbound(t *testing.T, e *env, name string) []audit.Record {
	t.Helper()
	var out []audit.Record
	for _, r := range auditRecords(t, e, name) {
		if r.Kind == audit.KindInbound {
			out = append(out, r)
		}
	}
	return out
}

// startRun starts a foreground run c (its stderr into stderr, if set) and
// returns a channel closed once it has ended; the test's end kills it.
func startRun(t *testing.T, c *exec.Cmd, stderr *lockedBuffer) <-chan struct{} {
	t.Helper()
	if stderr != nil {
		c.Stderr = stderr
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { c.Wait(); close(done) }()
	t.Cleanup(func() { c.Process.Kill(); <-done })
	return done
}

// serveFlags are the flags a sandbox with a published port needs: a network
// (a port alone is no network; nothing is reached here) in mode.
func serveFlags(mode string, ports ...string) []string {
	f := []string{"--allow-host", "example.com"}
	if mode != "" && testBackend() != "vm" {
		f = append(f, "--network-mode", mode)
	}
	for _, p := range ports {
		f = append(f, "-p", p)
	}
	return f
}

// eachPortMode is eachMode for the doors this backend has: a docker
// sandbox has the proxy door alone, even for root.
func eachPortMode(t *testing.T, f func(t *testing.T, mode string)) {
	if testBackend() == "docker" {
		f(t, config.ModeProxy)
		return
	}
	eachMode(t, f)
}

func TestPublishedPortReachesAPythonServerFromTheHostsCurl(t *testing.T) {
	eachPortMode(t, func(t *testing.T, mode string) {
		e := newEnv(t)
		os.WriteFile(filepath.Join(e.ws, "index.html"), []byte("hello from the sandbox\n"), 0o644)
		hp := freePort(t)
		// Foreground, as a user starts a dev server, until the test kills it.
		args := append(append([]string{"run", "-q", "--name", "web"}, serveFlags(mode, fmt.Sprintf("%d:8000", hp))...),
			"--", "python3", "-m", "http.server", "8000")
		done := startRun(t, e.cmd(args...), nil)
		url := fmt.Sprintf("http://127.0.0.1:%d/index.html", hp)
		if body := curlUntil(t, url, "hello from the sandbox", serveLimit()); body != "hello from the sandbox\n" {
			t.Errorf("body %q", body)
		}
		if r := e.run("port", "web"); r.code != 0 || r.stdout != fmt.Sprintf("8000/tcp -> 127.0.0.1:%d\n", hp) {
			t.Errorf("airlock port web: %v", r)
		}
		if r := e.run("port", "web", "8000"); r.code != 0 || r.stdout != fmt.Sprintf("127.0.0.1:%d\n", hp) {
			t.Errorf("airlock port web 8000: %v", r)
		}
		if r := e.run("port", "web", "9"); r.code != 125 || !strings.Contains(r.stderr, "publishes no port 9") {
			t.Errorf("airlock port web 9: %v", r)
		}
		if r := e.run("kill", "web"); r.code != 0 {
			t.Fatalf("kill: %v", r)
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the run did not end after airlock kill")
		}
		// Closed with the sandbox.
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", hp), 2*time.Second); err == nil {
			c.Close()
			t.Error("the published port still listens after the sandbox ended")
		}
		// The polls before the server listened are errors; one was answered.
		var recs []audit.Record
		for _, r := range inbound(t, e, "web") {
			if r.Decision == audit.Allow {
				recs = append(recs, r)
			} else if r.Decision != audit.Error || !strings.Contains(r.Reason, "nothing answered on the sandbox's port 8000") {
				t.Errorf("inbound record %+v", r)
			}
		}
		if len(recs) != 1 {
			t.Fatalf("inbound records %+v: want one answered, for the one curl", recs)
		}
		r := recs[0]
		if r.Decision != audit.Allow || r.IP != "127.0.0.1" || r.Port != 8000 || r.Extra["listen"] != fmt.Sprintf("127.0.0.1:%d", hp) ||
			!strings.HasPrefix(r.Extra["peer"], "127.0.0.1:") || r.BytesIn < 50 || r.BytesOut < int64(len("hello from the sandbox\n")) || r.Duration == 0 {
			t.Errorf("inbound record %+v", r)
		}
		if line := e.run("audit", "web").stdout; !strings.Contains(line, fmt.Sprintf("-> 127.0.0.1:%d -> sandbox:8000", hp)) {
			t.Errorf("airlock audit shows no inbound line:\n%s", line)
		}
	})
}

func TestPublishedPortReachesANodeServerListeningOnLoopbackOnly(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil || testBackend() == "docker" { // the docker test image has no node
		t.Skip("no node in the sandbox's root")
	}
	modes := networkModes()
	if testBackend() == "vm" {
		t.Skip("a VM's published port reaches servers on its interface (0.0.0.0), not on its loopback alone")
	}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			hp := freePort(t)
			// 127.0.0.1 alone, as vite and many dev servers listen by default.
			script := `require("http").createServer((q, s) => s.end("node says " + q.url)).listen(3000, "127.0.0.1")`
			args := append(append([]string{"run", "-d", "-q", "--name", "node"}, serveFlags(mode, fmt.Sprintf("%d:3000", hp))...), "--", node, "-e", script)
			if r := e.run(args...); r.code != 0 {
				t.Fatalf("run -d: %v", r)
			}
			if body := curlUntil(t, fmt.Sprintf("http://127.0.0.1:%d/hi", hp), "node says", serveLimit()); body != "node says /hi" {
				t.Errorf("body %q", body)
			}
		})
	}
}

func TestDetachedSandboxServesItsPortsUntilItEnds(t *testing.T) {
	e := newEnv(t)
	os.WriteFile(filepath.Join(e.ws, "index.html"), []byte("detached\n"), 0o644)
	// SANDBOX_PORT alone: the host picks the port; airlock port says which.
	r := e.run(append(append([]string{"run", "-d", "--name", "bg"}, serveFlags("", "8000")...), "--", "python3", "-m", "http.server", "8000")...)
	if r.code != 0 {
		t.Fatalf("run -d: %v", r)
	}
	r = e.run("port", "bg", "8000")
	host := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(host, "127.0.0.1:") || strings.HasSuffix(host, ":0") {
		t.Fatalf("airlock port bg 8000: %v", r)
	}
	curlUntil(t, "http://"+host+"/index.html", "detached", serveLimit())
	// The command that started it has long returned: the supervisor serves.
	for i := 0; i < 3; i++ {
		if body, err := curl("http://" + host + "/index.html"); err != nil || body != "detached\n" {
			t.Fatalf("request %d: %q %v", i, body, err)
		}
	}
	if r := e.run("kill", "bg"); r.code != 0 {
		t.Fatalf("kill: %v", r)
	}
	testutil.WaitFor(t, 20*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", host, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	if r := e.run("port", "bg"); r.code != 125 || !strings.Contains(r.stderr, "ports closed with it") {
		t.Errorf("airlock port of an ended sandbox: %v", r)
	}
	if n := len(inbound(t, e, "bg")); n < 4 {
		t.Errorf("%d inbound records for 4 requests (and the polls before)", n)
	}
}

// TestAPublishedPortLetsNothingOut: a server inside that, for each request,
// tries to reach the host through what the inbound connection shows it
// (its peer's address, the published port, the gateway) reaches nothing:
// the host's own server sees no request, and the published port sees no
// connection but the test's.
func TestAPublishedPortLetsNothingOut(t *testing.T) {
	eachPortMode(t, func(t *testing.T, mode string) {
		var hits atomic.Int32
		hostSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			w.Write([]byte("host secret"))
		})}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go hostSrv.Serve(ln)
		defer hostSrv.Close()
		hostPort := ln.Addr().(*net.TCPAddr).Port
		// Positive control for the host's server: it answers from here.
		if body, err := curl(fmt.Sprintf("http://127.0.0.1:%d/", hostPort)); err != nil || body != "host secret" {
			t.Fatalf("the host's server does not answer the host: %q %v", body, err)
		}
		hits.Store(0)

		e := newEnv(t)
		hp := freePort(t)
		os.WriteFile(filepath.Join(e.ws, "probe.py"), []byte(probeServer), 0o644)
		args := append(append([]string{"run", "-d", "-q", "--name", "probe"}, serveFlags(mode, fmt.Sprintf("%d:8000", hp))...),
			"--", "python3", filepath.Join(e.ws, "probe.py"), strconv.Itoa(hostPort), strconv.Itoa(hp))
		if r := e.run(args...); r.code != 0 {
			t.Fatalf("run -d: %v", r)
		}
		body := curlUntil(t, fmt.Sprintf("http://127.0.0.1:%d/", hp), "tries", serveLimit())
		var got struct {
			Peer  string            `json:"peer"`
			Tries map[string]string `json:"tries"`
		}
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatalf("probe answered %q: %v", body, err)
		}
		t.Logf("inside, the inbound connection came from %s; tries: %v", got.Peer, got.Tries)
		if len(got.Tries) < 7 {
			t.Fatalf("tries %v", got.Tries)
		}
		for what, res := range got.Tries {
			if strings.Contains(res, "host secret") {
				t.Errorf("%s reached the host's server: %s", what, res)
			}
		}
		if n := hits.Load(); n != 0 {
			t.Errorf("the host's server saw %d requests from the sandbox", n)
		}
		e.run("kill", "probe")
		// The polls until the server listened, and the answered one; none
		// from inside (their peer would not be the test's loopback client
		// on a port of its own).
		for _, r := range inbound(t, e, "probe") {
			if r.IP != "127.0.0.1" || r.Port != 8000 {
				t.Errorf("an inbound connection not the test's: %+v", r)
			}
		}
		// The listener is on 127.0.0.1 alone: 127.0.0.2 (loopback too, but
		// not named) finds nothing.
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.2:%d", hp), time.Second); err == nil {
			c.Close()
			t.Error("the published port answers on 127.0.0.2: it must listen on the given address alone")
		}
	})
}

// probeServer answers each GET with what it could reach, as JSON.
const probeServer = `
import http.server, json, socket, sys
HOST_SRV, PUBLISHED = int(sys.argv[1]), int(sys.argv[2])
def reach(ip, port):
    try:
        s = socket.create_connection((ip, port), timeout=3)
    except Exception as e:
        return "refused: " + type(e).__name__
    try:
        s.settimeout(3)
        s.sendall(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
        return "connected: " + s.recv(200).decode("latin-1")
    except Exception as e:
        return "connected, then " + type(e).__name__
    finally:
        s.close()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ip, port = self.client_address[:2]
        tries = {
            "peer:host-server": reach(ip, HOST_SRV),
            "peer:its-own-port": reach(ip, port),
            "peer:published-port": reach(ip, PUBLISHED),
            "gateway:host-server": reach("10.0.2.2", HOST_SRV),
            "gateway:published-port": reach("10.0.2.2", PUBLISHED),
            "loopback:host-server": reach("127.0.0.1", HOST_SRV),
            "loopback:published-port": reach("127.0.0.1", PUBLISHED),
        }
        body = json.dumps({"peer": "%s:%d" % (ip, port), "tries": tries}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.HTTPServer(("0.0.0.0", 8000), H).serve_forever()
`

func TestPublishedPortOnEveryAddressWarns(t *testing.T) {
	e := newEnv(t)
	hp := freePort(t)
	os.WriteFile(filepath.Join(e.ws, "index.html"), []byte("everywhere\n"), 0o644)
	var stderr lockedBuffer
	startRun(t, e.cmd(append(append([]string{"run", "--name", "all"}, serveFlags("", fmt.Sprintf("0.0.0.0:%d:8000", hp))...), "--", "python3", "-m", "http.server", "8000")...), &stderr)
	curlUntil(t, fmt.Sprintf("http://127.0.0.1:%d/index.html", hp), "everywhere", serveLimit())
	want := fmt.Sprintf("airlock: warning: -p 0.0.0.0:%d:8000: the sandbox's port 8000 is open to whoever can reach 0.0.0.0, not to this host alone", hp)
	if !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr lacks the warning %q:\n%s", want, stderr.String())
	}
	// Detached, the run that started it says so too (the supervisor's
	// own warnings go to its log).
	hp2 := freePort(t)
	r := e.run(append(append([]string{"run", "-d", "--name", "all-bg"}, serveFlags("", fmt.Sprintf("0.0.0.0:%d:8000", hp2))...), "--", "python3", "-m", "http.server", "8000")...)
	want = fmt.Sprintf("airlock: warning: -p 0.0.0.0:%d:8000: the sandbox's port 8000 is open", hp2)
	if r.code != 0 || !strings.Contains(r.stderr, want) {
		t.Errorf("run -d: %v; want the warning %q", r, want)
	}
	if r := e.run("run", "-d", "-q", "--name", "lo-bg", "-p", strconv.Itoa(freePort(t))+":8000", "--allow-host", "example.com", "--", "sleep", "30"); r.code != 0 || r.stderr != "" {
		t.Errorf("a loopback port warns of nothing: %v", r)
	}
}

func TestPublishedPortBadInput(t *testing.T) {
	e := newEnv(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	inUse := busy.Addr().(*net.TCPAddr).Port
	nw := []string{"--allow-host", "example.com"}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"a host port above 65535", append([]string{"-p", "70000:8000"}, nw...), `--publish "70000:8000": the host's port 70000 is not a port: use a number from 1 to 65535`},
		{"port 0 inside", append([]string{"-p", "8000:0"}, nw...), "the sandbox's port 0 is not a port"},
		{"UDP", append([]string{"-p", "5353:53/udp"}, nw...), "only TCP ports can be published"},
		{"a range", append([]string{"-p", "8000-8001:80-81"}, nw...), "publish one port per -p"},
		{"two entries for one address", append([]string{"-p", "9000:80", "-p", "9000:81"}, nw...), "both publish on 127.0.0.1:9000: give each its own HOST_PORT"},
		{"no network", []string{"-p", "8000:8000"}, "-p 8000:8000: a published port needs the sandbox's network, and this sandbox has none"},
		{"a port in use", append([]string{"--name", "busy", "-p", fmt.Sprintf("%d:8000", inUse)}, nw...),
			fmt.Sprintf("-p 127.0.0.1:%d:8000: 127.0.0.1:%d is already in use on this host: publish on another HOST_PORT", inUse, inUse)},
		{"an address this host has not", append([]string{"-p", "192.0.2.1:8000:8000"}, nw...), "192.0.2.1 is not an address of this host"},
	}
	for _, c := range cases {
		for _, detach := range []bool{false, true} {
			args := []string{"run", "-q"}
			if detach {
				args = append(args, "-d")
			}
			args = append(append(args, c.args...), "--", "true")
			r := e.run(args...)
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			if r.code != 125 || !strings.Contains(lines[0], c.want) || !strings.HasPrefix(lines[0], "airlock: ") || len(lines) > 2 {
				t.Errorf("%s (detach %v): airlock %v = %v; want exit 125 and one line with %q", c.name, detach, args[1:], r, c.want)
			}
			if ents := e.sandboxDirs(); len(ents) != 0 {
				t.Fatalf("%s: bad input left state behind: %v", c.name, ents)
			}
		}
	}
	// The name a refused start asked for is free: nothing was made.
	if r := e.run("run", "-q", "--name", "busy", "--", "true"); r.code != 0 {
		t.Errorf("the refused sandbox's name is taken: %v", r)
	}
	// A config file's entry is named with its file and line.
	cfgDir := filepath.Join(e.home, ".config", "airlock")
	os.MkdirAll(cfgDir, 0o755)
	os.WriteFile(filepath.Join(cfgDir, "config.yaml"), []byte("ports:\n  - \"8000:x\"\n"), 0o644)
	r := e.run("run", "-q", "--allow-host", "example.com", "--", "true")
	if r.code != 125 || !strings.Contains(r.stderr, "config.yaml:2") || !strings.Contains(r.stderr, "the sandbox's port x is not a port") {
		t.Errorf("a bad ports: entry: %v", r)
	}
}

func TestConfigPortsPublishAsTheFlagDoes(t *testing.T) {
	e := newEnv(t)
	hp := freePort(t)
	os.WriteFile(filepath.Join(e.ws, "index.html"), []byte("from config\n"), 0o644)
	cfgDir := filepath.Join(e.home, ".config", "airlock")
	os.MkdirAll(cfgDir, 0o755)
	os.WriteFile(filepath.Join(cfgDir, "config.yaml"), []byte(fmt.Sprintf("ports: [\"%d:8000\"]\nnetwork:\n  allow_hosts: [example.com]\n", hp)), 0o644)
	if r := e.run("config", "show"); !strings.Contains(r.stdout, fmt.Sprintf("%d:8000", hp)) {
		t.Errorf("config show lacks the port: %v", r)
	}
	if r := e.run("run", "-d", "-q", "--name", "cfg", "--", "python3", "-m", "http.server", "8000"); r.code != 0 {
		t.Fatalf("run -d: %v", r)
	}
	curlUntil(t, fmt.Sprintf("http://127.0.0.1:%d/index.html", hp), "from config", serveLimit())
}

// TestAHeadlessChromiumLoadsAPageThroughAPublishedPort: the page's own
// script fetches more from the sandbox, as a dev server's page does.
func TestAHeadlessChromiumLoadsAPageThroughAPublishedPort(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node on the host")
	}
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		if chromium, err = exec.LookPath("chromium"); err != nil {
			t.Skip("no chromium: apt-get install chromium (or set CHROMIUM)")
		}
	}
	pw, _ := filepath.Abs(filepath.Join("..", "..", "internal", "ui", "testdata", "browser"))
	if _, err := os.Stat(filepath.Join(pw, "node_modules", "playwright-core", "package.json")); err != nil {
		t.Skip("no playwright-core: npm ci --prefix internal/ui/testdata/browser")
	}
	e := newEnv(t)
	os.WriteFile(filepath.Join(e.ws, "index.html"), []byte(`<!doctype html><title>sandboxed app</title>
<p id="out">loading</p>
<script>fetch("/data.txt").then(r => r.text()).then(t => { document.getElementById("out").textContent = t.trim() })</script>
`), 0o644)
	os.WriteFile(filepath.Join(e.ws, "data.txt"), []byte("data from inside the sandbox\n"), 0o644)
	hp := freePort(t)
	if r := e.run(append(append([]string{"run", "-d", "-q", "--name", "app"}, serveFlags("", fmt.Sprintf("%d:8000", hp))...), "--", "python3", "-m", "http.server", "8000")...); r.code != 0 {
		t.Fatalf("run -d: %v", r)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/", hp)
	curlUntil(t, url+"index.html", "sandboxed app", serveLimit())
	script, _ := filepath.Abs(filepath.Join("testdata", "published-page.mjs"))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	home := t.TempDir()
	os.Chmod(home, 0o777)
	cmd.Env = append(os.Environ(), "PAGE_URL="+url, "PLAYWRIGHT_DIR="+pw, "CHROMIUM="+chromium, "HOME="+home)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "sandboxed app: data from inside the sandbox" {
		t.Errorf("the page read %q", got)
	}
	// Chromium's requests are the sandbox's inbound records.
	e.run("kill", "app")
	if n := len(inbound(t, e, "app")); n < 2 {
		t.Errorf("%d inbound records: want the page and its fetch at least", n)
	}
}
