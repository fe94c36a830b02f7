package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/secrets"
)

const fullFile = `version: 1
backend: docker
image: airlock/go:latest
home: home-dir
env: [GOFLAGS, CI=1]
mounts:
  ro: [~/src/shared]
  rw: [cache]
limits:
  memory: 2g
  cpus: 1.5
  pids: 200
  tmp_size: 512m
  timeout: 30m
network:
  mode: proxy
  allow_hosts: ["*.github.com", "proxy.golang.org"]
  deny_hosts: [gist.github.com]
  endpoints: ["api.github.com GET /repos/*"]
  add_hosts: ["db.internal:10.0.0.5"]
  upstream_ca: certs/ca.pem
  dns_upstream: 1.1.1.1:53
secrets:
  - name: API_KEY
    from: env
    env: MY_API_KEY
    hosts: [api.example.com]
    body: true
  - name: TOKEN
    file: token.txt
    hosts: [a.example.com, b.example.com]
  - name: GH
    from: command
    command: gh auth token
    hosts: api.github.com
  - PLAIN@plain.example.com
workspace:
  mode: copy
  exclude: [node_modules]
  protect_git: false
  no_delete: true
  auto_apply: true
  apply_risky: true
audit:
  max_size: 100m
  keep: 3
approvals:
  mode: ask
  timeout: 90s
mcp_servers:
  github: {command: [github-mcp]}
agents: {default: claude, claude: {hosts: [extra.example.com]}}
`

func TestParseFullFile(t *testing.T) {
	dir := "/etc/proj"
	l, err := Parse(filepath.Join(dir, "config.yaml"), []byte(fullFile), SourceGlobal)
	if err != nil {
		t.Fatal(err)
	}
	s, or := Merge(l)
	home, _ := os.UserHomeDir()
	want := Spec{
		Backend: BackendDocker, Image: "airlock/go:latest", Home: "/etc/proj/home-dir",
		RO: []string{filepath.Join(home, "src/shared")}, RW: []string{"/etc/proj/cache"},
		Env:    []string{"GOFLAGS", "CI=1"},
		Limits: Limits{MemoryBytes: 2 << 30, CPUs: 1.5, Pids: 200, TmpBytes: 512 << 20, Timeout: 30 * time.Minute},
		Network: Network{
			Mode: ModeProxy, AllowHosts: []string{"*.github.com", "proxy.golang.org"}, DenyHosts: []string{"gist.github.com"},
			Endpoints: []string{"api.github.com GET /repos/*"}, AddHosts: []string{"db.internal:10.0.0.5"},
			UpstreamCA: "/etc/proj/certs/ca.pem", DNSUpstream: "1.1.1.1:53",
			Secrets: mustSpecs(t,
				"API_KEY=env:MY_API_KEY@api.example.com:body",
				"TOKEN=file:/etc/proj/token.txt@a.example.com,b.example.com",
				"GH=cmd:gh auth token@api.github.com",
				"PLAIN@plain.example.com",
			),
		},
		Workspace: Workspace{Mode: WorkspaceCopy, Exclude: []string{"node_modules"}, NoDelete: true, AutoApply: true, ApplyRisky: true},
		Audit:     Audit{MaxBytes: 100 << 20, Keep: 3},
		Approvals: Approvals{Mode: ApprovalsAsk, Timeout: 90 * time.Second},
	}
	mcp, agents := s.MCPServers, s.Agents
	s.MCPServers, s.Agents = nil, Agents{}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("Merge(Parse(full)) =\n%+v\nwant\n%+v", s, want)
	}
	if a, _ := Merge(Defaults(), mustParse(t, "approvals: ask\n")); a.Approvals.Mode != ApprovalsAsk {
		t.Errorf("approvals: ask gives %+v, want mode ask", a.Approvals)
	}
	if mcp == nil || agents.Default != "claude" || agents.By["claude"] == nil || len(agents.By["claude"].Hosts) != 1 {
		t.Errorf("mcp_servers = %v, agents = %+v; want them read", mcp, agents)
	}
	if got := or["limits.memory"][0].String(); got != "/etc/proj/config.yaml:10" {
		t.Errorf("origin of limits.memory = %q, want /etc/proj/config.yaml:10", got)
	}
	if got := or["secrets"][1].Line; got != 29 {
		t.Errorf("origin line of secrets[1] = %d, want 29", got)
	}
}

