package agents

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestClaudeIsRegisteredWithItsPinnedPackage(t *testing.T) {
	p, err := Lookup("claude")
	if err != nil {
		t.Fatal(err)
	}
	if p.Package != "@anthropic-ai/claude-code" || p.Version != "2.1.330" || p.Binary != "claude" || p.Display != "Claude Code" {
		t.Errorf("profile %+v", p)
	}
	if !slices.Equal(p.Hosts, []string{"api.anthropic.com"}) {
		t.Errorf("hosts %v, want only api.anthropic.com", p.Hosts)
	}
	var envs []string
	for _, k := range p.Keys {
		envs = append(envs, k.Env)
		if !slices.Equal(k.Hosts, p.Hosts) {
			t.Errorf("key %s goes to %v, want %v", k.Env, k.Hosts, p.Hosts)
		}
	}
	if !slices.Equal(envs, []string{"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"}) {
		t.Errorf("keys %v", envs)
	}
	if len(p.Logins) != 1 || p.Logins[0].Path != ".claude/.credentials.json" {
		t.Errorf("logins %+v", p.Logins)
	}
	for _, e := range p.Endpoints {
		if !strings.HasPrefix(e, "api.anthropic.com ") {
			t.Errorf("endpoint rule %q is not for the API host", e)
		}
	}
	if !slices.Contains(p.Endpoints, "api.anthropic.com POST /v1/messages") {
		t.Errorf("endpoint rules %v leave out the Messages API", p.Endpoints)
	}
}

// claudeInputs is a typical run: a placeholder for the API key, one MCP
// server, the user's -p prompt.
func claudeInputs() Inputs {
	return Inputs{
		Home:        "/home/agent",
		Workspace:   "/src/proj",
		CABundle:    "/run/airlock/ca-bundle.pem",
		Keys:        map[string]string{"ANTHROPIC_API_KEY": "sk-ant-api03-airlock-ph-0123456789abcdefghijklmnopqrstuvwxyzABCDEFG"},
		MCP:         []MCPServer{{Name: "fs", Command: "/run/airlock/bin/mcp-bridge", Args: []string{"fs"}, URL: "http://airlock.internal/mcp/fs"}},
		Orientation: Orientation(Facts{Workspace: "/src/proj", MCP: []string{"fs"}}),
		ToolTimeout: 6 * time.Minute,
		Args:        []string{"-p", "fix the tests"},
	}
}

