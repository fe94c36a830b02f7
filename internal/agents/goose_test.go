package agents

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func gooseInputs() Inputs {
	return Inputs{
		Home:        "/home/u",
		Workspace:   "/work/repo",
		Keys:        map[string]string{"ANTHROPIC_API_KEY": "airlock-ph-anthropic0123456789"},
		Orientation: "You are running inside an airlock sandbox.",
		ToolTimeout: 6*time.Minute + 500*time.Millisecond,
		MCP: []MCPServer{
			{Name: "fs", Command: "/run/airlock/bin/mcp-bridge", Args: []string{"fs"}},
			{Name: "github", Command: "/run/airlock/bin/mcp-bridge", Args: []string{"github"}},
		},
		Args: []string{"-t", "fix the test"},
	}
}

// gooseConfigOf parses the config.yaml Launch wrote.
type gooseConfigFile struct {
	Provider   string `yaml:"GOOSE_PROVIDER"`
	Model      string `yaml:"GOOSE_MODEL"`
	Mode       string `yaml:"GOOSE_MODE"`
	Telemetry  *bool  `yaml:"GOOSE_TELEMETRY_ENABLED"`
	Extensions map[string]struct {
		Type    string   `yaml:"type"`
		Name    string   `yaml:"name"`
		Cmd     string   `yaml:"cmd"`
		Args    []string `yaml:"args"`
		Timeout int64    `yaml:"timeout"`
		Enabled bool     `yaml:"enabled"`
	} `yaml:"extensions"`
}

func gooseConfigOf(t *testing.T, l Launch) gooseConfigFile {
	t.Helper()
	b, ok := l.Files[".config/goose/config.yaml"]
	if !ok {
		t.Fatalf("no .config/goose/config.yaml in %v", geminiFileNames(l.Files))
	}
	var c gooseConfigFile
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("config.yaml does not parse: %v\n%s", err, b)
	}
	return c
}

func TestGooseProfileIsRegistered(t *testing.T) {
	p, err := Lookup("goose")
	if err != nil {
		t.Fatal(err)
	}
	if p.Package != "" || p.Binary != "goose" || !strings.Contains(p.Install, "aaif-goose/goose/releases") {
		t.Errorf("profile package %q binary %q install %q: want no npm package and the GitHub releases", p.Package, p.Binary, p.Install)
	}
	for _, want := range []string{"GOOSE_MODE=auto", "GOOSE_DISABLE_KEYRING=1", "GOOSE_TELEMETRY_ENABLED=false"} {
		if !slices.Contains(p.Env, want) {
			t.Errorf("Env = %v, want %s", p.Env, want)
		}
	}
	hosts := map[string]string{}
	for _, k := range p.Keys {
		hosts[k.Env] = strings.Join(k.Hosts, ",")
	}
	want := map[string]string{"ANTHROPIC_API_KEY": "api.anthropic.com", "OPENAI_API_KEY": "api.openai.com", "GOOGLE_API_KEY": "generativelanguage.googleapis.com"}
	for k, h := range want {
		if hosts[k] != h {
			t.Errorf("key %s goes to %q, want %q", k, hosts[k], h)
		}
	}
}

func TestGooseProviderFollowsTheKeyFound(t *testing.T) {
	tests := map[string]struct {
		keys          []string
		provider      string
		modelPrefix   string
		wantNoDefault bool
	}{
		"an Anthropic key chooses anthropic":        {keys: []string{"ANTHROPIC_API_KEY"}, provider: "anthropic", modelPrefix: "claude-"},
		"an OpenAI key chooses openai":              {keys: []string{"OPENAI_API_KEY"}, provider: "openai", modelPrefix: "gpt-"},
		"a Google key chooses google":               {keys: []string{"GOOGLE_API_KEY"}, provider: "google", modelPrefix: "gemini-"},
		"with several keys Anthropic comes first":   {keys: []string{"GOOGLE_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"}, provider: "anthropic", modelPrefix: "claude-"},
		"no key leaves the provider to goose's own": {wantNoDefault: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			in := gooseInputs()
			in.Keys = map[string]string{}
			for _, k := range tc.keys {
				in.Keys[k] = "airlock-ph-x"
			}
			l, err := goose.Launch(in)
			if err != nil {
				t.Fatal(err)
			}
			c := gooseConfigOf(t, l)
			if tc.wantNoDefault {
				if c.Provider != "" || c.Model != "" {
					t.Errorf("provider %q model %q, want none set", c.Provider, c.Model)
				}
				return
			}
			if c.Provider != tc.provider || !strings.HasPrefix(c.Model, tc.modelPrefix) {
				t.Errorf("provider %q model %q, want %s and a %s* model", c.Provider, c.Model, tc.provider, tc.modelPrefix)
			}
		})
	}
}

