package config

import (
	"bytes"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func layer(t *testing.T, src Source, name, text string) *Layer {
	t.Helper()
	l, err := Parse(name, []byte(text), src)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func flags(t *testing.T, kv ...string) *Layer {
	t.Helper()
	l := NewLayer(SourceFlag, "")
	for i := 0; i+1 < len(kv); i += 2 {
		key := kv[i]
		if err := l.SetFlag(key, "--"+lookup(key).flag, []string{kv[i+1]}); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func TestAgentsMergeLikeEveryOtherSection(t *testing.T) {
	const global = "/home/u/.config/airlock/config.yaml"
	const project = "/home/u/.config/airlock/projects/p.yaml"
	const repo = "/src/app/.airlock.yaml"
	type check struct {
		key  string // a key of the merged spec's view (Show), or "applied KEY" after ApplyAgent(claude)
		want string // its value as Show writes it, then "@" and its origin(s)
	}
	for name, c := range map[string]struct {
		layers []*Layer
		checks []check
	}{
		"a later file's scalar replaces an earlier one's, with its origin": {
			layers: []*Layer{
				layer(t, SourceGlobal, global, "agents:\n  default: codex\n  claude:\n    limits: {memory: 2g}\n    backend: native\n"),
				layer(t, SourceProject, project, "agents:\n  default: claude\n  claude:\n    limits: {memory: 4g}\n"),
			},
			checks: []check{
				{"agents.default", "claude@" + project + ":2"},
				{"agents.claude.limits.memory", "4g@" + project + ":4"},
				{"agents.claude.backend", "native@" + global + ":5"},
			},
		},
		"lists add up across files, each item keeping its origin": {
			layers: []*Layer{
				layer(t, SourceGlobal, global, "agents:\n  claude:\n    hosts: [a.example.com]\n    args: [--model, opus]\n"),
				layer(t, SourceProject, project, "agents:\n  claude:\n    hosts: [b.example.com, a.example.com]\n"),
				layer(t, SourceRepo, repo, "agents: {claude: {hosts: [c.example.com]}}\n"),
			},
			checks: []check{
				{"agents.claude.hosts", "a.example.com b.example.com c.example.com@" + global + ":3 " + project + ":3 " + repo + ":1"},
				{"agents.claude.args", "--model opus@" + global + ":4 " + global + ":4"},
				{"applied network.allow_hosts", "a.example.com b.example.com c.example.com@" + global + ":3 " + project + ":3 " + repo + ":1"},
			},
		},
		"an agent's setting replaces the top-level one for its runs": {
			layers: []*Layer{
				Defaults(),
				layer(t, SourceGlobal, global, "limits: {memory: 1g, timeout: 10m}\nbudget: {usd: 5}\nagents:\n  claude:\n    limits: {memory: 8g, pids: 300}\n    budget: {usd: 2, tokens: 1000}\n    image: agents:latest\n"),
			},
			checks: []check{
				{"limits.memory", "1g@" + global + ":1"},
				{"applied limits.memory", "8g@" + global + ":5"},
				{"applied limits.pids", "300@" + global + ":5"},
				{"applied limits.timeout", "10m@" + global + ":1"},
				{"applied budget.usd", "2@" + global + ":6"},
				{"applied budget.tokens", "1000@" + global + ":6"},
				{"applied image", "agents:latest@" + global + ":7"},
			},
		},
		"a flag beats the agent's setting": {
			layers: []*Layer{
				Defaults(),
				layer(t, SourceProject, project, "agents:\n  claude:\n    limits: {memory: 8g, cpus: 4}\n    backend: docker\n"),
				flags(t, "limits.memory", "512m", "backend", "native"),
			},
			checks: []check{
				{"applied limits.memory", "512m@flag --memory"},
				{"applied backend", "native@flag --backend"},
				{"applied limits.cpus", "4@" + project + ":3"},
			},
		},
		"a deny anywhere stays, whatever an agent's hosts say": {
			layers: []*Layer{
				layer(t, SourceGlobal, global, "network: {deny_hosts: [evil.example.com]}\n"),
				layer(t, SourceProject, project, "agents: {claude: {hosts: [evil.example.com, ok.example.com]}}\n"),
			},
			checks: []check{
				{"applied network.deny_hosts", "evil.example.com@" + global + ":1"},
				{"applied network.allow_hosts", "evil.example.com ok.example.com@" + project + ":1 " + project + ":1"},
			},
		},
		"another agent's settings do not apply": {
			layers: []*Layer{
				layer(t, SourceGlobal, global, "limits: {memory: 1g}\nagents: {codex: {limits: {memory: 9g}, hosts: [x.example.com]}}\n"),
			},
			checks: []check{
				{"applied limits.memory", "1g@" + global + ":1"},
				{"agents.codex.limits.memory", "9g@" + global + ":2"},
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			sp, or := Merge(c.layers...)
			l := &Loaded{Spec: sp, Origins: Origins{}}
			for k, v := range or {
				l.Origins[k] = append([]Origin(nil), v...)
			}
			applied := &Loaded{Spec: sp, Origins: Origins{}}
			for k, v := range or {
				applied.Origins[k] = append([]Origin(nil), v...)
			}
			// Lists in the spec are shared with l's: copy before applying.
			applied.Spec.Network.AllowHosts = append([]string(nil), sp.Network.AllowHosts...)
			applied.ApplyAgent("claude")
			for _, ch := range c.checks {
				from := l
				key, ok := strings.CutPrefix(ch.key, "applied ")
				if ok {
					from = applied
				}
				vals, _ := values(from.Spec)
				var got string
				switch v := vals[key].(type) {
				case []string:
					got = strings.Join(v, " ")
				case nil:
					got = "<unset>"
				default:
					got = strings.TrimSpace(strings.Trim(showOne(v), "\""))
				}
				var os []string
				for _, o := range from.Origins[key] {
					os = append(os, o.String())
				}
				if got += "@" + strings.Join(os, " "); got != ch.want {
					t.Errorf("%s = %q, want %q", ch.key, got, ch.want)
				}
			}
		})
	}
}

func showOne(v any) string {
	switch v := v.(type) {
	case lit:
		return string(v)
	case string:
		return v
	}
	return "?"
}

func TestAgentsSectionBadInput(t *testing.T) {
	for text, want := range map[string]string{
		"agents: {Claude: {}}\n":                       "agents.Claude: not an agent's name",
		"agents: {claude: {hosts: [\"*.com\"]}}\n":     `agents.claude.hosts: "*.com": *.com would allow every name under com`,
		"agents: {claude: {limits: {memory: lots}}}\n": `agents.claude.limits.memory: "lots": use a size`,
		"agents: {claude: {backend: vmware}}\n":        `agents.claude.backend: unknown value "vmware": use native, docker or vm`,
		"agents: {claude: {host: [a.example.com]}}\n":  "agents.claude.host: unknown key (did you mean hosts?)",
		"agents: {claude: {limits: {timeout: 30}}}\n":  "agents.claude.limits.timeout: expected a duration",
		"agents: {default: [claude]}\n":                "agents.default: expected an agent's name",
		"agents: [claude]\n":                           "agents: expected a mapping of keys",
		"agents: {claude: {budget: {usd: -1}}}\n":      `agents.claude.budget.usd: "-1"`,
	} {
		_, err := Parse("/c.yaml", []byte(text), SourceGlobal)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", text, err, want)
		}
	}
}

func TestConfigShowsEachAgentsSettingsWithTheirOrigins(t *testing.T) {
	sp, or := Merge(Defaults(),
		layer(t, SourceGlobal, "/g.yaml", "agents:\n  default: claude\n  codex: {args: [--full-auto]}\n  claude:\n    hosts: [docs.example.com]\n    limits: {timeout: 30m}\n"))
	var b bytes.Buffer
	if err := Show(&b, sp, or); err != nil {
		t.Fatal(err)
	}
	want := "agents:\n  default: claude  # /g.yaml:2\n  claude:\n    hosts:\n      - docs.example.com  # /g.yaml:5\n    limits:\n      timeout: 30m  # /g.yaml:6\n  codex:\n    args:\n      - --full-auto  # /g.yaml:3\n"
	if got := b.String(); !strings.Contains(got, want) {
		t.Errorf("Show =\n%s\nwant it to hold\n%s", got, want)
	}
	// What Show writes reads back as the same settings.
	l, err := Parse("/again.yaml", b.Bytes(), SourceGlobal)
	if err != nil {
		t.Fatalf("Show's output does not parse: %v\n%s", err, b.String())
	}
	again, _ := Merge(l)
	if again.Agents.By["claude"].Limits.Timeout != 30*time.Minute || again.Agents.Default != "claude" || again.Agents.By["codex"].Args[0] != "--full-auto" {
		t.Errorf("read back as %+v", again.Agents)
	}
}

// A repository's .airlock.yaml is written by whoever can write the
// repository (the sandbox too): its agents section applies only while the
// file is trusted with exactly that content, as every other section does.
func TestAgentsFromARepositoryFileNeedTrust(t *testing.T) {
	dir, project, ws := tree(t)
	write(t, GlobalFile(dir), "agents: {claude: {hosts: [global.example.com]}}\n")
	repo := filepath.Join(project, RepoFileName)
	text := "agents:\n  default: claude\n  claude: {hosts: [repo.example.com], backend: docker}\n"
	write(t, repo, text)
	hosts := func(l *Loaded) string { return strings.Join(l.Spec.Agents.By["claude"].Hosts, " ") }

	l, err := Load(Options{Workspace: ws, Dir: dir})
	if err != nil || hosts(l) != "global.example.com" || l.Spec.Agents.Default != "" || l.Spec.Agents.By["claude"].Backend != "" {
		t.Fatalf("untrusted: %+v, %v; want the global file's agents only", l.Spec.Agents, err)
	}
	if err := Trust(dir, repo, []byte(text)); err != nil {
		t.Fatal(err)
	}
	l, err = Load(Options{Workspace: ws, Dir: dir})
	if err != nil || hosts(l) != "global.example.com repo.example.com" || l.Spec.Agents.Default != "claude" || l.Spec.Agents.By["claude"].Backend != BackendDocker {
		t.Fatalf("trusted: %+v, %v; want the repository's agents too", l.Spec.Agents, err)
	}
	// The sandbox rewrites it: its agents no longer apply.
	write(t, repo, "agents:\n  claude: {hosts: [\"*.evil.example.com\"]}\n")
	l, err = Load(Options{Workspace: ws, Dir: dir})
	if err != nil || hosts(l) != "global.example.com" || l.Spec.Agents.Default != "" {
		t.Fatalf("changed: %+v, %v; want the global file's agents only", l.Spec.Agents, err)
	}
}

// FuzzAgentsSection parses an agents section: whatever parses merges, and
// config show writes it back as text that parses to the same settings.
func FuzzAgentsSection(f *testing.F) {
	f.Add("default: claude\nclaude: {hosts: [a.example.com], limits: {memory: 4g}}\n")
	f.Add("codex: {args: [--full-auto, -m, o3], backend: docker, image: x:1}\n")
	f.Add("claude: {keys: [ANTHROPIC_API_KEY], budget: {usd: 2.5, tokens: 100}}\n")
	f.Fuzz(func(t *testing.T, body string) {
		text := "agents:\n" + indent(body)
		l, err := Parse("/f.yaml", []byte(text), SourceGlobal)
		if err != nil {
			return
		}
		sp, _ := Merge(l)
		var b bytes.Buffer
		if err := Show(&b, sp, nil); err != nil {
			t.Fatalf("Show: %v", err)
		}
		l2, err := Parse("/again.yaml", b.Bytes(), SourceGlobal)
		if err != nil {
			t.Fatalf("Show's output does not parse: %v\n%s\nfrom\n%s", err, b.String(), text)
		}
		again, _ := Merge(l2)
		if !reflect.DeepEqual(normAgents(again.Agents), normAgents(sp.Agents)) {
			t.Fatalf("read back as %+v, want %+v\n%s", again.Agents, sp.Agents, b.String())
		}
	})
}

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}

// normAgents drops agents with no settings (Show writes nothing for them).
func normAgents(a Agents) Agents {
	out := Agents{Default: a.Default, By: map[string]*Agent{}}
	for n, x := range a.By {
		if !reflect.DeepEqual(*x, Agent{}) {
			out.By[n] = x
		}
	}
	return out
}