// claudeMCP returns the JSON after --mcp-config, decoded, and checks that
// --strict-mcp-config follows it (the flag takes several values).
func claudeMCP(t *testing.T, argv []string) map[string]map[string]any {
	t.Helper()
	i := slices.Index(argv, "--mcp-config")
	if i < 0 || i+2 >= len(argv) {
		t.Fatalf("argv %q: no --mcp-config JSON", argv)
	}
	if argv[i+2] != "--strict-mcp-config" {
		t.Errorf("argv %q: --strict-mcp-config does not end the --mcp-config list", argv)
	}
	var cfg struct {
		MCPServers map[string]map[string]any `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(argv[i+1]), &cfg); err != nil {
		t.Fatalf("--mcp-config %q: %v", argv[i+1], err)
	}
	if cfg.MCPServers == nil {
		t.Fatalf("--mcp-config %q has no mcpServers object", argv[i+1])
	}
	return cfg.MCPServers
}

// claudeRunEnv is the environment a run gets, composed as airlock agent
// run does: the profile's Env, its RootEnv as root, then the launch's.
func claudeRunEnv(p *Profile, in Inputs, l Launch) []string {
	env := slices.Clone(p.Env)
	if in.Root {
		env = append(env, p.RootEnv...)
	}
	return append(env, l.Env...)
}

func TestClaudeLaunch(t *testing.T) {
	p, err := Lookup("claude")
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		change func(*Inputs)
		check  func(t *testing.T, in Inputs, l Launch, env []string)
	}{
		"a run skips Claude's own permission prompts and ends with the user's arguments": {
			check: func(t *testing.T, in Inputs, l Launch, env []string) {
				if l.Argv[0] != "claude" || l.Argv[1] != "--dangerously-skip-permissions" {
					t.Errorf("argv %q", l.Argv)
				}
				if !slices.Equal(l.Argv[len(l.Argv)-2:], in.Args) {
					t.Errorf("argv %q does not end with %q", l.Argv, in.Args)
				}
			},
		},
		"the orientation is appended to the system prompt verbatim": {
			check: func(t *testing.T, in Inputs, l Launch, env []string) {
				i := slices.Index(l.Argv, "--append-system-prompt")
				if i < 0 || l.Argv[i+1] != in.Orientation {
					t.Errorf("argv %q: want --append-system-prompt with the orientation", l.Argv)
				}
			},
		},
		"an MCP server is airlock's bridge, loaded up front": {
			check: func(t *testing.T, in Inputs, l Launch, env []string) {
				servers := claudeMCP(t, l.Argv)
				fs, ok := servers["fs"]
				if !ok || len(servers) != 1 {
					t.Fatalf("servers %v, want fs alone", servers)
				}
				if fs["type"] != "stdio" || fs["command"] != "/run/airlock/bin/mcp-bridge" ||
					!slices.Equal(claudeStrings(fs["args"]), []string{"fs"}) || fs["alwaysLoad"] != true {
					t.Errorf("fs server %v", fs)
				}
			},
		},
		"without MCP servers the config is empty and still strict, so the workspace's .mcp.json is ignored": {
			change: func(in *Inputs) { in.MCP = nil },
			check: func(t *testing.T, in Inputs, l Launch, env []string) {
				if servers := claudeMCP(t, l.Argv); len(servers) != 0 {
					t.Errorf("servers %v, want none", servers)
				}
				if slices.ContainsFunc(env, func(e string) bool { return strings.Contains(e, "MCP_") }) {
					t.Errorf("env %q sets MCP limits with no MCP server", env)
				}
			},
		},
		"a tool timeout under Claude's own limits never lowers them": {
			check: func(t *testing.T, in Inputs, l Launch, env []string) {
				for _, e := range env {
					if strings.HasPrefix(e, "MCP_TOOL_TIMEOUT=") || strings.HasPrefix(e, "CLAUDE_CODE_MCP_TOOL_IDLE_TIMEOUT=") {
						t.Errorf("env has %s: Claude waits 1e8 ms for a call, 30 min for a silent one", e)
					}
				}
				if _, ok := claudeMCP(t, l.Argv)["fs"]["timeout"]; ok {
					t.Error("the fs server has a timeout")
				}
				if !slices.Contains(env, "MCP_TIMEOUT=60000") {
					t.Errorf("env %q: a server gets 60 s to connect", env)
				}
			},
		},
		"a tool timeout past Claude's idle limit raises it": {
			change: func(in *Inputs) { in.ToolTimeout = 45 * time.Minute },
			check: func(t *testing.T, in Inputs, l Launch, env []string) {
				if !slices.Contains(env, "CLAUDE_CODE_MCP_TOOL_IDLE_TIMEOUT=2700000") {
					t.Errorf("env %q", env)
				}
				if slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, "MCP_TOOL_TIMEOUT=") }) {
					t.Errorf("env %q lowers the call limit", env)
				}
			},
		},
		"a tool timeout past every limit of Claude's raises them all": {
			change: func(in *Inputs) { in.ToolTimeout = 30 * time.Hour },
			check: func(t *testing.T, in Inputs, l Launch, env []string) {
				for _, want := range []string{"MCP_TOOL_TIMEOUT=108000000", "CLAUDE_CODE_MCP_TOOL_IDLE_TIMEOUT=108000000"} {
					if !slices.Contains(env, want) {
						t.Errorf("env %q lacks %s", env, want)
					}
				}
				if got := claudeMCP(t, l.Argv)["fs"]["timeout"]; got != 108000000.0 {
					t.Errorf("the fs server's timeout is %v", got)
				}
			},
		},
		"a resumed session names its id before the user's arguments": {
			change: func(in *Inputs) { in.Resume = "8f6ad036-7acd-4021-9c48-a56cc945398a" },
			check: func(t *testing.T, in Inputs, l Launch, env []string) {
				n := len(l.Argv)
				if !slices.Equal(l.Argv[n-4:], []string{"--resume", in.Resume, "-p", "fix the tests"}) {
					t.Errorf("argv %q", l.Argv)
				}
				if i := slices.Index(l.Argv, "--resume"); i < slices.Index(l.Argv, "--strict-mcp-config") {
					t.Errorf("argv %q: --resume inside the --mcp-config list", l.Argv)
				}
			},
		},
		"a new session is not resumed": {
			check: func(t *testing.T, in Inputs, l Launch, env []string) {
				if slices.Contains(l.Argv, "--resume") || slices.Contains(l.Argv, "--continue") || slices.Contains(l.Argv, "-c") {
					t.Errorf("argv %q", l.Argv)
				}
			},
		},
		"as root IS_SANDBOX is set, or Claude refuses to skip permissions": {
			change: func(in *Inputs) { in.Root = true },
			check: func(t *testing.T, in Inputs, l Launch, env []string) {
				if !slices.Contains(env, "IS_SANDBOX=1") {
					t.Errorf("env %q lacks IS_SANDBOX=1", env)
				}
			},
		},
		"as another user IS_SANDBOX is not set": {
			check: func(t *testing.T, in Inputs, l Launch, env []string) {
				if slices.Contains(env, "IS_SANDBOX=1") {
					t.Errorf("env %q", env)
				}
			},
		},
		"nonessential traffic, updates, telemetry and error reports are off": {
			check: func(t *testing.T, in Inputs, l Launch, env []string) {
				for _, want := range []string{"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1"} {
					if !slices.Contains(env, want) {
						t.Errorf("env %q lacks %s", env, want)
					}
				}
			},
		},
		"no variable is set twice": {
			change: func(in *Inputs) { in.Root = true },
			check: func(t *testing.T, in Inputs, l Launch, env []string) {
				seen := map[string]bool{}
				for _, e := range env {
					name, _, _ := strings.Cut(e, "=")
					if seen[name] {
						t.Errorf("env %q sets %s twice", env, name)
					}
					seen[name] = true
				}
			},
		},
		"onboarding is done, the workspace trusted and the key's placeholder approved": {
			check: func(t *testing.T, in Inputs, l Launch, env []string) {
				var st struct {
					HasCompletedOnboarding bool
					CustomAPIKeyResponses  struct{ Approved, Rejected []string } `json:"customApiKeyResponses"`
					Projects               map[string]struct{ HasTrustDialogAccepted bool }
				}
				if err := json.Unmarshal(l.Files[".claude.json"], &st); err != nil {
					t.Fatalf(".claude.json: %v", err)
				}
				ph := in.Keys["ANTHROPIC_API_KEY"]
				if !st.HasCompletedOnboarding || !st.Projects[in.Workspace].HasTrustDialogAccepted ||
					!slices.Equal(st.CustomAPIKeyResponses.Approved, []string{ph[len(ph)-20:]}) {
					t.Errorf(".claude.json %s", l.Files[".claude.json"])
				}
				var set map[string]any
				if err := json.Unmarshal(l.Files[".claude/settings.json"], &set); err != nil || set["skipDangerousModePermissionPrompt"] != true {
					t.Errorf(".claude/settings.json %s: %v", l.Files[".claude/settings.json"], err)
				}
			},
		},
		"without an API key no key is approved": {
			change: func(in *Inputs) { in.Keys = map[string]string{"CLAUDE_CODE_OAUTH_TOKEN": "sk-ant-oat01-airlock-ph-x"} },
			check: func(t *testing.T, in Inputs, l Launch, env []string) {
				if !strings.Contains(string(l.Files[".claude.json"]), `"approved": []`) {
					t.Errorf(".claude.json %s", l.Files[".claude.json"])
				}
			},
		},
		"files go only into the private home": {
			check: func(t *testing.T, in Inputs, l Launch, env []string) {
				for name := range l.Files {
					if filepath.IsAbs(name) || !filepath.IsLocal(name) || strings.HasPrefix(filepath.Join(in.Home, name), in.Workspace) {
						t.Errorf("file %q is not inside the home", name)
					}
				}
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			in := claudeInputs()
			if tc.change != nil {
				tc.change(&in)
			}
			l, err := p.Launch(in)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, in, l, claudeRunEnv(p, in, l))
		})
	}
}

// TestClaudeLaunchHoldsNoKey: with real keys in the host's environment,
// none of them appears in what a launch puts in the sandbox.
func TestClaudeLaunchHoldsNoKey(t *testing.T) {
	p, _ := Lookup("claude")
	real := map[string]string{
		"ANTHROPIC_API_KEY":       "sk-ant-api03-REAL-api-key-value-0001",
		"ANTHROPIC_AUTH_TOKEN":    "REAL-auth-token-value-0002",
		"CLAUDE_CODE_OAUTH_TOKEN": "sk-ant-oat01-REAL-oauth-token-0003",
	}
	for k, v := range real {
		t.Setenv(k, v)
	}
	in := claudeInputs()
	in.Root = true
	in.Resume = "8f6ad036-7acd-4021-9c48-a56cc945398a"
	in.Keys = map[string]string{
		"ANTHROPIC_API_KEY":       "sk-ant-api03-airlock-ph-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		"ANTHROPIC_AUTH_TOKEN":    "airlock-ph-BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB",
		"CLAUDE_CODE_OAUTH_TOKEN": "sk-ant-oat01-airlock-ph-CCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCC",
	}
	l, err := p.Launch(in)
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	all = append(all, l.Argv...)
	all = append(all, claudeRunEnv(p, in, l)...)
	for name, b := range l.Files {
		all = append(all, name, string(b))
	}
	for _, s := range all {
		for k, v := range real {
			if strings.Contains(s, v) {
				t.Errorf("the real %s is in %q", k, s)
			}
		}
		if strings.Contains(s, "REAL") {
			t.Errorf("%q holds part of a real key", s)
		}
	}
}

func TestClaudeLaunchRefusesBadInputs(t *testing.T) {
	p, _ := Lookup("claude")
	for name, change := range map[string]func(*Inputs){
		"a run without a workspace": func(in *Inputs) { in.Workspace = "" },
		"two MCP servers of one name": func(in *Inputs) {
			in.MCP = append(in.MCP, in.MCP[0])
		},
	} {
		t.Run(name, func(t *testing.T) {
			in := claudeInputs()
			change(&in)
			if _, err := p.Launch(in); err == nil {
				t.Error("no error")
			}
		})
	}
}

func TestClaudeFindSession(t *testing.T) {
	p, _ := Lookup("claude")
	const (
		older = "11111111-1111-4111-8111-111111111111"
		newer = "22222222-2222-4222-8222-222222222222"
	)
	since := time.Date(2026, 11, 23, 20, 0, 0, 0, time.UTC)
	type file struct {
		path string
		at   time.Time
	}
	for name, tc := range map[string]struct {
		files []file
		want  string
	}{
		"a home Claude never ran in has no session": {},
		"a session from before the run is not this run's": {
			files: []file{{"-src-proj/" + older + ".jsonl", since.Add(-time.Minute)}},
		},
		"the session written during the run is found": {
			files: []file{{"-src-proj/" + older + ".jsonl", since.Add(time.Second)}},
			want:  older,
		},
		"of two sessions the one written last wins": {
			files: []file{
				{"-src-proj/" + newer + ".jsonl", since.Add(2 * time.Second)},
				{"-src-proj/" + older + ".jsonl", since.Add(time.Second)},
			},
			want: newer,
		},
		"another project's session counts too": {
			files: []file{
				{"-src-proj/" + older + ".jsonl", since.Add(time.Second)},
				{"-src-other/" + newer + ".jsonl", since.Add(3 * time.Second)},
			},
			want: newer,
		},
		"subagent transcripts and other files are not sessions": {
			files: []file{
				{"-src-proj/" + older + ".jsonl", since.Add(time.Second)},
				{"-src-proj/" + newer + "/subagents/agent-a1b2.jsonl", since.Add(5 * time.Second)},
				{"-src-proj/agent-a1b2.jsonl", since.Add(5 * time.Second)},
				{"-src-proj/notes.txt", since.Add(5 * time.Second)},
			},
			want: older,
		},
	} {
		t.Run(name, func(t *testing.T) {
			home := t.TempDir()
			for _, f := range tc.files {
				path := filepath.Join(home, ".claude", "projects", f.path)
				if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte("{}\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Chtimes(path, f.at, f.at); err != nil {
					t.Fatal(err)
				}
			}
			got, err := p.FindSession(home, since)
			if err != nil || got != tc.want {
				t.Errorf("FindSession = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func claudeStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}
