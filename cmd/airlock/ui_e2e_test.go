//go:build linux

package main

import (
	"bufio"
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/testutil"
)

// TestTheWebPageApprovesARealSandboxedRequest: a sandboxed curl waits for
// a decision; a real headless Chromium opens airlock ui's page and clicks
// Allow; the curl succeeds. The sandbox cannot reach the page itself,
// through either door. A screenshot of the page is written.
func TestTheWebPageApprovesARealSandboxedRequest(t *testing.T) {
	u := testUpstream(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node: the browser test needs Node.js")
	}
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("no chromium: apt-get install chromium")
	}
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "internal", "ui", "testdata", "browser")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core", "package.json")); err != nil {
		t.Skip("no playwright-core: npm ci --prefix internal/ui/testdata/browser")
	}
	e := newEnv(t)
	eachMode(t, func(t *testing.T, mode string) {
		name := "web-" + mode
		if r := e.run(u.flags("-d", "--name", name, "--network-mode", mode, "--ask")...); r.code != 0 {
			t.Fatalf("run -d --ask: %v", r)
		}
		defer e.run("kill", name)
		ui := e.cmd("ui")
		out, _ := ui.StdoutPipe()
		ui.Stderr = os.Stderr
		if err := ui.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { ui.Process.Kill(); ui.Wait() }()
		first, err := bufio.NewReader(out).ReadString('\n')
		i := strings.Index(first, "http://")
		if err != nil || i < 0 {
			t.Fatalf("airlock ui printed %q, %v: want its URL", first, err)
		}
		pageURL := strings.TrimSpace(first[i:])
		pu, _ := url.Parse(pageURL)

		// The sandbox cannot reach the page: not on its own loopback, not
		// through the gateway (a host loopback address is never dialled).
		probe := `for u in http://` + pu.Host + `/ http://localhost:` + pu.Port() + `/; do
			if curl -sS --max-time 5 -o /dev/null -w '%{http_code}\n' --noproxy '*' "$u" 2>/dev/null | grep -qv '^000$'; then echo REACHED "$u"; fi
			if [ -n "$HTTP_PROXY" ] && curl -sS --max-time 5 -o /dev/null -w '%{http_code}\n' -x "$HTTP_PROXY" "$u" 2>/dev/null | grep -qv '^000$\|^403$\|^502$'; then echo REACHED via the proxy "$u"; fi
		done; echo END`
		// Host loopback is a refused class: the gateway never asks about it.
		if r := e.run("exec", name, "--", "sh", "-c", probe); r.code != 0 || strings.Contains(r.stdout, "REACHED") || !strings.HasSuffix(r.stdout, "END\n") {
			t.Fatalf("the sandbox probing the page: %v", r)
		}

		waitCurl := e.background("exec", name, "--", "curl", "-sS", "--max-time", "60", "https://example.com/from-the-page")
		req := pendingIn(t, e, "example.com")
		shots := os.Getenv("AIRLOCK_UI_SCREENSHOTS")
		if shots == "" {
			shots = t.TempDir()
		}
		shot := filepath.Join(shots, "airlock-ui-e2e-"+mode+".png")
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		b := exec.CommandContext(ctx, node, filepath.Join(dir, "approve.mjs"))
		b.Dir = dir
		b.Env = append(os.Environ(), "AIRLOCK_UI_URL="+pageURL, "AIRLOCK_UI_SCREENSHOT="+shot,
			"AIRLOCK_UI_MODE=approve", "AIRLOCK_UI_REQUEST="+req.ID, "CHROMIUM="+chromium)
		if outb, err := b.CombinedOutput(); err != nil {
			t.Fatalf("the browser: %v\n%s", err, outb)
		}
		if r := waitCurl(); r.code != 0 || !strings.Contains(r.stdout, "echo") {
			t.Fatalf("curl after Allow on the page: %v", r)
		}
		if st, err := os.Stat(shot); err != nil || st.Size() == 0 {
			t.Errorf("no screenshot at %s: %v", shot, err)
		}
		t.Logf("screenshot: %s", shot)
	})
}
