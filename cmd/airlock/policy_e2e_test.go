//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/approval"
	"github.com/airlock-dev/airlock/internal/config"
)

// A run is refused some hosts; policy suggest turns its audit log into the
// config that would have allowed them (a wildcard where two names share a
// registrable domain, nothing a deny rule forbids); --write puts it in the
// project's file in the config dir, and the same run then reaches them, as
// the upstream's own request log shows.
func TestPolicySuggestAllowsWhatARunWasRefused(t *testing.T) {
	u := testUpstream(t)
	eachMode(t, func(t *testing.T, mode string) { policySuggestRoundTrip(t, u, mode) })
}

func policySuggestRoundTrip(t *testing.T, u *upstream, mode string) {
	e := newEnv(t)
	e.writeConfig("version: 1\nnetwork:\n  deny_hosts: [denied.example.com]\n")
	ip := strings.Split(u.addr, ":")[0]
	tag := fmt.Sprintf("suggest%d", time.Now().UnixNano())
	// example.com is allowed, for GETs under /TAG/ only: a POST there is
	// refused by its endpoint rules.
	flags := u.flags("--network-mode", mode, "--allow-host", "example.com", "--allow-endpoint", "example.com GET /"+tag+"/*")
	for _, h := range []string{"a.example.com", "b.example.com", "denied.example.com", "api.other.test"} {
		flags = append(flags, "--add-host", h+":"+ip)
	}
	script := func(run string) string {
		return fmt.Sprintf(`for h in example.com a.example.com b.example.com api.other.test denied.example.com; do
			echo "$h $(curl -s -o /dev/null -w '%%{http_code}' http://$h/%s/%s-$h)"
		done
		curl -s -o /dev/null -X POST http://example.com/%s/post`, tag, run, tag)
	}
	r := e.run(append(flags, "--keep", "--name", "try", "--", "sh", "-c", script("first"))...)
	got := u.received(t)
	if !strings.Contains(got, "GET /"+tag+"/first-example.com") {
		t.Fatalf("the allowed host (the positive control) was not reached: %v\nupstream saw:\n%s", r, got)
	}
	for _, h := range []string{"a.example.com", "b.example.com", "api.other.test", "denied.example.com"} {
		if strings.Contains(got, tag+"/first-"+h) {
			t.Fatalf("%s was reached before anything allowed it", h)
		}
	}
	if strings.Contains(got, "POST /"+tag+"/post") {
		t.Fatalf("the POST its endpoint rules refuse reached example.com")
	}

	r = e.run("policy", "suggest", "try")
	for _, want := range []string{
		"network:\n  allow_hosts:\n",
		"    - api.other.test\n",
		"for 2 names (a.example.com, b.example.com)",
		"    - '*.example.com'\n",
		"  endpoints:\n    # 1 record: http deny ×1; the config files have no endpoint rules for example.com (the run's came from flags), so this one alone would limit it to what is listed\n    - example.com POST /" + tag + "/post\n",
		"denied.example.com: deny rule denied.example.com (~/.config/airlock/config.yaml:3) forbids it, so an allow would be overridden",
	} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("policy suggest lacks %q: %v", want, r)
		}
	}
	if strings.Contains(r.stdout, "- denied.example.com") {
		t.Errorf("suggested the denied host: %s", r.stdout)
	}

	pf := config.ProjectFile(filepath.Join(e.home, ".config", "airlock"), e.ws)
	before, _ := os.ReadDir(e.ws)
	// No terminal to ask on and no --yes: nothing is written.
	if r := e.run("policy", "suggest", "try", "--write"); r.code != 125 || !strings.Contains(r.stderr, "--yes") || !strings.Contains(r.stderr, "+     - '*.example.com'") {
		t.Errorf("--write without a terminal = %v, want exit 125, the diff shown, and a pointer to --yes", r)
	}
	if _, err := os.Stat(pf); err == nil {
		t.Fatalf("--write without a yes wrote %s", pf)
	}
	if r := e.run("policy", "suggest", "try", "--write", "--yes"); r.code != 0 || !strings.Contains(r.stderr, "added 3 to") {
		t.Fatalf("--write --yes = %v", r)
	}
	data, err := os.ReadFile(pf)
	if err != nil || !strings.Contains(string(data), "'*.example.com'") || !strings.Contains(string(data), "api.other.test") {
		t.Fatalf("project file %s = %q, %v", pf, data, err)
	}
	if after, _ := os.ReadDir(e.ws); len(after) != len(before) {
		t.Errorf("the workspace changed: %v, was %v", after, before)
	}
	if r := e.run("policy", "suggest", "try", "--write", "--yes"); r.code != 0 || !strings.Contains(r.stdout, "a.example.com: allowed now by *.example.com") || !strings.Contains(r.stderr, "nothing to write") {
		t.Errorf("a second --write = %v, want nothing added: it is allowed now", r)
	}

	r = e.run(append(flags, "--", "sh", "-c", script("second"))...)
	got = u.received(t)
	for _, h := range []string{"a.example.com", "b.example.com", "api.other.test"} {
		if !strings.Contains(got, "/"+tag+"/second-"+h) {
			t.Errorf("%s was not reached after --write: %v", h, r)
		}
	}
	if !strings.Contains(got, "POST /"+tag+"/post") {
		t.Errorf("the POST was not allowed after --write: %v", r)
	}
	if strings.Contains(got, tag+"/second-denied.example.com") {
		t.Errorf("the denied host was reached: the deny rule must still win")
	}
}

