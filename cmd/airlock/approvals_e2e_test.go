//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/approval"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/testutil"
)

// pendingIn waits for a request for subject to wait in some sandbox.
func pendingIn(t *testing.T, e *env, subject string) approval.Request {
	t.Helper()
	var got approval.Request
	testutil.WaitFor(t, 15*time.Second, func() bool {
		r := e.run("approvals", "--json")
		var rs []approval.Request
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rs) != nil {
			return false
		}
		for _, q := range rs {
			if q.Subject == subject {
				got = q
				return true
			}
		}
		return false
	})
	return got
}

// background runs airlock with args, returning a func that waits for it.
func (e *env) background(args ...string) func() result {
	c := e.cmd(args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Start(); err != nil {
		e.t.Fatal(err)
	}
	return func() result {
		err := c.Wait()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return result{code, out.String(), errb.String()}
	}
}

// TestAskWaitsForADecision: with --ask, a connection to a host no rule
// covers waits; approving it lets it through, denying refuses it, on both
// doors, and the audit log has the request and who decided.
func TestAskWaitsForADecision(t *testing.T) {
	u := testUpstream(t)
	eachMode(t, func(t *testing.T, mode string) {
		e := newEnv(t)
		name := "ask-" + mode
		if r := e.run(u.flags("-d", "--name", name, "--network-mode", mode, "--ask")...); r.code != 0 {
			t.Fatalf("run -d --ask: %v", r)
		}
		// Control first: nothing waits before anything asks.
		if r := e.run("approvals"); r.code != 0 || !strings.Contains(r.stdout, "nothing waits") {
			t.Fatalf("approvals with nothing pending: %v", r)
		}
		wait := e.background("exec", name, "--", "curl", "-sS", "--max-time", "30", "https://example.com/asked")
		req := pendingIn(t, e, "example.com")
		if !strings.HasPrefix(req.ID, req.Sandbox+"-") || req.Reason == "" {
			t.Errorf("request %+v: want an ID naming its sandbox and a reason", req)
		}
		if r := e.run("approve", req.ID); r.code != 0 {
			t.Fatalf("approve: %v", r)
		}
		if r := wait(); r.code != 0 || !strings.Contains(r.stdout, "echo") {
			t.Fatalf("curl after approve: %v", r)
		}
		// Once means once: the next connection asks again; deny refuses it.
		wait = e.background("exec", name, "--", "curl", "-sS", "--max-time", "30", "https://example.com/again")
		req2 := pendingIn(t, e, "example.com")
		if req2.ID == req.ID {
			t.Fatalf("the second request reused the decided ID %s", req.ID)
		}
		if r := e.run("deny", req2.ID); r.code != 0 {
			t.Fatalf("deny: %v", r)
		}
		if r := wait(); r.code == 0 {
			t.Fatalf("curl after deny succeeded: %v", r)
		}
		// Node's fetch (it ignores proxy variables, so the transparent door
		// only): a session approval lets this and later connections through.
		if node, err := exec.LookPath("node"); err == nil && mode == "transparent" {
			js := `fetch("https://example.com/node").then(r => r.text()).then(t => console.log("node", t.trim()), e => { console.error(e); process.exit(3) })`
			wait = e.background("exec", name, "--", node, "-e", js)
			req3 := pendingIn(t, e, "example.com")
			if r := e.run("approve", req3.ID, "--scope", "session"); r.code != 0 {
				t.Fatalf("approve --scope session: %v", r)
			}
			if r := wait(); r.code != 0 || !strings.Contains(r.stdout, "node echo") {
				t.Fatalf("node fetch after a session approval: %v", r)
			}
			if r := e.run("exec", name, "--", node, "-e", js); r.code != 0 || !strings.Contains(r.stdout, "node echo") {
				t.Fatalf("node fetch under the session's allow: %v", r)
			}
		}
		if !strings.Contains(u.received(t), "GET /asked") || strings.Contains(u.received(t), "GET /again") {
			t.Errorf("upstream saw %q: want /asked and not /again", u.received(t))
		}
		// Deciding again, or something unknown: one line, non-zero.
		if r := e.run("approve", req2.ID); r.code == 0 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("approving a decided request: %v", r)
		}
		if r := e.run("approve", "nope-1"); r.code == 0 || !strings.Contains(r.stderr, "no such request") {
			t.Errorf("approving an unknown request: %v", r)
		}
		var asked, allowed, denied bool
		for _, rec := range auditRecords(t, e, name) {
			if rec.Kind != audit.KindApproval {
				continue
			}
			switch {
			case rec.Decision == audit.Ask && rec.Subject == "example.com":
				asked = true
			case rec.Decision == audit.Allow && rec.Extra["by"] == "cli":
				allowed = true
			case rec.Decision == audit.Deny && rec.Extra["by"] == "cli":
				denied = true
			}
		}
		if !asked || !allowed || !denied {
			t.Errorf("approval records: asked %v, allowed %v, denied %v", asked, allowed, denied)
		}
		e.run("kill", name)
	})
}