func TestGooseConfig(t *testing.T) {
	in := gooseInputs()
	l, err := goose.Launch(in)
	if err != nil {
		t.Fatal(err)
	}
	c := gooseConfigOf(t, l)
	t.Run("tools run without asking and telemetry is off", func(t *testing.T) {
		if c.Mode != "auto" || c.Telemetry == nil || *c.Telemetry {
			t.Errorf("GOOSE_MODE %q, GOOSE_TELEMETRY_ENABLED %v; want auto and false", c.Mode, c.Telemetry)
		}
	})
	t.Run("the developer extension gives it a shell and files", func(t *testing.T) {
		if d := c.Extensions["developer"]; d.Type != "builtin" || !d.Enabled {
			t.Errorf("developer = %+v, want an enabled builtin", d)
		}
	})
	for _, m := range in.MCP {
		t.Run("the MCP server "+m.Name+" is the bridge over stdio with a timeout above the tool timeout", func(t *testing.T) {
			e, ok := c.Extensions[m.Name]
			if !ok {
				t.Fatalf("no extension %s in %v", m.Name, c.Extensions)
			}
			if e.Type != "stdio" || e.Name != m.Name || e.Cmd != m.Command || !slices.Equal(e.Args, m.Args) || !e.Enabled {
				t.Errorf("extension %+v, want stdio %s running %s %v, enabled", e, m.Name, m.Command, m.Args)
			}
			if time.Duration(e.Timeout)*time.Second <= in.ToolTimeout {
				t.Errorf("timeout %ds, want above %v", e.Timeout, in.ToolTimeout)
			}
		})
	}
	t.Run("an MCP server named like a built-in extension is refused", func(t *testing.T) {
		in := gooseInputs()
		in.MCP = append(in.MCP, MCPServer{Name: "developer", Command: "/run/airlock/bin/mcp-bridge", Args: []string{"developer"}})
		if _, err := goose.Launch(in); err == nil {
			t.Error("Launch accepted an MCP server called developer")
		}
	})
}

func TestGooseLaunch(t *testing.T) {
	tests := map[string]struct {
		args, wantPrefix, wantAfter []string
		resume                      string
		wantMarker                  bool // airlock names the session
	}{
		"a prompt runs headless in a session airlock names": {
			args: []string{"-t", "fix it"}, wantPrefix: []string{"goose", "run", "--name"}, wantAfter: []string{"-t", "fix it"}, wantMarker: true,
		},
		"an explicit run subcommand is not doubled": {
			args: []string{"run", "-t", "fix it"}, wantPrefix: []string{"goose", "run", "--name"}, wantAfter: []string{"-t", "fix it"}, wantMarker: true,
		},
		"no arguments start an interactive session": {
			wantPrefix: []string{"goose", "session", "--name"}, wantMarker: true,
		},
		"a resume names the session to go on with": {
			args: []string{"-t", "and now"}, resume: "airlock-0011223344556677",
			wantPrefix: []string{"goose", "run", "--resume", "--name", "airlock-0011223344556677"}, wantAfter: []string{"-t", "and now"}, wantMarker: true,
		},
		"the user's own session name wins": {
			args: []string{"-n", "mine", "-t", "x"}, wantPrefix: []string{"goose", "run", "-n", "mine"},
		},
		"--no-session gets no name (goose refuses both)": {
			args: []string{"--no-session", "-t", "x"}, wantPrefix: []string{"goose", "run", "--no-session"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			in := gooseInputs()
			in.Args, in.Resume = tc.args, tc.resume
			l, err := goose.Launch(in)
			if err != nil {
				t.Fatal(err)
			}
			if len(l.Argv) < len(tc.wantPrefix) || !slices.Equal(l.Argv[:len(tc.wantPrefix)], tc.wantPrefix) {
				t.Fatalf("Argv = %q, want it to start %q", l.Argv, tc.wantPrefix)
			}
			if tc.wantAfter != nil && !slices.Equal(l.Argv[len(l.Argv)-len(tc.wantAfter):], tc.wantAfter) {
				t.Errorf("Argv = %q, want it to end with the user's %q", l.Argv, tc.wantAfter)
			}
			marker := strings.TrimSpace(string(l.Files[".local/share/goose/airlock-session"]))
			if tc.wantMarker {
				i := slices.Index(l.Argv, "--name")
				if i < 0 || l.Argv[i+1] != marker || !gooseIDOK(marker) {
					t.Errorf("Argv %q names the session %q; want the name recorded for FindSession", l.Argv, marker)
				}
			} else if marker != "" {
				t.Errorf("the session marker holds %q for a session airlock did not name", marker)
			}
			if n := strings.Count(strings.Join(l.Argv, " "), "--name"); n > 1 {
				t.Errorf("Argv %q names the session %d times", l.Argv, n)
			}
		})
	}
	t.Run("two new runs get different session names", func(t *testing.T) {
		a, _ := goose.Launch(gooseInputs())
		b, _ := goose.Launch(gooseInputs())
		if string(a.Files[".local/share/goose/airlock-session"]) == string(b.Files[".local/share/goose/airlock-session"]) {
			t.Error("two runs share a session name")
		}
	})
}