func TestPolicySuggestBadInput(t *testing.T) {
	e := newEnv(t)
	// A run without an allow rule has no gateway: nothing it tried was seen.
	if r := e.run("run", "-q", "--keep", "--name", "nonet", "--", "true"); r.code != 0 {
		t.Fatalf("run: %v", r)
	}
	if r := e.run("policy", "suggest", "nonet"); r.code != 0 || !strings.Contains(r.stdout, "Nothing to suggest") || !strings.Contains(r.stdout, "no network at all") {
		t.Errorf("policy suggest of a run without network = %v, want it to say the run had none", r)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"policy", "suggest"}, "sandbox ID or name"},
		{[]string{"policy", "suggest", "nosuch"}, "airlock ls lists sandboxes"},
		{[]string{"policy", "suggest", "x", "--yes"}, "--yes goes with --write"},
	} {
		r := e.run(c.args...)
		if first, _, _ := strings.Cut(r.stderr, "\n"); r.code != 125 || !strings.Contains(first, c.want) {
			t.Errorf("airlock %v = %v, want exit 125 and a first line with %q", c.args, r, c.want)
		}
	}
}

// Host commands: one no rule matched, one a person approved, one auto_deny
// refused. The suggestion asks for the first (ask: a person still says
// yes), lets the second run unattended, and leaves the third out; after
// --write, the approved command runs without asking and the other waits
// for a yes instead of being refused, which the host's file system shows.
func TestPolicySuggestHostCommands(t *testing.T) {
	if testBackend() == "docker" {
		t.Skip("hostexec's client is the binary at /run/airlock/bin, tested natively here")
	}
	e := newEnv(t)
	e.writeConfig("version: 1\nhostexec:\n  auto_deny: ['^rm ']\n  ask: ['^echo ']\n")
	if r := e.run("run", "-d", "-q", "--name", "h"); r.code != 0 {
		t.Fatalf("run -d: %v", r)
	}
	witness := filepath.Join(e.ws, "witness")
	os.WriteFile(witness, []byte("x"), 0o644)
	if r := e.run("exec", "h", "--", "hostexec", "touch", "made"); r.code != 125 {
		t.Fatalf("hostexec touch (no rule): %v, want 125", r)
	}
	if r := e.run("exec", "h", "--", "hostexec", "rm", "-f", witness); r.code != 125 {
		t.Fatalf("hostexec rm (auto_deny): %v, want 125", r)
	}
	wait := e.background("exec", "h", "--", "hostexec", "echo", "asked")
	req := pendingIn(t, e, "echo asked")
	if r := e.run("approve", req.ID); r.code != 0 {
		t.Fatalf("approve: %v", r)
	}
	if r := wait(); r.code != 0 || r.stdout != "asked\n" {
		t.Fatalf("hostexec echo after approve: %v", r)
	}
	e.run("kill", "h")

	r := e.run("policy", "suggest", "h")
	for _, want := range []string{
		"hostexec:\n  commands:\n",
		"    # 1 record: hostexec asked ×1\n    - match: ^echo asked$\n",
		"    - match: ^touch made$\n      ask: true\n",
		`host command "rm -f ` + witness + `": auto_deny "^rm "`,
	} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("policy suggest lacks %q: %v", want, r)
		}
	}
	if r := e.run("policy", "suggest", "h", "--write", "--yes"); r.code != 0 || !strings.Contains(r.stderr, "added 2 to") {
		t.Fatalf("--write --yes = %v", r)
	}

	if r := e.run("run", "-d", "-q", "--name", "h2"); r.code != 0 {
		t.Fatalf("run -d h2: %v", r)
	}
	if r := e.run("exec", "h2", "--", "hostexec", "echo", "asked"); r.code != 0 || r.stdout != "asked\n" {
		t.Errorf("hostexec echo after --write = %v, want it to run without asking", r)
	}
	wait = e.background("exec", "h2", "--", "hostexec", "touch", "made")
	req = pendingIn(t, e, "touch made")
	if r := e.run("deny", req.ID); r.code != 0 {
		t.Fatalf("deny: %v", r)
	}
	if r := wait(); r.code != 125 {
		t.Errorf("hostexec touch, denied by a person = %v, want 125", r)
	}
	if _, err := os.Stat(filepath.Join(e.ws, "made")); err == nil {
		t.Error("touch ran without a person's yes")
	}
	if _, err := os.Stat(witness); err != nil {
		t.Errorf("the auto_deny'd rm ran: %v", err)
	}
}