// TestASavedDecisionHoldsInEverySandboxAndSurvivesARestart: a global
// allow given in one sandbox lets another supervisor's sandbox through at
// once, and a sandbox started afterwards; revoking it makes them ask again.
func TestASavedDecisionHoldsInEverySandboxAndSurvivesARestart(t *testing.T) {
	u := testUpstream(t)
	e := newEnv(t)
	for _, n := range []string{"one", "two"} {
		if r := e.run(u.flags("-d", "--name", n, "--ask")...); r.code != 0 {
			t.Fatalf("run -d %s: %v", n, r)
		}
	}
	waitOne := e.background("exec", "one", "--", "curl", "-sS", "--max-time", "30", "https://example.com/one")
	waitTwo := e.background("exec", "two", "--", "curl", "-sS", "--max-time", "30", "https://example.com/two")
	req := pendingIn(t, e, "example.com")
	// Both wait; one global decision answers both.
	testutil.WaitFor(t, 10*time.Second, func() bool {
		var rs []approval.Request
		json.Unmarshal([]byte(e.run("approvals", "--json").stdout), &rs)
		return len(rs) == 2
	})
	if r := e.run("approve", req.ID, "--scope", "global"); r.code != 0 {
		t.Fatalf("approve --scope global: %v", r)
	}
	for n, wait := range map[string]func() result{"one": waitOne, "two": waitTwo} {
		if r := wait(); r.code != 0 {
			t.Errorf("curl in %s after the global allow: %v", n, r)
		}
	}
	r := e.run("approvals", "--decisions", "--json")
	var rules []approval.Rule
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rules) != nil || len(rules) != 1 || rules[0].Host != "example.com" || !rules[0].Allow {
		t.Fatalf("saved decisions: %v", r)
	}
	// A sandbox started after it asks nothing.
	e.run("kill", "--all")
	if r := e.run(u.flags("--ask", "-d", "--name", "three")...); r.code != 0 {
		t.Fatalf("run three: %v", r)
	}
	if r := e.run("exec", "three", "--", "curl", "-sS", "--max-time", "20", "https://example.com/three"); r.code != 0 {
		t.Fatalf("curl in a later sandbox with the saved allow: %v", r)
	}
	// Revoked: the running sandbox asks again (and a deny it gets now wins).
	if r := e.run("revoke", rules[0].ID); r.code != 0 {
		t.Fatalf("revoke: %v", r)
	}
	// Every supervisor re-reads saved decisions within 50 ms (engine's
	// watchEvery); give it six times that.
	time.Sleep(300 * time.Millisecond)
	revoked := false
	for _, rec := range auditRecords(t, e, "three") {
		revoked = revoked || rec.Kind == audit.KindApproval && rec.Decision == "revoke" && rec.Extra["rule"] == rules[0].ID
	}
	if !revoked {
		t.Error("the running sandbox's audit log has no record of the revoke")
	}
	wait := e.background("exec", "three", "--", "curl", "-sS", "--max-time", "30", "https://example.com/after-revoke")
	req = pendingIn(t, e, "example.com")
	e.run("deny", req.ID)
	if r := wait(); r.code == 0 {
		t.Fatalf("curl after revoke and deny: %v", r)
	}
}

// TestAskNeedsSomeoneToAnswer: without a terminal, a foreground --ask run
// is refused before anything starts; a prepared decisions file answers
// instead (what it does not cover is denied at once); nobody answering in
// time is a deny recorded as a timeout.
func TestAskNeedsSomeoneToAnswer(t *testing.T) {
	u := testUpstream(t)
	e := newEnv(t)
	if r := e.run("run", "--ask", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, "--decisions") {
		t.Fatalf("--ask with nobody to ask: %v", r)
	}
	file := filepath.Join(e.home, "decisions.yaml")
	os.WriteFile(file, []byte("version: 1\ndecisions:\n  - {id: r-00000001, host: example.com, decision: allow, scope: global, created: 2026-01-01T00:00:00Z}\n"), 0o644)
	start := time.Now()
	r := e.run(u.flags("--ask", "--decisions", file, "--", "sh", "-c",
		`curl -sS --max-time 20 https://example.com/prepared && ! curl -fsS --max-time 20 http://other.test/ >/dev/null 2>&1 && echo END`)...)
	if r.code != 0 || !strings.Contains(r.stdout, "echo") || !strings.HasSuffix(r.stdout, "END\n") {
		t.Fatalf("run with a decisions file: %v", r)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("an uncovered host waited (%s) though nobody can answer", took)
	}
	if r := e.run(u.flags("-d", "--name", "slow", "--ask", "--ask-timeout", "1s")...); r.code != 0 {
		t.Fatalf("run -d --ask-timeout: %v", r)
	}
	if r := e.run("exec", "slow", "--", "curl", "-sS", "--max-time", "20", "https://example.com/late"); r.code == 0 {
		t.Fatalf("curl nobody approved succeeded: %v", r)
	}
	timedOut := false
	for _, rec := range auditRecords(t, e, "slow") {
		timedOut = timedOut || rec.Kind == audit.KindApproval && rec.Decision == audit.Deny && rec.Extra["by"] == "timeout"
	}
	if !timedOut {
		t.Error("no approval record of the timeout")
	}
}