func TestGooseLaunchKeepsKeysAndTheWorkspaceOut(t *testing.T) {
	in := gooseInputs()
	l, err := goose.Launch(in)
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(l.Argv, " ") + strings.Join(l.Env, " ") + strings.Join(goose.Env, " ")
	for p, b := range l.Files {
		all += string(b)
		if !filepath.IsLocal(p) || !(strings.HasPrefix(p, ".config/goose/") || strings.HasPrefix(p, ".local/share/goose/")) {
			t.Errorf("file %q is outside goose's private dirs in the home", p)
		}
	}
	if strings.Contains(all, in.Keys["ANTHROPIC_API_KEY"]) {
		t.Error("the key's placeholder is written into argv, env or files; it belongs in the variable goose reads")
	}
	if !strings.Contains(string(l.Files[".config/goose/.goosehints"]), in.Orientation) {
		t.Errorf(".goosehints = %q, want the orientation", l.Files[".config/goose/.goosehints"])
	}
}

func TestGooseFindSession(t *testing.T) {
	start := time.Now().Add(-time.Minute)
	type file struct {
		path, content string
		age           time.Duration
	}
	const store = ".local/share/goose/sessions/"
	const marker = ".local/share/goose/airlock-session"
	tests := map[string]struct {
		files []file
		want  string
	}{
		"no store means no session": {},
		"the session airlock named, when goose wrote its store during the run": {files: []file{
			{store + "sessions.db", "sqlite", 10 * time.Second},
			{marker, "airlock-0011223344556677\n", 2 * time.Minute},
		}, want: "airlock-0011223344556677"},
		"a store untouched since the run began means no session": {files: []file{
			{store + "sessions.db", "sqlite", 2 * time.Minute},
			{marker, "airlock-0011223344556677\n", 2 * time.Minute},
		}},
		"a marker the sandbox turned into a flag is ignored": {files: []file{
			{store + "sessions.db", "sqlite", 10 * time.Second},
			{marker, "--with-extension=evil\n", 5 * time.Second},
		}},
		"an older goose's newest .jsonl session": {files: []file{
			{store + "20251108_1.jsonl", "{}", 20 * time.Second},
			{store + "20251108_2.jsonl", "{}", 10 * time.Second},
		}, want: "20251108_2"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			home := t.TempDir()
			for _, f := range tc.files {
				p := filepath.Join(home, f.path)
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := os.WriteFile(p, []byte(f.content), 0o644); err != nil {
					t.Fatal(err)
				}
				mt := time.Now().Add(-f.age)
				os.Chtimes(p, mt, mt)
			}
			got, err := goose.FindSession(home, start)
			if err != nil || got != tc.want {
				t.Errorf("FindSession = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
