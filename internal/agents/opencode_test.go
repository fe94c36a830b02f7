package agents

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// opencodeConfig is the OPENCODE_CONFIG_CONTENT of a launch.
func opencodeConfig(t *testing.T, l Launch) (string, map[string]any) {
	t.Helper()
	for _, e := range l.Env {
		if v, ok := strings.CutPrefix(e, "OPENCODE_CONFIG_CONTENT="); ok {
			var cfg map[string]any
			if err := json.Unmarshal([]byte(v), &cfg); err != nil {
				t.Fatalf("OPENCODE_CONFIG_CONTENT is not JSON: %v", err)
			}
			return v, cfg
		}
	}
	t.Fatal("no OPENCODE_CONFIG_CONTENT")
	return "", nil
}

func TestOpenCodeLaunch(t *testing.T) {
	p, err := Lookup("opencode")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		resume string
		want   []string
	}{
		{"run is passed as given", []string{"run", "-m", "openai/gpt-5.5", "PROMPT"}, "",
			[]string{"opencode", "run", "-m", "openai/gpt-5.5", "PROMPT"}},
		{"a resumed run gets -s ID right after run", []string{"run", "--format", "json", "PROMPT"}, "ses_1",
			[]string{"opencode", "run", "-s", "ses_1", "--format", "json", "PROMPT"}},
		{"a run that names its session keeps it", []string{"run", "--session", "ses_9", "PROMPT"}, "ses_1",
			[]string{"opencode", "run", "--session", "ses_9", "PROMPT"}},
		{"the TUI resumes with -s ID", nil, "ses_1",
			[]string{"opencode", "-s", "ses_1"}},
		{"the TUI with flags resumes with -s ID first", []string{"-m", "openai/gpt-5.5"}, "ses_1",
			[]string{"opencode", "-s", "ses_1", "-m", "openai/gpt-5.5"}},
		{"another subcommand is passed through untouched", []string{"session", "list"}, "ses_1",
			[]string{"opencode", "session", "list"}},
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
			all := launchText(l)
			for env, v := range in.Keys {
				if strings.Contains(all, v) {
					t.Errorf("the value of %s is in the launch", env)
				}
			}
		})
	}
}

