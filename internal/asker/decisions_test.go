package asker

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const oneDecision = "version: 1\ndecisions:\n  - {id: r-00000001, host: example.com, decision: allow, scope: global, created: 2026-01-01T00:00:00Z}\n"

// TestADecisionsFileTheSandboxCouldWriteIsRefused: a prepared decisions
// file inside the workspace (or a --rw path), or reached through a link
// into it, is refused: one run could write the next run's answers. A FIFO
// or a device there is refused without blocking. The control: the same
// file outside is read.
func TestADecisionsFileTheSandboxCouldWriteIsRefused(t *testing.T) {
	T, _ := filepath.EvalSymlinks(t.TempDir())
	ws, rw, outside := filepath.Join(T, "ws"), filepath.Join(T, "rw"), filepath.Join(T, "outside")
	for _, d := range []string{ws, rw, outside} {
		os.MkdirAll(d, 0o755)
	}
	writable := []string{ws, rw}
	for _, p := range []string{filepath.Join(ws, "d.yaml"), filepath.Join(rw, "d.yaml"), filepath.Join(outside, "d.yaml")} {
		os.WriteFile(p, []byte(oneDecision), 0o644)
	}
	os.Symlink(filepath.Join(ws, "d.yaml"), filepath.Join(outside, "link.yaml"))
	syscall.Mkfifo(filepath.Join(outside, "fifo.yaml"), 0o644)

	for name, tc := range map[string]struct{ path, want string }{
		"in the workspace":            {filepath.Join(ws, "d.yaml"), "which the sandbox can write"},
		"in a --rw path":              {filepath.Join(rw, "d.yaml"), "which the sandbox can write"},
		"a link from outside into it": {filepath.Join(outside, "link.yaml"), "which the sandbox can write"},
		"a FIFO":                      {filepath.Join(outside, "fifo.yaml"), "not a regular file"},
		"a device":                    {"/dev/zero", "not a regular file"},
	} {
		done := make(chan error, 1)
		go func() {
			_, err := readDecisions(tc.path, writable)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: readDecisions = %v, want an error with %q", name, err, tc.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: readDecisions blocked", name)
		}
	}
	rules, err := readDecisions(filepath.Join(outside, "d.yaml"), writable)
	if err != nil || len(rules) != 1 || rules[0].Host != "example.com" {
		t.Errorf("the control outside = %+v, %v", rules, err)
	}
}
