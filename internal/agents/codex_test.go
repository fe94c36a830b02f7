package agents

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// launchInputs are a run's inputs with a placeholder for every key and
// two MCP servers.
func launchInputs(p *Profile, args []string, resume string) Inputs {
	keys := map[string]string{}
	for i, k := range p.Keys {
		keys[k.Env] = k.Prefix + "airlock-ph-SECRETVALUE" + strconv.Itoa(i)
	}
	return Inputs{
		Home:        "/home/agent",
		Workspace:   "/work/repo",
		CABundle:    "/run/airlock/ca-bundle.pem",
		Keys:        keys,
		MCP:         []MCPServer{{Name: "fs", Command: "/run/airlock/bin/mcp-bridge", Args: []string{"fs"}}, {Name: "git-hub_2", Command: "/run/airlock/bin/mcp-bridge", Args: []string{"git-hub_2"}}},
		Orientation: Orientation(Facts{Workspace: "/work/repo", AllowHosts: p.Hosts}) + "\nQuotes \" and back\\slashes, 'single', [brackets] = stay text.",
		ToolTimeout: 10 * time.Minute,
		Args:        args,
		Resume:      resume,
	}
}

// launchText is everything a Launch puts inside: argv, env and files.
func launchText(l Launch) string {
	var b strings.Builder
	b.WriteString(strings.Join(l.Argv, "\n"))
	b.WriteString(strings.Join(l.Env, "\n"))
	for name, c := range l.Files {
		b.WriteString(name)
		b.Write(c)
	}
	return b.String()
}

func TestCodexLaunch(t *testing.T) {
	p, err := Lookup("codex")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		resume string
		want   []string
	}{
		{"exec with a prompt gets --skip-git-repo-check after exec", []string{"exec", "PROMPT"}, "",
			[]string{"codex", "exec", "--skip-git-repo-check", "PROMPT"}},
		{"a resumed exec puts resume ID before the prompt, after exec's flags", []string{"exec", "--json", "-m", "gpt-5", "PROMPT"}, "ID1",
			[]string{"codex", "exec", "--skip-git-repo-check", "--json", "-m", "gpt-5", "resume", "ID1", "PROMPT"}},
		{"a resumed exec with no prompt (stdin) ends with resume ID", []string{"exec", "-c", "model=\"x\""}, "ID1",
			[]string{"codex", "exec", "--skip-git-repo-check", "-c", "model=\"x\"", "resume", "ID1"}},
		{"the alias e is exec too", []string{"e", "PROMPT"}, "ID1",
			[]string{"codex", "e", "--skip-git-repo-check", "resume", "ID1", "PROMPT"}},
		{"an exec the user already resumes is left alone", []string{"exec", "resume", "--last", "PROMPT"}, "ID1",
			[]string{"codex", "exec", "--skip-git-repo-check", "resume", "--last", "PROMPT"}},
		{"the interactive CLI resumes with codex resume ID", []string{"-m", "gpt-5", "PROMPT"}, "ID1",
			[]string{"codex", "resume", "ID1", "-m", "gpt-5", "PROMPT"}},
		{"no arguments start the interactive CLI", nil, "",
			[]string{"codex"}},
		{"no arguments and a session resume it", nil, "ID1",
			[]string{"codex", "resume", "ID1"}},
		{"another subcommand is passed through untouched", []string{"mcp", "list"}, "ID1",
			[]string{"codex", "mcp", "list"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := launchInputs(p, tc.args, tc.resume)
			l, err := p.Launch(in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(l.Argv, tc.want) {
				t.Errorf("argv %q, want %q", l.Argv, tc.want)
			}
			// The placeholder (never a real key: Launch is not given one)
			// is only in the interactive CLI's login file.
			auth := l.Files[".codex/auth.json"]
			var login map[string]string
			if err := json.Unmarshal(auth, &login); err != nil || login["auth_mode"] != "apikey" || login["OPENAI_API_KEY"] != in.Keys["CODEX_API_KEY"] {
				t.Errorf("auth.json %s: want an API-key login holding the placeholder", auth)
			}
			delete(l.Files, ".codex/auth.json")
			all := launchText(l)
			for env, v := range in.Keys {
				if strings.Contains(all, v) {
					t.Errorf("the value of %s is in the launch", env)
				}
			}
		})
	}
	t.Run("without a key (a login stands in) no login file is written", func(t *testing.T) {
		in := launchInputs(p, nil, "")
		in.Keys = map[string]string{}
		l, err := p.Launch(in)
		if err != nil || l.Files[".codex/auth.json"] != nil {
			t.Errorf("files %q, %v", l.Files, err)
		}
	})
}