// Saved approval decisions hold in every run: a name a saved decision
// denies is never suggested, one it now allows is not suggested again.
func TestPolicySuggestHonoursSavedDecisions(t *testing.T) {
	e := newEnv(t)
	r := e.run("run", "-q", "--keep", "--name", "s", "--allow-host", "proxy.golang.org", "--", "sh", "-c",
		"for h in saved-deny.example.net saved-allow.example.org free.example.org; do curl -s -m 5 -o /dev/null http://$h/; done; true")
	if r.code != 0 {
		t.Fatalf("run: %v", r)
	}
	now := time.Now().UTC()
	data, err := approval.MarshalRules([]approval.Rule{
		{ID: approval.NewRuleID(), Host: "saved-deny.example.net", Allow: false, Scope: approval.Global, Created: now, By: "cli"},
		{ID: approval.NewRuleID(), Host: "saved-allow.example.org", Allow: true, Scope: approval.Global, Created: now, By: "cli"},
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(e.home, ".config", "airlock")
	os.MkdirAll(dir, 0o700)
	if err := os.WriteFile(filepath.Join(dir, approval.StoreFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
	r = e.run("policy", "suggest", "s")
	for _, want := range []string{
		"    - free.example.org\n",
		"saved-deny.example.net: deny rule saved-deny.example.net (a saved decision: airlock approvals --decisions) forbids it",
		"saved-allow.example.org: allowed now by saved-allow.example.org",
	} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("policy suggest lacks %q: %v", want, r)
		}
	}
	if strings.Contains(r.stdout, "- saved-") {
		t.Errorf("suggested a name a saved decision covers: %s", r.stdout)
	}
}