func TestOpenCodeConfig(t *testing.T) {
	p, _ := Lookup("opencode")
	in := launchInputs(p, []string{"run", "x"}, "")
	l, err := p.Launch(in)
	if err != nil {
		t.Fatal(err)
	}
	raw, cfg := opencodeConfig(t, l)
	mcp, _ := cfg["mcp"].(map[string]any)
	for _, tc := range []struct {
		name string
		ok   func() bool
	}{
		{"every MCP server is a local command running the bridge with its name", func() bool {
			for _, m := range in.MCP {
				s, _ := mcp[m.Name].(map[string]any)
				if s["type"] != "local" || s["enabled"] != true || !reflect.DeepEqual(s["command"], []any{"/run/airlock/bin/mcp-bridge", m.Name}) {
					return false
				}
			}
			return len(mcp) == len(in.MCP)
		}},
		{"each server's tool timeout is above the approval wait", func() bool {
			for _, s := range mcp {
				if ms, _ := s.(map[string]any)["timeout"].(float64); time.Duration(ms)*time.Millisecond <= in.ToolTimeout {
					return false
				}
			}
			return true
		}},
		{"the default MCP timeout is above the approval wait too", func() bool {
			ms, _ := cfg["experimental"].(map[string]any)["mcp_timeout"].(float64)
			return time.Duration(ms)*time.Millisecond > in.ToolTimeout
		}},
		{"every permission is allowed (the sandbox is the boundary)", func() bool { return cfg["permission"] == "allow" }},
		{"sharing and auto-update are off", func() bool { return cfg["share"] == "disabled" && cfg["autoupdate"] == false }},
		{"the orientation is an instructions file in the private home, written verbatim", func() bool {
			ins, _ := cfg["instructions"].([]any)
			if len(ins) != 1 {
				return false
			}
			path, _ := ins[0].(string)
			rel, err := filepath.Rel(in.Home, path)
			return err == nil && !strings.HasPrefix(rel, "..") && string(l.Files[rel]) == in.Orientation+"\n"
		}},
		{"no file goes outside the home", func() bool {
			for name := range l.Files {
				if filepath.IsAbs(name) || strings.HasPrefix(filepath.Clean(name), "..") {
					return false
				}
			}
			return true
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.ok() {
				t.Errorf("config %s\nfiles %q", raw, l.Files)
			}
		})
	}
	t.Run("the profile turns off model fetches, updates and plugins", func(t *testing.T) {
		for _, want := range []string{"OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_DEFAULT_PLUGINS=1", "OPENCODE_PURE=1"} {
			found := false
			for _, e := range p.Env {
				found = found || e == want
			}
			if !found {
				t.Errorf("%s missing from %q", want, p.Env)
			}
		}
	})
	t.Run("each key goes to its own provider only", func(t *testing.T) {
		want := map[string]string{"OPENAI_API_KEY": "api.openai.com", "ANTHROPIC_API_KEY": "api.anthropic.com", "GOOGLE_GENERATIVE_AI_API_KEY": "generativelanguage.googleapis.com"}
		for _, k := range p.Keys {
			if len(k.Hosts) != 1 || k.Hosts[0] != want[k.Env] {
				t.Errorf("key %s → %v", k.Env, k.Hosts)
			}
		}
	})
	t.Run("the real opencode reads the config as written", func(t *testing.T) {
		bin := agentBinary(t, "opencode")
		home := t.TempDir()
		cmd := exec.Command(bin, "debug", "config")
		cmd.Dir = t.TempDir()
		cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "XDG_DATA_HOME="+filepath.Join(home, ".local/share"),
			"XDG_CACHE_HOME="+filepath.Join(home, ".cache"), "XDG_STATE_HOME="+filepath.Join(home, ".local/state"), "OPENCODE_CONFIG_CONTENT="+raw)
		cmd.Env = append(cmd.Env, p.Env...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("opencode debug config: %v\n%s", err, out)
		}
		var got map[string]any
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("opencode debug config: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(got["mcp"], cfg["mcp"]) || !reflect.DeepEqual(got["instructions"], cfg["instructions"]) {
			t.Errorf("opencode resolved mcp %v, instructions %v", got["mcp"], got["instructions"])
		}
	})
}

func TestOpenCodeFindSession(t *testing.T) {
	p, _ := Lookup("opencode")
	start := time.Now().Add(-time.Minute).UTC()
	ts := func(d time.Duration) string { return start.Add(d).Format("2006-01-02T15:04:05.000Z") }
	home := func(lines ...string) string {
		h := t.TempDir()
		dir := filepath.Join(h, ".local", "share", "opencode", "log")
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "opencode.log"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
		return h
	}
	created := func(d time.Duration, id, parent string) string {
		return "timestamp=" + ts(d) + " level=INFO run=b message=created id=" + id + " slug=x version=1.18.33 projectID=global directory=/w path=w workspaceID=undefined parentID=" + parent + ` title="New session"`
	}
	loop := func(d time.Duration, id string) string {
		return "timestamp=" + ts(d) + " level=INFO run=b message=loop session.id=" + id + " step=0"
	}
	fresh := home(
		created(-time.Hour, "ses_old", "undefined"), loop(-time.Hour, "ses_old"),
		created(time.Second, "ses_main", "undefined"), loop(2*time.Second, "ses_main"),
		created(3*time.Second, "ses_child", "ses_main"), loop(4*time.Second, "ses_child"),
		"timestamp="+ts(5*time.Second)+" level=INFO run=b message=stream providerID=openai session.id=ses_child",
	)
	resumed := home(created(-time.Hour, "ses_old", "undefined"), loop(-time.Hour, "ses_old"), loop(time.Second, "ses_old"))
	for _, tc := range []struct {
		name  string
		home  string
		since time.Time
		want  string
	}{
		{"a session created since the start is found, not the sub-agent's it spawned", fresh, start, "ses_main"},
		{"sessions before the start are not found", fresh, start.Add(10 * time.Second), ""},
		{"a resumed session is found from its loop", resumed, start, "ses_old"},
		{"a home without logs has none", t.TempDir(), start, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := p.FindSession(tc.home, tc.since)
			if err != nil || got != tc.want {
				t.Errorf("FindSession = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