func TestCodexConfig(t *testing.T) {
	p, _ := Lookup("codex")
	in := launchInputs(p, []string{"exec", "x"}, "")
	l, err := p.Launch(in)
	if err != nil {
		t.Fatal(err)
	}
	cfg := parseTOMLSubset(t, string(l.Files[".codex/config.toml"]))
	for _, tc := range []struct {
		name string
		key  string
		want any
	}{
		{"its own sandbox is off (it cannot run inside ours)", "sandbox_mode", "danger-full-access"},
		{"it never asks for approval", "approval_policy", "never"},
		{"the update check is off", "check_for_update_on_startup", false},
		{"analytics are off", "analytics.enabled", false},
		{"feedback uploads are off", "feedback.enabled", false},
		{"model discovery at chatgpt.com is off", "features.api_key_model_discovery", false},
		{"the plugin marketplace sync is off", "features.plugins", false},
		{"remote plugins are off", "features.remote_plugin", false},
		{"ChatGPT apps are off", "features.apps", false},
		{"the background app-server (which fails inside) is off", "features.daemon_auto_start", false},
		{"the orientation is the developer instructions, verbatim", "developer_instructions", in.Orientation},
		{"an MCP server runs the bridge", "mcp_servers.fs.command", "/run/airlock/bin/mcp-bridge"},
		{"the bridge is told the server's name", "mcp_servers.fs.args", []any{"fs"}},
		{"a name with - and _ is a table of its own", "mcp_servers.git-hub_2.args", []any{"git-hub_2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := cfg[tc.key]; !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%s = %#v, want %#v", tc.key, got, tc.want)
			}
		})
	}
	t.Run("the tool timeout is above the approval wait", func(t *testing.T) {
		for _, n := range []string{"fs", "git-hub_2"} {
			if got, _ := cfg["mcp_servers."+n+".tool_timeout_sec"].(int64); time.Duration(got)*time.Second <= in.ToolTimeout {
				t.Errorf("%s tool_timeout_sec %d, ToolTimeout %s", n, got, in.ToolTimeout)
			}
		}
	})
	t.Run("CODEX_HOME is the private home's .codex, where the config is written", func(t *testing.T) {
		want := []string{"CODEX_HOME=/home/agent/.codex"}
		if !reflect.DeepEqual(l.Env, want) || l.Files[".codex/config.toml"] == nil {
			t.Errorf("env %q, want %q", l.Env, want)
		}
	})
	t.Run("the CA bundle is named in CODEX_CA_CERTIFICATE (its WebSocket reads no other)", func(t *testing.T) {
		if !reflect.DeepEqual(p.CAEnv, []string{"CODEX_CA_CERTIFICATE"}) {
			t.Errorf("CAEnv %q", p.CAEnv)
		}
	})
	t.Run("a server name Codex cannot take is refused", func(t *testing.T) {
		bad := in
		bad.MCP = []MCPServer{{Name: "a.b", Command: "/run/airlock/bin/mcp-bridge", Args: []string{"a.b"}}}
		if _, err := p.Launch(bad); err == nil {
			t.Error("no error")
		}
	})
	t.Run("the real codex reads the MCP servers as written", func(t *testing.T) {
		bin := agentBinary(t, "codex")
		home := t.TempDir()
		os.WriteFile(filepath.Join(home, "config.toml"), l.Files[".codex/config.toml"], 0o600)
		cmd := exec.Command(bin, "mcp", "list", "--json")
		cmd.Env = append(os.Environ(), "CODEX_HOME="+home)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("codex mcp list: %v\n%s", err, out)
		}
		var servers []struct {
			Name      string `json:"name"`
			Transport struct {
				Command string   `json:"command"`
				Args    []string `json:"args"`
			} `json:"transport"`
			ToolTimeout float64 `json:"tool_timeout_sec"`
		}
		if err := json.Unmarshal(out, &servers); err != nil || len(servers) != 2 {
			t.Fatalf("codex mcp list: %v\n%s", err, out)
		}
		for _, s := range servers {
			if s.Transport.Command != "/run/airlock/bin/mcp-bridge" || len(s.Transport.Args) != 1 || s.Transport.Args[0] != s.Name ||
				time.Duration(s.ToolTimeout)*time.Second <= in.ToolTimeout {
				t.Errorf("server %+v", s)
			}
		}
	})
}

