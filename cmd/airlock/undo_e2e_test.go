//go:build linux

package main

// End-to-end tests of airlock undo: a bind run's edits, deletes, new files
// and mode changes are put back from the undo store; a file changed again
// since the run is refused (listed) and keeps its new content; the store's
// bound is warned about; undo never writes through a link planted since.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/testutil"
)

// lastRun is the newest run airlock undo lists.
func lastRun(t *testing.T, e *env) string {
	t.Helper()
	r := e.run("undo")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) < 2 || !strings.HasPrefix(lines[0], "RUN") {
		t.Fatalf("airlock undo (the list): %v", r)
	}
	return strings.Fields(lines[1])[0]
}

func writeFile(t *testing.T, p, body string, mode os.FileMode) {
	t.Helper()
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, mode)
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

// TestUndoRestoresEditsAndDeletes: after undo the workspace is as it was
// before the run: contents, modes, deleted files and directories back,
// created files gone; ls -a shows the run as undoable, then undone.
func TestUndoRestoresEditsAndDeletes(t *testing.T) {
	e := newEnv(t)
	writeFile(t, filepath.Join(e.ws, "run.sh"), "#!/bin/sh\necho original\n", 0o755)
	writeFile(t, filepath.Join(e.ws, "notes.txt"), "keep me\n", 0o600)
	writeFile(t, filepath.Join(e.ws, "sub/deep/data.txt"), strings.Repeat("data\n", 1000), 0o644)
	r := e.sh(`echo 'rm -rf /' > run.sh && chmod 644 run.sh && chmod 644 notes.txt && rm -r sub && echo new > new.txt`)
	if r.code != 0 {
		t.Fatalf("run: %v", r)
	}
	id := lastRun(t, e)
	if ls := e.run("ls", "-a"); !strings.Contains(ls.stdout, id) || !strings.Contains(ls.stdout, " yes ") {
		t.Fatalf("ls -a does not show run %s as undoable:\n%s", id, ls.stdout)
	}
	if ls := e.run("ls"); strings.Contains(ls.stdout, id) {
		t.Errorf("ls without -a lists the ended run:\n%s", ls.stdout)
	}
	u := e.run("undo", id)
	if u.code != 0 {
		t.Fatalf("undo %s: %v", id, u)
	}
	for p, want := range map[string]string{"run.sh": "#!/bin/sh\necho original\n", "notes.txt": "keep me\n", "sub/deep/data.txt": strings.Repeat("data\n", 1000)} {
		if got := readFile(t, filepath.Join(e.ws, p)); got != want {
			t.Errorf("%s after undo: %.40q, want %.40q", p, got, want)
		}
	}
	for p, want := range map[string]os.FileMode{"run.sh": 0o755, "notes.txt": 0o600} {
		if st, err := os.Stat(filepath.Join(e.ws, p)); err != nil || st.Mode().Perm() != want {
			t.Errorf("%s's mode after undo: %v %v, want %v", p, st.Mode().Perm(), err, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(e.ws, "new.txt")); err == nil {
		t.Errorf("new.txt, made by the run, is still there")
	}
	if ls := e.run("ls", "-a"); !strings.Contains(ls.stdout, "undone") {
		t.Errorf("ls -a does not show the run as undone:\n%s", ls.stdout)
	}
	if again := e.run("undo", id); again.code != 125 || !strings.Contains(again.stderr, "already undone") {
		t.Errorf("a second undo: %v", again)
	}
}

// TestUndoRefusesFilesChangedSince: a file changed on the host after the
// run keeps its new content and is listed; the others are restored.
func TestUndoRefusesFilesChangedSince(t *testing.T) {
	e := newEnv(t)
	writeFile(t, filepath.Join(e.ws, "a.txt"), "a before\n", 0o644)
	writeFile(t, filepath.Join(e.ws, "b.txt"), "b before\n", 0o644)
	writeFile(t, filepath.Join(e.ws, "c.txt"), "c before\n", 0o644)
	if r := e.sh(`echo a run > a.txt; echo b run > b.txt; rm c.txt`); r.code != 0 {
		t.Fatalf("run: %v", r)
	}
	id := lastRun(t, e)
	writeFile(t, filepath.Join(e.ws, "b.txt"), "b edited by hand\n", 0o644)
	writeFile(t, filepath.Join(e.ws, "c.txt"), "c made again\n", 0o644)
	u := e.run("undo", id)
	if u.code != 1 || !strings.Contains(u.stderr, "b.txt") || !strings.Contains(u.stderr, "c.txt") || !strings.Contains(u.stderr, "changed since the run") || strings.Contains(u.stderr, "a.txt") {
		t.Fatalf("undo with b.txt and c.txt changed since: %v, want exit 1 listing them", u)
	}
	for p, want := range map[string]string{"a.txt": "a before\n", "b.txt": "b edited by hand\n", "c.txt": "c made again\n"} {
		if got := readFile(t, filepath.Join(e.ws, p)); got != want {
			t.Errorf("%s after undo: %q, want %q", p, got, want)
		}
	}
}

// TestUndoNeverWritesThroughALink: a directory the run deleted, replaced
// on the host by a link out of the workspace, is not written through.
func TestUndoNeverWritesThroughALink(t *testing.T) {
	e := newEnv(t)
	writeFile(t, filepath.Join(e.ws, "dir/f.txt"), "f\n", 0o644)
	if r := e.sh(`rm -r dir`); r.code != 0 {
		t.Fatalf("run: %v", r)
	}
	id := lastRun(t, e)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(e.ws, "dir")); err != nil {
		t.Fatal(err)
	}
	u := e.run("undo", id)
	if u.code == 0 {
		t.Errorf("undo through a link succeeded: %v", u)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("undo wrote through the link into %s: %v", outside, ents)
	}
	// The positive control: with the link gone, the same undo restores it.
	os.Remove(filepath.Join(e.ws, "dir"))
	if u := e.run("undo", id); u.code != 0 || readFile(t, filepath.Join(e.ws, "dir/f.txt")) != "f\n" {
		t.Fatalf("undo once the link is gone: %v", u)
	}
}

// TestUndoWarnsOverTheStoreBound: a run that deletes more than the store
// keeps (workspace.undo_size) is warned about at exit, and undo refuses
// the file it could not keep while restoring the rest.
func TestUndoWarnsOverTheStoreBound(t *testing.T) {
	e := newEnv(t)
	writeFile(t, filepath.Join(e.home, ".config/airlock/config.yaml"), "workspace:\n  undo_size: 4096\n", 0o644)
	writeFile(t, filepath.Join(e.ws, "big.bin"), strings.Repeat("x", 64<<10), 0o644)
	writeFile(t, filepath.Join(e.ws, "small.txt"), "small\n", 0o644)
	r := e.run("run", "--", "sh", "-c", "rm big.bin small.txt")
	if r.code != 0 || !strings.Contains(r.stderr, "more than the undo store keeps") {
		t.Fatalf("a run over the undo bound: %v, want a warning", r)
	}
	u := e.run("undo", lastRun(t, e))
	if u.code != 1 || !strings.Contains(u.stderr, "big.bin") || !strings.Contains(u.stderr, "not kept") {
		t.Fatalf("undo of a run over the bound: %v", u)
	}
	if readFile(t, filepath.Join(e.ws, "small.txt")) != "small\n" {
		t.Errorf("small.txt was not restored")
	}
}

// TestUndoBadInput: undo of a run with no record is one line and exit 125.
func TestUndoBadInput(t *testing.T) {
	e := newEnv(t)
	for _, id := range []string{"0123456789ab", "../../etc"} {
		r := e.run("undo", id)
		if r.code != 125 || !strings.Contains(r.stderr, "no record of that run") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("undo %s: %v, want one line and exit 125", id, r)
		}
	}
}

// TestUndoByNameOnceTheSandboxEnded: a named sandbox is undone by its
// name; while it runs, undo says to wait (one line, 125) and changes
// nothing.
func TestUndoByNameOnceTheSandboxEnded(t *testing.T) {
	e := newEnv(t)
	writeFile(t, filepath.Join(e.ws, "a.txt"), "before\n", 0o644)
	if r := e.run("run", "-d", "--name", "job", "--", "sh", "-c", "echo after > a.txt; sleep 2"); r.code != 0 {
		t.Fatalf("run -d: %v", r)
	}
	testutil.WaitFor(t, 10*time.Second, func() bool { return readFile(t, filepath.Join(e.ws, "a.txt")) == "after\n" })
	if r := e.run("undo", "job"); r.code != 125 || !strings.Contains(r.stderr, "still running") {
		t.Fatalf("undo of a running sandbox: %v", r)
	}
	testutil.WaitFor(t, 30*time.Second, func() bool { return strings.Contains(e.run("ls").stdout, "exited (0)") })
	if r := e.run("undo", "job"); r.code != 0 || readFile(t, filepath.Join(e.ws, "a.txt")) != "before\n" {
		t.Fatalf("undo job once it ended: %v", r)
	}
}