func TestParseBadInput(t *testing.T) {
	cases := map[string]struct{ text, want string }{
		"a syntax error":                        {"network:\n  allow_hosts: [a\n", "cfg.yaml:1: syntax error: did not find expected"},
		"a tab":                                 {"limits:\n\tmemory: 2g\n", "cfg.yaml:2: syntax error"},
		"a typo in a section":                   {"network:\n  allow_host: [x.com]\n", "cfg.yaml:2: network.allow_host: unknown key (did you mean allow_hosts?)"},
		"a key in the wrong section":            {"allow_hosts: [x.com]\n", "cfg.yaml:1: allow_hosts: unknown key (did you mean network.allow_hosts?)"},
		"an unknown top-level key":              {"version: 1\nfrobnicate: 3\n", "cfg.yaml:2: frobnicate: unknown key; known keys here: "},
		"a dash for an underscore":              {"workspace:\n  protect-git: true\n", "workspace.protect-git: unknown key (did you mean protect_git?)"},
		"a string for a bool":                   {"workspace:\n  no_delete: yes\n", "cfg.yaml:2: workspace.no_delete: expected true or false"},
		"a list for a string":                   {"image: [a, b]\n", "cfg.yaml:1: image: expected a docker image name"},
		"a bad size":                            {"limits:\n  memory: lots\n", `cfg.yaml:2: limits.memory: "lots": use a size such as 512m or 4g`},
		"a size without unit":                   {"limits:\n  memory: \"512\"\n", "did you mean 512m?"},
		"a duration without unit":               {"limits:\n  timeout: 30\n", "limits.timeout: expected a duration such as 90s or 30m (a number needs a unit"},
		"a negative number":                     {"limits:\n  cpus: -1\n", "limits.cpus: \"-1\": expected a number of CPUs such as 1.5, not negative"},
		"an unknown backend":                    {"backend: vmware\n", `cfg.yaml:1: backend: unknown value "vmware": use native, docker, vm or kubernetes`},
		"an unknown network mode":               {"network:\n  mode: tap\n", `network.mode: unknown value "tap": use auto, transparent or proxy`},
		"an unknown workspace mode":             {"workspace: {mode: cow}\n", `workspace.mode: unknown value "cow": use bind, overlay or copy`},
		"a future version":                      {"version: 2\n", "cfg.yaml:1: version: version 2 is not one this airlock reads"},
		"a scalar section":                      {"network: open\n", "cfg.yaml:1: network: expected a mapping of keys"},
		"a list at the top":                     {"- a\n- b\n", "cfg.yaml:1: expected a mapping"},
		"a key twice":                           {"image: a\nimage: b\n", "cfg.yaml:2: image: set twice (first on line 1)"},
		"a bad host":                            {"network:\n  allow_hosts:\n    - ok.com\n    - http://x.com/\n", "cfg.yaml:4: network.allow_hosts: \"http://x.com/\""},
		"an allow over a private public suffix": {"network:\n  allow_hosts: [\"*.workers.dev\"]\n", `cfg.yaml:2: network.allow_hosts: "*.workers.dev": *.workers.dev would allow every name under workers.dev, a public suffix`},
		"an allow over github.io":               {"network:\n  allow_hosts: [\"*.github.io\"]\n", "github.io, a public suffix"},
		"an allow over s3.amazonaws.com":        {"network:\n  allow_hosts: [\"*.s3.amazonaws.com\"]\n", "s3.amazonaws.com, a public suffix"},
		"an allow over co.uk":                   {"network:\n  allow_hosts: [\"*.co.uk\"]\n", "co.uk, a public suffix"},
		"a tunnel over a public suffix":         {"network:\n  allow_hosts: [{host: \"*.workers.dev\", intercept: false}]\n", "workers.dev, a public suffix"},
		"a bad endpoint":                        {"network:\n  endpoints: [api.x.com]\n", "cfg.yaml:2: network.endpoints:"},
		"a bad add_host":                        {"network:\n  add_hosts: [db]\n", "network.add_hosts: \"db\": expected NAME:IP"},
		"a bad env name":                        {"env: [1X=2]\n", `env: "1X" is not a variable name`},
		"a secret without hosts":                {"secrets:\n  - name: K\n", "cfg.yaml:2: secrets[0] (K): no hosts"},
		"a secret without name":                 {"secrets:\n  - hosts: [a.com]\n", "cfg.yaml:2: secrets[0]: no name"},
		"a secret key typo":                     {"secrets:\n  - name: K\n    host: [a.com]\n", "cfg.yaml:3: secrets[0].host: unknown key (did you mean hosts?)"},
		"a secret with unknown from":            {"secrets:\n  - {name: K, from: vault, hosts: [a.com]}\n", `secrets[0] (K).from: unknown value "vault": use env, file, command or github_app`},
		"a secret from file, no file":           {"secrets:\n  - {name: K, from: file, hosts: [a.com]}\n", "from: file needs file: PATH"},
		"a secret with two sources":             {"secrets:\n  - {name: K, env: A, command: b, hosts: [a.com]}\n", "more than one of env, file, command and github_app"},
		"a secret with a bad host":              {"secrets:\n  - {name: K, hosts: [\"a.com:443\"]}\n", "secrets[0] (K):"},
		"a secret flag with no host":            {"secrets: [K]\n", `secrets[0]: missing "@HOST"`},
		"an anchor merge":                       {"base: &b {image: x}\n", "base: unknown key"},
		"a merge key":                           {"network: &n {mode: auto}\nworkspace:\n  <<: *n\n", "keys must be plain names"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse("cfg.yaml", []byte(c.text), SourceGlobal)
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("Parse(%q) = %v, want a *config.Error", c.text, err)
			}
			if msg := err.Error(); !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") {
				t.Errorf("Parse(%q) = %q, want one line containing %q", c.text, msg, c.want)
			}
		})
	}
}

