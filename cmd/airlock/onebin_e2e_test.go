//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The airlock binary `go build ./cmd/airlock` makes holds every command and
// every backend: help lists them all, and a run of another backend is this
// binary's own, failing with that backend's reason before anything is made.
func TestOneBinaryHoldsEveryCommandAndBackend(t *testing.T) {
	e := newEnv(t)
	if r := e.run("--help"); r.code != 0 || !strings.Contains(r.stdout, "agent") || !strings.Contains(r.stdout, "images") {
		t.Errorf("airlock --help does not list every command: %v", r)
	}
	if r := e.run("agent", "ls"); r.code != 0 || !strings.Contains(r.stdout, "claude") {
		t.Errorf("airlock agent ls: %v", r)
	}
	// What the lean front of an older airlock cached (the full binary, a
	// 0555 file in a 0700 dir of the state root) prune removes.
	old := filepath.Join(e.state, "full", "0123abcd", "airlock")
	if err := os.MkdirAll(filepath.Dir(old), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(old, []byte("#!/bin/sh\n"), 0o555); err != nil {
		t.Fatal(err)
	}
	if r := e.run("prune"); r.code != 0 || !strings.HasPrefix(r.stdout, "removed 0") {
		t.Errorf("airlock prune: %v", r)
	}
	if _, err := os.Stat(filepath.Join(e.state, "full")); !os.IsNotExist(err) {
		t.Errorf("airlock prune left the old front's cache: %v", err)
	}
	if r := e.run("frobnicate"); r.code != 125 || !strings.Contains(r.stderr, `unknown command "frobnicate"`) {
		t.Errorf("airlock frobnicate: %v", r)
	}
	c := exec.Command(airlockBin, "run", "--backend", "vm", "-q", "--", "true") // not e.cmd: its backend, whatever the re-run's
	c.Env, c.Dir = append(e.environ(), "AIRLOCK_DATA_DIR="+t.TempDir()), e.ws
	if r := e.runCmd(c); r.code != 125 || !strings.Contains(r.stderr, "vm image missing") {
		t.Errorf("airlock run --backend vm with no VM image: %v", r)
	}
	if ids, _ := filepath.Glob(filepath.Join(e.state, "sandboxes", "*")); len(ids) != 0 {
		t.Errorf("a failed vm run left %v", ids)
	}
	if m, _ := filepath.Glob(filepath.Join(e.state, "full", "*")); len(m) != 0 {
		t.Errorf("a copy of the binary was cached in the state dir: %v", m)
	}
}

// A run reads its config once and says each config warning once, whichever
// backend it needs (the lean front handed a vm, docker or MCP run on to the
// full binary, which read the config again and repeated every warning).
func TestAConfigWarningIsPrintedOnce(t *testing.T) {
	e := newEnv(t)
	e.write(".airlock.yaml", "version: 1\n") // never trusted: ignored, with a warning
	const warning = "is not trusted, so it was ignored"
	// The native run: the control, which was never handed on.
	if r := e.run("run", "--", "true"); r.code != 0 || strings.Count(r.stderr, warning) != 1 {
		t.Errorf("airlock run -- true: want the warning once:\n%v", r)
	}
	c := exec.Command(airlockBin, "run", "--backend", "vm", "--", "true") // not e.cmd: its backend, whatever the re-run's
	c.Env, c.Dir = append(e.environ(), "AIRLOCK_DATA_DIR="+t.TempDir()), e.ws
	if r := e.runCmd(c); r.code != 125 || strings.Count(r.stderr, warning) != 1 || !strings.Contains(r.stderr, "vm image missing") {
		t.Errorf("airlock run --backend vm: want the warning once, then the missing image:\n%v", r)
	}
	// -q says none.
	if r := e.run("run", "-q", "--", "true"); r.code != 0 || strings.Contains(r.stderr, warning) {
		t.Errorf("airlock run -q -- true: %v", r)
	}
}
