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

func geminiInputs() Inputs {
	return Inputs{
		Home:        "/home/u",
		Workspace:   "/work/repo",
		CABundle:    "/run/airlock/ca-bundle.pem",
		Keys:        map[string]string{"GEMINI_API_KEY": "airlock-ph-0123456789abcdef"},
		Orientation: "You are running inside an airlock sandbox.",
		ToolTimeout: 6 * time.Minute,
		MCP: []MCPServer{
			{Name: "fs", Command: "/run/airlock/bin/mcp-bridge", Args: []string{"fs"}, URL: "http://airlock.internal/mcp/fs"},
			{Name: "github", Command: "/run/airlock/bin/mcp-bridge", Args: []string{"github"}},
		},
		Args: []string{"-p", "fix the test"},
	}
}

// geminiSettingsOf parses the settings file Launch wrote.
func geminiSettingsOf(t *testing.T, l Launch) map[string]any {
	t.Helper()
	b, ok := l.Files[".gemini/settings.json"]
	if !ok {
		t.Fatalf("no .gemini/settings.json in %v", geminiFileNames(l.Files))
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("settings.json does not parse: %v\n%s", err, b)
	}
	return m
}

func geminiFileNames(m map[string][]byte) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// geminiGet walks a parsed JSON object by keys.
func geminiGet(m any, path ...string) any {
	for _, k := range path {
		o, ok := m.(map[string]any)
		if !ok {
			return nil
		}
		m = o[k]
	}
	return m
}

func TestGeminiProfileIsRegistered(t *testing.T) {
	p, err := Lookup("gemini")
	if err != nil {
		t.Fatal(err)
	}
	if p.Package != "@google/gemini-cli" || p.Version != "0.61.0" || p.Binary != "gemini" {
		t.Errorf("profile %s %s %s, want @google/gemini-cli 0.61.0 gemini", p.Package, p.Version, p.Binary)
	}
	if !slices.Contains(p.Hosts, "generativelanguage.googleapis.com") {
		t.Errorf("Hosts = %v, want the Gemini API", p.Hosts)
	}
	if len(p.Keys) != 1 || p.Keys[0].Env != "GEMINI_API_KEY" || !slices.Equal(p.Keys[0].Hosts, p.Hosts) {
		t.Errorf("Keys = %+v, want GEMINI_API_KEY toward the Gemini API only", p.Keys)
	}
	if !slices.Contains(p.Env, "GEMINI_CLI_TRUST_WORKSPACE=true") {
		t.Errorf("Env = %v, want the workspace trusted (else exit 55)", p.Env)
	}
}

func TestGeminiLaunch(t *testing.T) {
	tests := map[string]struct {
		change   func(*Inputs)
		wantArgv []string
		wantAuth string
	}{
		"a new run is yolo with the user's arguments after": {
			wantArgv: []string{"gemini", "--approval-mode", "yolo", "-p", "fix the test"},
			wantAuth: "gemini-api-key",
		},
		"a resumed run names the session before the user's arguments": {
			change:   func(in *Inputs) { in.Resume = "564c817a-f0dd-4b05-b87f-47286602ce2b" },
			wantArgv: []string{"gemini", "--approval-mode", "yolo", "--resume", "564c817a-f0dd-4b05-b87f-47286602ce2b", "-p", "fix the test"},
			wantAuth: "gemini-api-key",
		},
		"without a key the Google login is the auth type": {
			change:   func(in *Inputs) { in.Keys = nil },
			wantArgv: []string{"gemini", "--approval-mode", "yolo", "-p", "fix the test"},
			wantAuth: "oauth-personal",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			in := geminiInputs()
			if tc.change != nil {
				tc.change(&in)
			}
			l, err := gemini.Launch(in)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(l.Argv, tc.wantArgv) {
				t.Errorf("Argv = %q, want %q", l.Argv, tc.wantArgv)
			}
			if got := geminiGet(geminiSettingsOf(t, l), "security", "auth", "selectedType"); got != tc.wantAuth {
				t.Errorf("security.auth.selectedType = %v, want %s", got, tc.wantAuth)
			}
		})
	}
}

func TestGeminiLaunchKeepsKeysOut(t *testing.T) {
	in := geminiInputs()
	l, err := gemini.Launch(in)
	if err != nil {
		t.Fatal(err)
	}
	ph := in.Keys["GEMINI_API_KEY"]
	everything := strings.Join(l.Argv, " ") + strings.Join(l.Env, " ") + strings.Join(gemini.Env, " ")
	for _, b := range l.Files {
		everything += string(b)
	}
	if strings.Contains(everything, ph) {
		t.Errorf("the key's placeholder is written into argv, env or files; it belongs in the variable the CLI reads")
	}
}