func TestParseEmptyAndComments(t *testing.T) {
	for _, text := range []string{"", "# only a comment\n", "---\n", "~\n", "network:\n"} {
		l, err := Parse("cfg.yaml", []byte(text), SourceGlobal)
		if err != nil || len(l.vals) != 0 {
			t.Errorf("Parse(%q) = %v, %v; want an empty layer", text, l.vals, err)
		}
	}
}

func TestParseTooLarge(t *testing.T) {
	big := make([]byte, MaxFileSize+1)
	if _, err := Parse("cfg.yaml", big, SourceGlobal); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Parse(1 MiB + 1) = %v, want too large", err)
	}
	p := filepath.Join(t.TempDir(), "big.yaml")
	os.WriteFile(p, big, 0o600)
	if _, err := ReadFile(p, SourceGlobal); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("ReadFile(1 MiB + 1) = %v, want too large", err)
	}
}

func TestParseEnvMapping(t *testing.T) {
	l, err := Parse("cfg.yaml", []byte("env:\n  CI: 1\n  NAME: x\n"), SourceGlobal)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := Merge(l); !reflect.DeepEqual(s.Env, []string{"CI=1", "NAME=x"}) {
		t.Errorf("env = %q, want CI=1 NAME=x", s.Env)
	}
}

// A secret from a config file fails as a --secret flag does when its source
// does: naming the secret, never quoting its value or its command.
func TestSecretSourceFailureNamesTheSecret(t *testing.T) {
	text := "secrets:\n" +
		"  - {name: FROM_ENV, env: NOT_SET_ANYWHERE, hosts: [a.com]}\n" +
		"  - {name: FROM_FILE, file: /nonexistent/s3cr3t-path, hosts: [a.com]}\n" +
		"  - {name: FROM_CMD, command: 'echo hunter2; exit 3', hosts: [a.com]}\n"
	l, err := Parse("cfg.yaml", []byte(text), SourceGlobal)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := Merge(l)
	src := secrets.DefaultSources()
	src.LookupEnv = func(string) (string, bool) { return "", false }
	for i, name := range []string{"FROM_ENV", "FROM_FILE", "FROM_CMD"} {
		_, err := s.Network.Secrets[i].Open(src)
		if err == nil || !strings.Contains(err.Error(), name) || strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "echo") {
			t.Errorf("ParseFlag(%s) = %v, want an error naming %s without the command or value", name, err, name)
		}
	}
}

func TestMergeLayers(t *testing.T) {
	global, err := Parse("/g/config.yaml", []byte(`
limits: {memory: 2g, pids: 10}
network:
  allow_hosts: [a.com, b.com]
  deny_hosts: [bad.a.com]
env: [X=1, Y]
secrets: ["K@a.com"]
`), SourceGlobal)
	if err != nil {
		t.Fatal(err)
	}
	project, err := Parse("/p/proj.yaml", []byte(`
limits: {memory: 4g}
network:
  allow_hosts: [c.com, a.com]
  deny_hosts: [worse.com]
env: [X=2]
secrets: ["K=env:OTHER@b.com"]
`), SourceProject)
	if err != nil {
		t.Fatal(err)
	}
	flags := NewLayer(SourceFlag, "")
	if err := flags.SetFlag("limits.pids", "--pids", []string{"99"}); err != nil {
		t.Fatal(err)
	}
	flags.SetFlag("network.allow_hosts", "--allow-host", []string{"d.com"})
	s, or := Merge(Defaults(), global, project, flags)
	if s.Limits.MemoryBytes != 4<<30 || s.Limits.Pids != 99 {
		t.Errorf("limits = %+v, want memory 4g from the project, pids 99 from the flag", s.Limits)
	}
	if want := []string{"a.com", "b.com", "c.com", "d.com"}; !reflect.DeepEqual(s.Network.AllowHosts, want) {
		t.Errorf("allow_hosts = %q, want the union %q", s.Network.AllowHosts, want)
	}
	if want := []string{"bad.a.com", "worse.com"}; !reflect.DeepEqual(s.Network.DenyHosts, want) {
		t.Errorf("deny_hosts = %q, want every layer's %q", s.Network.DenyHosts, want)
	}
	if want := []string{"Y", "X=2"}; !reflect.DeepEqual(s.Env, want) {
		t.Errorf("env = %q, want %q (the later X replaces)", s.Env, want)
	}
	if want := []string{"K=env:OTHER@b.com"}; !reflect.DeepEqual(flagsOf(s.Network.Secrets), want) {
		t.Errorf("secrets = %q, want %q", flagsOf(s.Network.Secrets), want)
	}
	for key, want := range map[string]string{
		"limits.memory":         "/p/proj.yaml:2",
		"limits.pids":           "flag --pids",
		"backend":               "default",
		"workspace.protect_git": "default",
	} {
		if got := or[key][0].String(); got != want {
			t.Errorf("origin of %s = %q, want %q", key, got, want)
		}
	}
	if got := or["network.allow_hosts"]; len(got) != 4 || got[0].String() != "/g/config.yaml:4" || got[3].String() != "flag --allow-host" {
		t.Errorf("origins of allow_hosts = %v", got)
	}
	if !s.Workspace.ProtectGit || s.Backend != BackendNative {
		t.Errorf("defaults lost: %+v", s)
	}
}

