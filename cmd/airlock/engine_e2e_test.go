//go:build linux

package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/control"
	"github.com/airlock-dev/airlock/internal/proto"
	"github.com/airlock-dev/airlock/internal/state"
	"github.com/airlock-dev/airlock/internal/term"
	"github.com/airlock-dev/airlock/internal/testutil"
)

// TestScratchDirsArePrivateAndLiveAsLongAsTheSandbox: --scratch (what the
// API calls a memory mount) is writable inside, starts empty every run and
// leaves nothing at that path on the host.
func TestScratchDirsArePrivateAndLiveAsLongAsTheSandbox(t *testing.T) {
	if testBackend() == "docker" {
		t.Skip("the docker backend has no binds at other paths yet")
	}
	e := newEnv(t)
	target := "/scratch-" + filepath.Base(e.ws)
	r := e.sh(`test -z "$(ls -A `+target+`)" && echo kept > `+target+`/f && cat `+target+`/f && echo done`, "--scratch", target)
	if r.code != 0 || r.stdout != "kept\ndone\n" {
		t.Fatalf("write in --scratch: %v", r)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatalf("%s exists on the host after the run: %v", target, err)
	}
	// A new sandbox gets an empty one: the file did not survive.
	if r := e.sh(`ls -A `+target+`; echo done`, "--scratch", target); r.code != 0 || r.stdout != "done\n" {
		t.Fatalf("second run's scratch dir: %v", r)
	}
	// Control: without --scratch the path is not writable (the host's root is read-only).
	if r := e.sh(`mkdir -p ` + target + ` 2>/dev/null && echo wrote; echo done`); r.code != 0 || r.stdout != "done\n" {
		t.Fatalf("without --scratch: %v", r)
	}
	if r := e.run("run", "--scratch", "rel/dir", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, "absolute path") {
		t.Fatalf("--scratch rel/dir = %v, want 125 and what to do", r)
	}
}

// TestARunsCommandIsAuditedBeforeItRunsAndItsFilesAreWatched: the main
// command, which goes to the sandbox with its start, is in the audit stream
// before anything it does (its file events), with its environment and its
// exit; the file watcher was in place before it ran.
func TestARunsCommandIsAuditedBeforeItRunsAndItsFilesAreWatched(t *testing.T) {
	e := newEnv(t)
	if r := e.run("run", "-q", "--name", "first", "--watch-files", "--", "sh", "-c", "echo $AIRLOCK_SANDBOX > first.txt; exit 4"); r.code != 4 {
		t.Fatalf("run: %v", r)
	}
	want := filepath.Join(e.ws, "first.txt")
	recs := auditRecords(t, e, "first")
	started, wrote, exited := -1, -1, -1
	for i, r := range recs {
		switch {
		case r.Kind == audit.KindExec && r.ExitCode == nil && r.Decision == "" && slices.Equal(r.Argv[:2], []string{"sh", "-c"}):
			started = i
		case r.Kind == audit.KindFile && r.Path == want && wrote < 0:
			wrote = i
		case r.Kind == audit.KindExec && r.ExitCode != nil && *r.ExitCode == 4 && r.Extra["pid"] != "" && r.Extra["pid"] != "0":
			exited = i
		}
	}
	// The exec record comes before anything the command does; its exit
	// record comes after the start, but the watcher reports files as it
	// reads them, so the write may be recorded after the exit.
	if started < 0 || wrote < started || exited < started {
		t.Fatalf("exec at %d, its file at %d, its exit at %d: want the exec record before the other two; records %+v", started, wrote, exited, recs)
	}
	b, err := os.ReadFile(want)
	if id := strings.TrimSpace(string(b)); err != nil || id == "" {
		t.Errorf("the command's environment had no AIRLOCK_SANDBOX (%q, %v)", b, err)
	}
}

// TestTheAuditStreamRecordsExecLifecycleAndFiles: every sandbox's events go
// into the one audit stream: lifecycle, each exec with argv and exit code,
// and with --watch-files each file created, written or deleted.
func TestTheAuditStreamRecordsExecLifecycleAndFiles(t *testing.T) {
	e := newEnv(t)
	for _, name := range []string{"watched", "unwatched"} {
		flags := []string{"run", "-d", "-q", "--name", name}
		if name == "watched" {
			flags = append(flags, "--watch-files")
		}
		if r := e.run(flags...); r.code != 0 {
			t.Fatalf("run -d: %v", r)
		}
		if r := e.run("exec", name, "--", "sh", "-c", "echo a > f-"+name+"; echo b >> f-"+name+"; rm f-"+name+"; exit 3"); r.code != 3 {
			t.Fatalf("exec: %v", r)
		}
	}
	want := filepath.Join(e.ws, "f-watched")
	var recs []audit.Record
	testutil.WaitFor(t, 5*time.Second, func() bool {
		recs = auditRecords(t, e, "watched")
		return slices.ContainsFunc(recs, func(r audit.Record) bool { return r.Kind == audit.KindFile && r.Path == want && r.Op == "delete" })
	})
	ops := map[string]bool{}
	var created, exited bool
	for _, r := range recs {
		switch {
		case r.Kind == audit.KindFile && r.Path == want:
			ops[r.Op] = true
		case r.Kind == audit.KindLifecycle && r.Op == audit.OpCreate:
			created = true
		case r.Kind == audit.KindExec && r.ExitCode != nil && *r.ExitCode == 3 && slices.Equal(r.Argv[:2], []string{"sh", "-c"}):
			exited = true
		}
	}
	if !ops["create"] || !ops["write"] || !ops["delete"] || !created || !exited {
		t.Fatalf("audit of the watched sandbox: file ops %v, lifecycle create %v, exec exit 3 %v; records %+v", ops, created, exited, recs)
	}
	// Control: without --watch-files the exec is recorded, no file is.
	for _, r := range auditRecords(t, e, "unwatched") {
		if r.Kind == audit.KindFile {
			t.Fatalf("a sandbox without --watch-files recorded a file: %+v", r)
		}
	}
	e.run("kill", "--all")
}

// TestOnlyTheRunsOwnCommandEndsItsSandbox: the guest ends a sandbox itself
// after the exec marked Last, which only the run's main command is; one a
// control client marks so runs like any other, and the sandbox stays.
func TestOnlyTheRunsOwnCommandEndsItsSandbox(t *testing.T) {
	e := newEnv(t)
	r := e.run("run", "-d", "-q")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || id == "" {
		t.Fatalf("run -d: %v", r)
	}
	defer e.run("kill", id)
	store, err := state.Open(e.state)
	if err != nil {
		t.Fatal(err)
	}
	ent, err := store.Resolve(id)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := control.Dial(ent.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	io := term.IO{Stdin: null, Stdout: null, Stderr: null}
	if code, err := cl.Exec(&proto.Exec{Argv: []string{"/bin/sh", "-c", "exit 3"}, Last: true}, io, nil); code != 3 || err != nil {
		t.Fatalf("exec marked Last: %d, %v; want 3", code, err)
	}
	time.Sleep(200 * time.Millisecond) // a guest that had ended would be gone by now
	if r := e.run("exec", id, "--", "echo", "still"); r.code != 0 || r.stdout != "still\n" {
		t.Fatalf("exec after it: %v", r)
	}
}