func TestGeminiSettings(t *testing.T) {
	in := geminiInputs()
	l, err := gemini.Launch(in)
	if err != nil {
		t.Fatal(err)
	}
	s := geminiSettingsOf(t, l)
	switches := map[string]struct {
		path []string
		want bool
	}{
		"usage statistics are off":            {[]string{"privacy", "usageStatisticsEnabled"}, false},
		"telemetry is off":                    {[]string{"telemetry", "enabled"}, false},
		"auto-update is off":                  {[]string{"general", "enableAutoUpdate"}, false},
		"the update notification is off":      {[]string{"general", "enableAutoUpdateNotification"}, false},
		"the repository's .env is not loaded": {[]string{"advanced", "ignoreLocalEnv"}, true},
	}
	for name, sw := range switches {
		t.Run(name, func(t *testing.T) {
			if v := geminiGet(s, sw.path...); v != sw.want {
				t.Errorf("%s = %v, want %v", strings.Join(sw.path, "."), v, sw.want)
			}
		})
	}
	for _, m := range in.MCP {
		t.Run("the MCP server "+m.Name+" is the bridge, trusted, with a timeout above the tool timeout", func(t *testing.T) {
			srv := geminiGet(s, "mcpServers", m.Name)
			if geminiGet(srv, "command") != m.Command {
				t.Errorf("command = %v, want %s", geminiGet(srv, "command"), m.Command)
			}
			if args, _ := geminiGet(srv, "args").([]any); len(args) != 1 || args[0] != m.Name {
				t.Errorf("args = %v, want [%s]", geminiGet(srv, "args"), m.Name)
			}
			if geminiGet(srv, "trust") != true {
				t.Errorf("trust = %v, want true (airlock polices the calls)", geminiGet(srv, "trust"))
			}
			ms, _ := geminiGet(srv, "timeout").(float64)
			if time.Duration(ms)*time.Millisecond <= in.ToolTimeout {
				t.Errorf("timeout = %vms, want above %v", ms, in.ToolTimeout)
			}
		})
	}
	t.Run("no MCP server means no mcpServers", func(t *testing.T) {
		in := geminiInputs()
		in.MCP = nil
		l, _ := gemini.Launch(in)
		if v, ok := geminiSettingsOf(t, l)["mcpServers"]; ok {
			t.Errorf("mcpServers = %v, want none", v)
		}
	})
}

func TestGeminiOrientationIsPrivate(t *testing.T) {
	in := geminiInputs()
	l, err := gemini.Launch(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(l.Files[".gemini/GEMINI.md"]), in.Orientation) {
		t.Errorf(".gemini/GEMINI.md = %q, want the orientation", l.Files[".gemini/GEMINI.md"])
	}
	for p := range l.Files {
		if !filepath.IsLocal(p) || !strings.HasPrefix(p, ".gemini/") {
			t.Errorf("file %q is not inside the private ~/.gemini", p)
		}
	}
	if slices.ContainsFunc(l.Argv, func(a string) bool { return strings.Contains(a, in.Workspace) }) {
		t.Errorf("Argv %q points into the workspace", l.Argv)
	}
}

func TestGeminiFindSession(t *testing.T) {
	start := time.Now().Add(-time.Minute)
	type file struct {
		path  string
		first string
		age   time.Duration // before now
	}
	head := func(id, kind string) string {
		return `{"sessionId":"` + id + `","projectHash":"ab","startTime":"2026-11-23T20:20:07.400Z","kind":"` + kind + `"}` + "\n" + `{"$set":{}}` + "\n"
	}
	const a, b = "564c817a-f0dd-4b05-b87f-47286602ce2b", "0f4cc98b-1111-4b05-b87f-47286602ce2b"
	tests := map[string]struct {
		files []file
		link  bool
		want  string
	}{
		"no store means no session": {},
		"the session changed last wins": {files: []file{
			{"ws/chats/session-2026-11-23T20-20-564c817a.jsonl", head(a, "main"), 20 * time.Second},
			{"ws/chats/session-2026-11-23T20-21-0f4cc98b.jsonl", head(b, "main"), 10 * time.Second},
		}, want: b},
		"a session from before the run is not this run's": {files: []file{
			{"ws/chats/session-2026-11-23T20-20-564c817a.jsonl", head(a, "main"), 2 * time.Minute},
		}},
		"a subagent's session is not the one to resume": {files: []file{
			{"ws/chats/session-2026-11-23T20-20-564c817a.jsonl", head(a, "main"), 20 * time.Second},
			{"ws/chats/session-2026-11-23T20-21-0f4cc98b.jsonl", head(b, "subagent"), 10 * time.Second},
		}, want: a},
		"an id that could pass for a flag or an index is ignored": {files: []file{
			{"ws/chats/session-1.jsonl", head("--yolo", "main"), 20 * time.Second},
			{"ws/chats/session-2.jsonl", head("5", "main"), 10 * time.Second},
		}},
		"a file that is not a session is ignored": {files: []file{
			{"ws/chats/session-2026-11-23T20-20-564c817a.jsonl", head(a, "main"), 20 * time.Second},
			{"ws/chats/notes.jsonl", head(b, "main"), 10 * time.Second},
			{"ws/chats/session-x.jsonl", "not json\n", 5 * time.Second},
		}, want: a},
		"a link the sandbox left is not followed": {files: []file{
			{"ws/chats/session-2026-11-23T20-20-564c817a.jsonl", head(a, "main"), 20 * time.Second},
		}, link: true, want: a},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			home := t.TempDir()
			for _, f := range tc.files {
				p := filepath.Join(home, ".gemini", "tmp", f.path)
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := os.WriteFile(p, []byte(f.first), 0o644); err != nil {
					t.Fatal(err)
				}
				mt := time.Now().Add(-f.age)
				os.Chtimes(p, mt, mt)
			}
			if tc.link {
				out := filepath.Join(t.TempDir(), "elsewhere.jsonl")
				os.WriteFile(out, []byte(head(b, "main")), 0o644)
				if err := os.Symlink(out, filepath.Join(home, ".gemini", "tmp", "ws", "chats", "session-2026-11-23T20-22-0f4cc98b.jsonl")); err != nil {
					t.Fatal(err)
				}
			}
			got, err := gemini.FindSession(home, start)
			if err != nil || got != tc.want {
				t.Errorf("FindSession = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