func TestSetFlagErrors(t *testing.T) {
	l := NewLayer(SourceFlag, "")
	for _, c := range []struct{ key, flag, value, want string }{
		{"limits.memory", "--memory", "lots", `--memory "lots": use a size`},
		{"workspace.mode", "--workspace-mode", "bogus", "use bind, overlay or copy"},
		{"backend", "--backend", "vmware", "use native, docker, vm or kubernetes"},
		{"limits.cpus", "--cpus", "-1", "--cpus must not be negative"},
	} {
		if err := l.SetFlag(c.key, c.flag, []string{c.value}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SetFlag(%s %q) = %v, want %q", c.flag, c.value, err, c.want)
		}
	}
}

func TestSizes(t *testing.T) {
	for in, want := range map[string]int64{"512m": 512 << 20, "4g": 4 << 30, "1.5G": 3 << 29, "2GiB": 2 << 30, "1048576": 1 << 20} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
		if got, _ := ParseSize(FormatSize(want)); got != want {
			t.Errorf("ParseSize(FormatSize(%d)) = %d", want, got)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(fullFile))
	f.Add([]byte("network:\n  allow_host: [x]\n"))
	f.Add([]byte("a: &a [*a]\n"))                      // a self-referencing alias
	f.Add([]byte("secrets: [{name: K, hosts: *h}]\n")) // an unknown alias
	f.Add([]byte("env: {X: [1]}\n"))
	f.Add([]byte("approvals: &a {x: *a}\n"))
	f.Add([]byte("secrets: [{name: A, github_app: {app_id: 1, installation_id: 2, private_key: /k, repositories: ~, permissions: {contents: [x]}}, hosts: [x], git: 1}]\n"))
	f.Add([]byte("hostexec: {commands: [{match: '^git', secrets: [{name: T, hosts: [h]}], ro: [~/x], ask: true}, &c {match: x}, *c]}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := Parse("fuzz.yaml", b, SourceRepo)
		if err == nil {
			Merge(Defaults(), l)
		}
	})
}

func mustParse(t *testing.T, text string) *Layer {
	t.Helper()
	l, err := Parse("/test.yaml", []byte(text), SourceGlobal)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestHostExecListsAddUpAcrossFiles(t *testing.T) {
	global := mustParse(t, "hostexec:\n  auto_deny: ['^rm ']\n  timeout: 30s\n")
	project := mustParse(t, "hostexec:\n  auto_approve: ['^git push( |$)']\n  ask: ['^docker build ']\n")
	s, _ := Merge(Defaults(), global, project)
	h := s.HostExec
	if len(h.AutoDeny) != 1 || len(h.AutoApprove) != 1 || len(h.Ask) != 1 || h.Timeout != 30*time.Second || !h.Enabled() {
		t.Fatalf("merged hostexec = %+v, want the global deny, the project's approve and ask, 30s", h)
	}
	if _, err := Parse("/x.yaml", []byte("hostexec: {auto_aprove: [x]}\n"), SourceGlobal); err == nil || !strings.Contains(err.Error(), "did you mean auto_approve") {
		t.Errorf("a typo in hostexec: %v", err)
	}
}

// A deny may be as broad as it likes: it only narrows.
func TestBroadDenyIsAccepted(t *testing.T) {
	l, err := Parse("cfg.yaml", []byte("network:\n  deny_hosts: [\"*.workers.dev\", \"*.com\"]\n  allow_hosts: [\"*.abc.workers.dev\"]\n"), SourceGlobal)
	if err != nil || !l.Set("network.deny_hosts") {
		t.Errorf("Parse(broad denies) = %v, want them accepted", err)
	}
}
