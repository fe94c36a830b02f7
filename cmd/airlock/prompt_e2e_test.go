//go:build linux

package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAskOnTheRunsOwnTerminal: a foreground --ask run without -t asks on
// its terminal, one key answering; a key allows (the upstream sees the
// request), another denies (it does not), and an answer from another
// surface takes the prompt down and wins.
func TestAskOnTheRunsOwnTerminal(t *testing.T) {
	u := testUpstream(t)
	e := newEnv(t)
	script := `for p in keyed denied elsewhere; do curl -sS --max-time 30 https://example.com/$p >/dev/null; echo "rc-$p=$?"; done`
	s := e.startPTY(24, 200, u.flags("--ask", "--name", "asker", "--", "sh", "-c", script)...)
	s.expect("sandbox asker asks for network example.com")
	s.expect("a allow once")
	s.send("a")
	s.expect("allowed example.com (once)")
	s.expect("rc-keyed=0")
	s.expect("asks for network example.com")
	s.send("x") // no answer: the prompt stays
	// What a terminal types by itself, answering a query the sandbox could
	// have written (a colour, holding 'g' for allow everywhere), and a
	// paste: neither answers.
	s.send("\x1b]10;rgb:gggg/gggg/gggg\x07")
	s.send("gg")
	time.Sleep(600 * time.Millisecond)
	pendingIn(t, e, "example.com")
	s.send("d")
	s.expect("denied example.com (once)")
	s.expect("rc-denied=")
	if strings.Contains(s.output(), "rc-denied=0") {
		t.Fatalf("the denied request succeeded: %q", s.output())
	}
	s.expect("asks for network example.com")
	req := pendingIn(t, e, "example.com")
	if r := e.run("approve", req.ID); r.code != 0 {
		t.Fatalf("approve from the CLI while the prompt shows: %v", r)
	}
	s.expect("answered by cli")
	s.expect("rc-elsewhere=0")
	if code := s.exit(); code != 0 {
		t.Fatalf("run: exit %d: %q", code, s.output())
	}
	got := u.received(t)
	if !strings.Contains(got, "GET /keyed") || !strings.Contains(got, "GET /elsewhere") || strings.Contains(got, "GET /denied") {
		t.Fatalf("the upstream saw %q: want /keyed and /elsewhere, not /denied", got)
	}
	// The decisions are audited with the surface that made them.
	if r := e.run("audit", "--json", "asker"); !strings.Contains(r.stdout, `"by":"terminal"`) || !strings.Contains(r.stdout, `"by":"cli"`) {
		t.Fatalf("audit: %v", r)
	}
}

// TestAskKeysOpenThePromptOverTheScreen: with -t the command owns the
// screen; the ask keys open the prompt on its last row, a key answers, and
// the keys typed after go to the command again.
func TestAskKeysOpenThePromptOverTheScreen(t *testing.T) {
	u := testUpstream(t)
	e := newEnv(t)
	script := `echo START; curl -sS --max-time 30 https://example.com/tty-keyed >/dev/null; echo "rc=$?"; read line; echo "typed:$line"
		curl -sS --max-time 30 https://example.com/tty-elsewhere >/dev/null; echo "rc2=$?"`
	s := e.startPTY(24, 200, u.flags("-t", "--ask", "--name", "tty", "--", "sh", "-c", script)...)
	s.expect("START")
	pendingIn(t, e, "example.com")
	if strings.Contains(s.output(), "asks for") {
		t.Fatalf("the prompt came over the screen before the keys: %q", s.output())
	}
	s.send("\x10\x01")
	s.expect("asks for network example.com")
	s.send("a")
	s.expect("rc=0")
	s.send("back-to-the-command\r")
	s.expect("typed:back-to-the-command")
	// Answered elsewhere while the prompt is up: it goes, the screen back.
	req := pendingIn(t, e, "example.com")
	s.send("\x10\x01")
	s.expect("asks for network example.com")
	if r := e.run("approve", req.ID); r.code != 0 {
		t.Fatalf("approve from the CLI while the prompt shows: %v", r)
	}
	s.expect("\x1b[2K\x1b8")
	s.expect("rc2=0")
	if code := s.exit(); code != 0 {
		t.Fatalf("run -t: exit %d: %q", code, s.output())
	}
	if !strings.Contains(u.received(t), "GET /tty-keyed") || !strings.Contains(u.received(t), "GET /tty-elsewhere") {
		t.Fatalf("the upstream saw %q", u.received(t))
	}
	// The screen is given back: the status row is cleared and the cursor
	// restored after the prompt.
	out := s.output()
	if i := strings.Index(out, "asks for"); i < 0 || !strings.Contains(out[i:], "\x1b[2K\x1b8") {
		t.Fatalf("no restore after the prompt: %q", out)
	}
}

// TestThePromptShowsEscapesHarmlessly: a command line the sandbox chose,
// holding terminal escapes, is shown escaped on the prompt; denied, it
// never runs on the host.
func TestThePromptShowsEscapesHarmlessly(t *testing.T) {
	if testBackend() == "docker" {
		t.Skip("hostexec's binary is not in the test image")
	}
	e := newEnv(t)
	e.writeConfig("version: 1\nhostexec:\n  ask: ['^touch ']\n")
	witness := filepath.Join(e.ws, "witness")
	script := `hostexec touch "` + witness + `$(printf 'evil\033[2J\033]0;pwned\007')"; echo "rc=$?"`
	s := e.startPTY(24, 200, "run", "-q", "--", "sh", "-c", script)
	s.expect("asks for hostexec touch")
	s.send("d")
	s.expect("rc=")
	s.exit()
	// What airlock wrote: the prompt and its outcome (the sandbox's own
	// hostexec client repeats the command on the sandbox's stderr after).
	out := s.output()
	if i := strings.Index(out, "airlock hostexec:"); i >= 0 {
		out = out[:i]
	}
	if strings.Contains(out, "\x1b[2J") || strings.Contains(out, "\x1b]0;") || strings.Contains(out, "\a") {
		t.Fatalf("an escape from the sandbox reached the terminal: %q", out)
	}
	if !strings.Contains(out, "evil?[2J?]0;pwned?") {
		t.Fatalf("the command is not shown escaped: %q", out)
	}
	if ents, _ := filepath.Glob(witness + "*"); len(ents) != 0 {
		t.Fatalf("the denied host command ran: %v", ents)
	}
}
