//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/fakellm"
)

// agentConfigTestIP serves the fake Anthropic API for the agents-section
// test (an address of its own, so it runs beside the other agent tests).
const agentConfigTestIP = "127.0.0.44"

// TestAgentRunWithNoNameRunsTheConfiguredDefault runs `airlock agent run
// -- -p PROMPT` (no agent named) with a config whose agents section names
// claude the default and gives it an extra host, its own arguments and a
// limit. The real Claude Code answers as JSON only because the args from
// config reached it; the extra host resolved and was allowed while
// another was refused, as the audit log shows; the key went only to the
// fake provider; config show --origin says where each setting came from.
func TestAgentRunWithNoNameRunsTheConfiguredDefault(t *testing.T) {
	a := newAgentTest(t, agentConfigTestIP, []fakellm.Step{
		{Tool: "Bash", Args: map[string]any{"command": "curl -s -m 5 -o /dev/null http://extra.example.com/; curl -s -m 5 -o /dev/null http://other.example.com/; true", "description": "Reach two hosts"}},
		{Text: "Done with both hosts."},
	})
	cfg := a.writeConfig(`version: 1
agents:
  default: claude
  claude:
    keys: [ANTHROPIC_API_KEY]
    hosts: [extra.example.com]
    args: [--output-format, json]
    limits: {timeout: 4m}
`)
	ip := agentConfigTestIP
	c := a.cmd("agent", "run", "--name", "default-agent", "--workspace", a.ws, "--add-host", "api.anthropic.com:"+ip,
		"--add-host", "extra.example.com:"+ip, "--add-host", "other.example.com:"+ip, "--upstream-ca", a.fake.CAFile, "--", "-p", "reach two hosts")
	c.Env = append(a.environ(), "ANTHROPIC_API_KEY="+a.key)
	for i, v := range c.Env {
		if p, ok := strings.CutPrefix(v, "PATH="); ok {
			c.Env[i] = "PATH=" + a.bin + ":" + p
		}
	}
	r := a.runCmd(c)
	if r.code != 0 {
		t.Fatalf("airlock agent run (no name): %v\nrequests: %+v", r, a.fake.Requests())
	}
	// JSON on stdout: the args from config came before the ones after --.
	if res := parseClaudeResult(t, r); res.IsError || !strings.Contains(res.Result, "Done with both hosts") {
		t.Errorf("claude's result %+v", res)
	}
	a.checkKeyStayedOut(r)
	var extraAllowed, otherDenied bool
	for _, rec := range auditRecords(t, a.env, "default-agent") {
		extraAllowed = extraAllowed || rec.Host == "extra.example.com" && rec.Decision == "allow" && rec.Rule == "extra.example.com"
		otherDenied = otherDenied || rec.Host == "other.example.com" && rec.Decision == "deny"
	}
	if !extraAllowed || !otherDenied {
		t.Errorf("audit: extra.example.com allowed by its rule %v (want true), other.example.com refused %v (want true)", extraAllowed, otherDenied)
	}

	r = a.run("config", "show", "--origin")
	for _, want := range []string{
		"agents:\n  default: claude  # ~/.config/airlock/config.yaml:3\n  claude:\n",
		"    hosts:\n      - extra.example.com  # ~/.config/airlock/config.yaml:6\n",
		"    limits:\n      timeout: 4m  # ~/.config/airlock/config.yaml:8\n",
	} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("config show --origin lacks %q: %v (config %s)", want, r, cfg)
		}
	}
}

// Without a default, airlock agent run with no name says how to name one
// and which agents there are; a default or a section naming no agent
// airlock knows is one line naming where it was set.
func TestAgentRunWithNoNameAndNoDefaultSaysWhatToDo(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct{ config, want string }{
		{"", "which agent? name one (airlock agent run claude) or set a default with airlock config edit (agents: {default: claude}); known agents: claude, codex, gemini"},
		{"agents: {default: clade}\n", `agents.default (~/.config/airlock/config.yaml:1): unknown agent "clade"`},
		{"agents: {default: claude, cladue: {hosts: [x.example.com]}}\n", `agents.cladue (~/.config/airlock/config.yaml): unknown agent "cladue"`},
		{"agents: {default: claude, claude: {keys: [OPENAI_API_KEY]}}\n", "agents.claude (~/.config/airlock/config.yaml): keys: OPENAI_API_KEY is not one of Claude Code's keys (ANTHROPIC_API_KEY"},
	} {
		e.writeConfig(c.config)
		r := e.run("agent", "run", "--", "-p", "hi")
		if first, _, _ := strings.Cut(r.stderr, "\n"); r.code != 125 || !strings.Contains(first, c.want) {
			t.Errorf("agent run with config %q = %v, want exit 125 and a first line with %q", c.config, r, c.want)
		}
	}
}

// config show --origin lists each agent's settings with the file and line
// they came from (the global file, the project's), and with --agent NAME
// the config that agent's runs get: its settings in place of the
// top-level ones, its hosts among the allowed.
func TestConfigShowSaysWhereEachAgentSettingCameFrom(t *testing.T) {
	e := newEnv(t)
	e.writeConfig("limits: {memory: 1g}\nagents:\n  default: claude\n  claude:\n    limits: {memory: 8g}\n")
	pf := config.ProjectFile(filepath.Join(e.home, ".config", "airlock"), e.ws)
	os.MkdirAll(filepath.Dir(pf), 0o700)
	if err := os.WriteFile(pf, []byte("agents:\n  claude:\n    hosts: [docs.example.com]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	proj := "~/" + strings.TrimPrefix(pf, e.home+"/") // as the run's HOME shows it
	r := e.run("config", "show", "--origin")
	for _, want := range []string{
		"limits:\n  memory: 1g  # ~/.config/airlock/config.yaml:1\n",
		"agents:\n  default: claude  # ~/.config/airlock/config.yaml:3\n  claude:\n    hosts:\n      - docs.example.com  # " + proj + ":3\n    limits:\n      memory: 8g  # ~/.config/airlock/config.yaml:5\n",
	} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("config show --origin lacks %q: %v", want, r)
		}
	}
	r = e.run("config", "show", "--origin", "--agent", "claude")
	for _, want := range []string{
		"limits:\n  memory: 8g  # ~/.config/airlock/config.yaml:5\n",
		"  allow_hosts:\n    - docs.example.com  # " + proj + ":3\n",
	} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("config show --origin --agent claude lacks %q: %v", want, r)
		}
	}
	if r := e.run("config", "show", "--agent", "clade"); r.code != 125 || !strings.Contains(r.stderr, `--agent: unknown agent "clade"`) {
		t.Errorf("config show --agent clade = %v, want exit 125 naming the agent", r)
	}
}