func TestCodexFindSession(t *testing.T) {
	p, _ := Lookup("codex")
	home := t.TempDir()
	day := filepath.Join(home, ".codex", "sessions", "2026", "11", "23")
	os.MkdirAll(day, 0o755)
	write := func(name, id string, mod time.Time) {
		f := filepath.Join(day, name)
		line := `{"timestamp":"x","type":"session_meta","payload":{"id":"` + id + `","base_instructions":{"text":"` + strings.Repeat("long ", 30000) + `"}}}` + "\n"
		os.WriteFile(f, []byte(line), 0o644)
		os.Chtimes(f, mod, mod)
	}
	start := time.Now().Add(-time.Minute)
	write("rollout-2026-11-23T20-00-00-01a20000-0000-7000-8000-000000000001.jsonl", "01a20000-0000-7000-8000-000000000001", start.Add(-time.Hour))
	write("rollout-2026-11-23T20-21-30-01a20a12-22fb-75a1-a1c0-18e6c1d2b814.jsonl", "01a20a12-22fb-75a1-a1c0-18e6c1d2b814", start.Add(10*time.Second))
	write("rollout-2026-11-23T20-22-00-01a20a12-0000-7000-8000-000000000003.jsonl", "01a20a12-0000-7000-8000-000000000003", start.Add(5*time.Second))
	for _, tc := range []struct {
		name  string
		home  string
		since time.Time
		want  string
	}{
		{"the newest rollout since the start is the session", home, start, "01a20a12-22fb-75a1-a1c0-18e6c1d2b814"},
		{"rollouts older than the start are not", home, start.Add(time.Hour), ""},
		{"a home without sessions has none", t.TempDir(), start, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := p.FindSession(tc.home, tc.since)
			if err != nil || got != tc.want {
				t.Errorf("FindSession = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// agentBinary finds an agent CLI on PATH or in $AIRLOCK_TEST_AGENTS
// (default /tmp/agents)/node_modules/.bin, or skips.
func agentBinary(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	dir := os.Getenv("AIRLOCK_TEST_AGENTS")
	if dir == "" {
		dir = "/tmp/agents"
	}
	p := filepath.Join(dir, "node_modules", ".bin", name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("%s is not installed (PATH, or %s)", name, p)
	}
	return p
}

// parseTOMLSubset reads the TOML the profiles write: [tables], and
// key = value with basic strings, integers, booleans and arrays of
// strings; keys come back dotted with their table.
func parseTOMLSubset(t *testing.T, s string) map[string]any {
	t.Helper()
	out := map[string]any{}
	table := ""
	for i, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
			continue
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			table = strings.Trim(line, "[]") + "."
			continue
		}
		k, v, ok := strings.Cut(line, " = ")
		if !ok {
			t.Fatalf("line %d: %q is not key = value", i+1, line)
		}
		var val any
		switch {
		case v == "true" || v == "false":
			val = v == "true"
		case strings.HasPrefix(v, `"`) || strings.HasPrefix(v, "["):
			var x any
			if err := json.Unmarshal([]byte(v), &x); err != nil {
				t.Fatalf("line %d: %q: %v", i+1, v, err)
			}
			val = x
		default:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("line %d: %q: %v", i+1, v, err)
			}
			val = n
		}
		out[table+k] = val
	}
	return out
}

func TestOpenAIAgentsEndpointRulesLetTheirAPIsThrough(t *testing.T) {
	for _, tc := range []struct {
		name  string
		agent string
		want  []string
	}{
		{"codex reaches the Responses API over SSE and its WebSocket, and compaction", "codex",
			[]string{"api.openai.com POST /v1/responses", "api.openai.com GET /v1/responses", "api.openai.com POST /v1/responses/*"}},
		{"opencode reaches each provider's generation API", "opencode",
			[]string{"api.openai.com POST /v1/responses", "api.anthropic.com POST /v1/messages", "generativelanguage.googleapis.com POST /v1beta/models/*"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := Lookup(tc.agent)
			for _, w := range tc.want {
				found := false
				for _, e := range p.Endpoints {
					found = found || e == w
				}
				if !found {
					t.Errorf("%q missing from %q", w, p.Endpoints)
				}
			}
			for _, e := range p.Endpoints {
				host, _, _ := strings.Cut(e, " ")
				ok := false
				for _, h := range p.Hosts {
					ok = ok || h == host
				}
				if !ok {
					t.Errorf("endpoint %q is for a host the profile does not allow", e)
				}
			}
		})
	}
}
