package ui

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/approval"
)

// browser runs testdata/browser/approve.mjs in mode against url: a real
// headless Chromium driven by Playwright. Each line the script prints is
// passed to step, which may act on it (stop the server, add a request). It
// returns the screenshot's path.
func browser(t *testing.T, mode, url, id string, step func(string)) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node: the browser test needs Node.js")
	}
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		if chromium, err = exec.LookPath("chromium"); err != nil {
			t.Skip("no chromium: apt-get install chromium (or set CHROMIUM)")
		}
	}
	dir, _ := filepath.Abs(filepath.Join("testdata", "browser"))
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core", "package.json")); err != nil {
		t.Skip("no playwright-core: npm ci --prefix internal/ui/testdata/browser")
	}
	shots := os.Getenv("AIRLOCK_UI_SCREENSHOTS") // keep them there
	if shots == "" {
		shots = t.TempDir()
	}
	shot := filepath.Join(shots, "airlock-ui-"+mode+".png")
	os.Remove(shot)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(dir, "approve.mjs"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "AIRLOCK_UI_URL="+url, "AIRLOCK_UI_SCREENSHOT="+shot,
		"AIRLOCK_UI_MODE="+mode, "AIRLOCK_UI_REQUEST="+id, "CHROMIUM="+chromium)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	var steps []string
	for sc.Scan() {
		steps = append(steps, sc.Text())
		if step != nil {
			step(sc.Text())
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("approve.mjs (%s): %v after steps %q\n%s", mode, err, steps, stderr.String())
	}
	if b, err := os.ReadFile(shot); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("no screenshot at %s: %v", shot, err)
	}
	t.Logf("steps %q; screenshot %s", steps, shot)
	return shot
}

func TestBrowserApprove(t *testing.T) {
	h := newFakeHub(request("sb1-1", "api.example.com", 50*time.Second))
	s := serve(t, h)
	browser(t, "approve", s.URL(), "sb1-1", nil)
	want := decided{"sb1-1", approval.Decision{Allow: true, Scope: approval.Once, By: "ui"}}
	if got := h.decided(); len(got) != 1 || got[0] != want {
		t.Fatalf("decisions %+v, want exactly %+v", got, want)
	}
}

func TestBrowserUndoSavedDecision(t *testing.T) {
	h := newFakeHub(request("sb1-2", "api.example.com", time.Minute))
	s := serve(t, h)
	browser(t, "undo", s.URL(), "sb1-2", nil)
	want := decided{"sb1-2", approval.Decision{Allow: true, Scope: approval.Project, Wildcard: true, By: "ui"}}
	if got := h.decided(); len(got) != 1 || got[0] != want {
		t.Fatalf("decisions %+v, want exactly %+v", got, want)
	}
	if rs, _ := h.Rules(context.Background()); len(rs) != 0 {
		t.Fatalf("rules after Undo: %+v", rs)
	}
}

func TestBrowserWrongToken(t *testing.T) {
	h := newFakeHub(request("sb1-1", "api.example.com", time.Minute))
	s := serve(t, h)
	browser(t, "bad-token", strings.Replace(s.URL(), "token=", "token=x", 1), "", nil)
	if got := h.decided(); len(got) != 0 {
		t.Fatalf("decisions %+v", got)
	}
}

func TestBrowserBannerAndReconnect(t *testing.T) {
	h := newFakeHub()
	s, err := New(h, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	browser(t, "banner", s.URL(), "sb1-7", func(step string) {
		switch step {
		case "connected": // end the stream; a request comes while the page is away
			h.drop()
			h.add(request("sb1-7", "late.example.com", time.Minute))
		case "reconnected":
			stop()
		}
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
