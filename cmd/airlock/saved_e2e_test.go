//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// saveDecisions replaces the user's saved decisions (the file airlock
// approve --scope global writes) with rules, atomically as airlock does,
// so a running supervisor's watch never reads half of it.
func saveDecisions(t *testing.T, e *env, rules ...string) {
	t.Helper()
	dir := filepath.Join(e.home, ".config", "airlock")
	os.MkdirAll(dir, 0o700)
	text := "version: 1\ndecisions:\n"
	for i, r := range rules {
		text += "  - {id: r-0000000" + string(rune('1'+i)) + ", " + r + ", created: 2026-01-01T00:00:00Z}\n"
	}
	tmp := filepath.Join(dir, ".decisions.yaml.tmp")
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "decisions.yaml")); err != nil {
		t.Fatal(err)
	}
}

// TestSavedDecisionsHoldInEveryRun: saved decisions are in force in every
// sandbox, not only in one that asks: a saved deny (global or the
// project's) wins over an allow from a flag and from a config file, a
// saved allow admits its host without --ask, and a deny saved while a
// sandbox runs takes effect in it at once. Both doors; judged by what the
// host's server received.
func TestSavedDecisionsHoldInEveryRun(t *testing.T) {
	u := testUpstream(t)
	eachMode(t, func(t *testing.T, mode string) {
		e := newEnv(t)
		get := func(path string) string {
			return "curl -fsS --max-time 20 https://example.com/" + path + "-" + mode
		}
		saw := func(path string) bool { return strings.Contains(u.received(t), "GET /"+path+"-"+mode+" ") }
		flags := func(extra ...string) []string {
			return u.flags(append([]string{"--network-mode", mode}, extra...)...)
		}

		// Control: a flag's allow lets the host through.
		if r := e.run(append(flags("--allow-host", "example.com", "--"), "sh", "-c", get("control"))...); r.code != 0 || !saw("control") {
			t.Fatalf("control run with --allow-host: %v", r)
		}
		// A saved global deny wins over the flag's allow, without --ask.
		saveDecisions(t, e, "host: example.com, decision: deny, scope: global")
		if r := e.run(append(flags("--allow-host", "example.com", "--"), "sh", "-c", get("global-deny"))...); r.code == 0 || saw("global-deny") {
			t.Errorf("a saved global deny against --allow-host: %v (server saw it: %v)", r, saw("global-deny"))
		}
		// ... and over a config file's allow; a wildcard deny too.
		os.WriteFile(filepath.Join(e.home, ".config", "airlock", "config.yaml"), []byte("network: {allow_hosts: [example.com]}\n"), 0o600)
		saveDecisions(t, e, "host: '*.example.com', decision: deny, scope: global")
		if r := e.run(append(flags("--"), "sh", "-c", get("config-deny"))...); r.code == 0 || saw("config-deny") {
			t.Errorf("a saved wildcard deny against the config's allow: %v", r)
		}
		// A run that reads no config file (how an MCP server's own sandbox
		// is started) obeys saved decisions too.
		if r := e.run(append(flags("--no-config-files", "--allow-host", "example.com", "--"), "sh", "-c", get("noconfig-deny"))...); r.code == 0 || saw("noconfig-deny") {
			t.Errorf("a saved deny in a run without config files: %v", r)
		}
		// A project's saved deny holds in that project's runs.
		saveDecisions(t, e, "host: example.com, decision: deny, scope: project, project: "+e.ws)
		if r := e.run(append(flags("--"), "sh", "-c", get("project-deny"))...); r.code == 0 || saw("project-deny") {
			t.Errorf("a saved project deny against the config's allow: %v", r)
		}
		os.Remove(filepath.Join(e.home, ".config", "airlock", "config.yaml"))

		// A saved allow admits the host with no allow anywhere and no --ask.
		saveDecisions(t, e, "host: example.com, decision: allow, scope: global")
		if r := e.run(append(flags("--"), "sh", "-c", get("saved-allow"))...); r.code != 0 || !saw("saved-allow") {
			t.Errorf("a saved allow without --ask: %v", r)
		}
		// ... but never past a deny from config.
		if r := e.run(append(flags("--deny-host", "example.com", "--"), "sh", "-c", get("flag-deny"))...); r.code == 0 || saw("flag-deny") {
			t.Errorf("a saved allow against --deny-host: %v", r)
		}

		// A deny saved while a sandbox without --ask runs holds in it at once.
		saveDecisions(t, e)
		name := "live-" + mode
		if r := e.run(flags("-d", "--name", name, "--allow-host", "example.com")...); r.code != 0 {
			t.Fatalf("run -d: %v", r)
		}
		if r := e.run("exec", name, "--", "sh", "-c", get("live-before")); r.code != 0 || !saw("live-before") {
			t.Fatalf("control in the running sandbox: %v", r)
		}
		saveDecisions(t, e, "host: example.com, decision: deny, scope: global")
		time.Sleep(300 * time.Millisecond) // every supervisor re-reads within 50 ms (engine's watchEvery)
		if r := e.run("exec", name, "--", "sh", "-c", get("live-after")); r.code == 0 || saw("live-after") {
			t.Errorf("a deny saved while the sandbox runs: %v", r)
		}
		e.run("kill", name)
	})
}
