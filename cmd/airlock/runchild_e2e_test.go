//go:build linux

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/childspec"
)

// TestASpecOnADescriptorRunsAsFlagsWould: the way airlock starts a host
// command's or an MCP server's sandbox. The spec's workspace is writable,
// its workdir is the command's, its hidden path is hidden; a spec that
// fails the run's checks stops with 125 and names the setting; flags beside
// --spec-fd are refused.
func TestASpecOnADescriptorRunsAsFlagsWould(t *testing.T) {
	if testBackend() != "" {
		t.Skip("the spec on a descriptor is read before any backend: the native run covers it, and the re-run's --backend flag would be refused beside it")
	}
	e := newEnv(t)
	sub := filepath.Join(e.ws, "sub")
	os.MkdirAll(sub, 0o755)
	secret := filepath.Join(e.ws, "secret.txt")
	os.WriteFile(secret, []byte("canary"), 0o644)
	child := func(s childspec.Spec, extra ...string) result {
		t.Helper()
		c, err := childspec.Command(context.Background(), airlockBin, s)
		if err != nil {
			t.Fatal(err)
		}
		defer childspec.Close(c)
		c.Args = append(c.Args, extra...)
		c.Env, c.Dir = e.environ(), e.ws
		return e.runCmd(c)
	}
	s := childspec.New("sh", "-c", `pwd; echo made >"$1"/made; echo "[$(cat "$2" 2>/dev/null)]"`, "sh", e.ws, secret)
	s.Config.Workspace.Path, s.Workdir, s.Hide = e.ws, sub, []string{secret}
	if r := child(s); r.code != 0 || r.stdout != sub+"\n[]\n" {
		t.Fatalf("a spec on fd 3: %v, want %s and nothing of the hidden file", r, sub)
	}
	if b, err := os.ReadFile(filepath.Join(e.ws, "made")); err != nil || string(b) != "made\n" {
		t.Errorf("the workspace write did not reach the host: %q, %v", b, err)
	}
	shown := s
	shown.Hide = nil
	if r := child(shown); r.code != 0 || !strings.Contains(r.stdout, "[canary]") {
		t.Errorf("the control: without hide the file shows: %v", r)
	}
	// The same checks as a run's: a relative workdir, a bad mode.
	bad := s
	bad.Workdir = "rel"
	if r := child(bad); r.code != 125 || !strings.Contains(r.stderr, "--workdir \"rel\"") {
		t.Errorf("a relative workdir: %v, want 125 naming it", r)
	}
	bad = s
	bad.Config.Workspace.AutoApply = true
	if r := child(bad); r.code != 125 || !strings.Contains(r.stderr, "workspace.auto_apply") {
		t.Errorf("auto_apply in bind mode: %v, want 125 naming workspace.auto_apply", r)
	}
	if r := child(s, "--allow-host", "example.com"); r.code != 125 || !strings.Contains(r.stderr, "--spec-fd takes the whole spec") {
		t.Errorf("a flag beside --spec-fd: %v, want 125", r)
	}
	if r := e.run("run", "--spec-fd", "9"); r.code != 125 || !strings.Contains(r.stderr, "childspec") {
		t.Errorf("a descriptor that holds nothing: %v, want 125", r)
	}
}
