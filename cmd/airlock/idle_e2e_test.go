//go:build linux

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/testutil"
)

// --idle-timeout stops a detached sandbox nothing uses, and says why in
// its audit log; one whose exec runs past the limit is kept until the exec
// has ended and the limit has passed again (the positive control).
func TestIdleTimeoutStopsAnUnusedSandbox(t *testing.T) {
	e := newEnv(t)
	if r := e.run("run", "-d", "-q", "--name", "idle", "--idle-timeout", "2s"); r.code != 0 {
		t.Fatalf("run -d: %v", r)
	}
	if r := e.run("run", "-d", "-q", "--name", "busy", "--idle-timeout", "2s"); r.code != 0 {
		t.Fatalf("run -d: %v", r)
	}
	start := time.Now()
	done := make(chan result, 1)
	go func() { done <- e.run("exec", "busy", "--", "sleep", "5") }()
	testutil.WaitFor(t, 20*time.Second, func() bool { return !strings.Contains(e.run("ls", "--running").stdout, " idle ") })
	if took := time.Since(start); took < time.Second {
		t.Errorf("the idle sandbox stopped after %v, before its 2s", took)
	}
	if !strings.Contains(e.run("ls", "--running").stdout, " busy ") {
		t.Fatalf("the sandbox with an exec running was stopped: %s", e.run("ls").stdout)
	}
	if r := <-done; r.code != 0 {
		t.Fatalf("the exec into the busy sandbox: %v", r)
	}
	testutil.WaitFor(t, 20*time.Second, func() bool { return !strings.Contains(e.run("ls", "--running").stdout, " busy ") })
	if took := time.Since(start); took < 6*time.Second {
		t.Errorf("the busy sandbox stopped %v after its start: before its exec ended plus the limit", took)
	}
	au := e.run("audit", "--json", "idle")
	if !strings.Contains(au.stdout, "idle for 2s (--idle-timeout") {
		t.Errorf("the audit log does not say why the sandbox stopped:\n%s", au.stdout)
	}
}

// limits.max_sandboxes refuses a start beyond it with the list of what
// runs (exit 125); below it, a start succeeds (the positive control).
func TestMaxSandboxesRefusesAStartBeyondIt(t *testing.T) {
	e := newEnv(t)
	e.writeConfig("version: 1\nlimits:\n  max_sandboxes: 2\n")
	for _, n := range []string{"one", "two"} {
		if r := e.run("run", "-d", "-q", "--name", n); r.code != 0 {
			t.Fatalf("start %s under the cap: %v", n, r)
		}
	}
	defer e.run("kill", "--all")
	r := e.run("run", "-q", "--", "echo", "started")
	if first, _, _ := strings.Cut(r.stderr, "\n"); r.code != 125 || !strings.Contains(first, "limits.max_sandboxes is 2") ||
		!strings.Contains(first, "(one)") || !strings.Contains(first, "(two)") || strings.Contains(r.stdout, "started") {
		t.Errorf("a third start = %v; want exit 125 listing one and two", r)
	}
	e.run("kill", "two")
	if r := e.run("run", "-q", "--", "echo", "started"); r.code != 0 || r.stdout != "started\n" {
		t.Errorf("a start back under the cap = %v", r)
	}
}
