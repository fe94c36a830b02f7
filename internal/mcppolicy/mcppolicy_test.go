package mcppolicy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func ptr[T any](v T) *T { return &v }

// tree builds, under a fresh directory T:
//
//	T/root/a.txt, T/root/sub/           the server's root
//	T/root/link-out -> T/outside        a symlink out of the root
//	T/root/link-prot -> T/airlock       a symlink into the protected dir
//	T/root/dangling -> T/outside/new    a link to a file not yet created
//	T/root/deep -> T/outside/inner      so T/root/deep/.. is T/outside to the kernel
//	T/root/loop1 <-> T/root/loop2       a loop
//	T/root2/, T/outside/inner/, T/airlock/config.yaml
func tree(t testing.TB) string {
	t.Helper()
	T, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"root/sub", "root2", "outside/inner", "airlock"} {
		if err := os.MkdirAll(filepath.Join(T, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"root/a.txt", "airlock/config.yaml"} {
		if err := os.WriteFile(filepath.Join(T, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"root/link-out":  T + "/outside",
		"root/link-prot": "../airlock",
		"root/dangling":  T + "/outside/new",
		"root/deep":      T + "/outside/inner",
		"root/loop1":     "loop2",
		"root/loop2":     "loop1",
	} {
		if err := os.Symlink(target, filepath.Join(T, link)); err != nil {
			t.Fatal(err)
		}
	}
	return T
}

func testRules() []Rule {
	roots := []string{RootsToken}
	return []Rule{
		{Tool: "read_*", Verdict: Allow, When: []Condition{{Arg: "path", PathWithin: roots}}},
		{Tool: "read_multiple_files", Verdict: Allow, When: []Condition{{Arg: "paths", PathWithin: roots}}},
		{Tool: "write_file", Verdict: Escalate, When: []Condition{{Arg: "path", PathWithin: roots}}},
		{Tool: "write_file", Verdict: Deny, Name: "no env files", When: []Condition{{Arg: "path", Glob: "*.env"}}},
		{Tool: "fetch", Verdict: Allow, When: []Condition{{Arg: "url", HostIn: []string{"*.github.com", "pypi.org", "10.0.0.1"}}}},
		{Tool: "fetch", Verdict: Deny, Name: "evil", When: []Condition{{Arg: "url", HostIn: []string{"evil.com"}}}},
		{Tool: "git_push", Verdict: Allow},
		{Tool: "git_push", Verdict: Deny, Name: "no force", When: []Condition{{Arg: "force", Equals: ptr("true")}}},
		{Tool: "git_push", Verdict: Escalate, Name: "default remote", When: []Condition{{Arg: "remote", Present: ptr(false)}}},
		{Tool: "run", Verdict: Allow, When: []Condition{{Arg: "mode", Equals: ptr("1")}}},
		{Tool: "opts", Verdict: Allow, When: []Condition{{Arg: "options.mode", Equals: ptr("ro")}}},
		{Tool: "checkout", Verdict: Allow, When: []Condition{{Arg: "branch", Regex: "main|dev"}}},
	}
}

func testPolicy(t testing.TB, T string) *Policy {
	t.Helper()
	p, err := New(Config{Rules: testRules(), Roots: []string{T + "/root"}, Protected: []string{T + "/airlock"}, Home: T})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const (
	readRule   = `allow read_* when path within [@roots]`
	noMatch    = `rules name tool %q but none matches these arguments; that gets deny`
	writeRule  = `escalate write_file when path within [@roots]`
	fetchRule  = `allow fetch when url host in [*.github.com pypi.org 10.0.0.1]`
	fetchAllow = `allowed by rule "` + fetchRule + `": `
)

func TestDecide(t *testing.T) {
	T := tree(t)
	p := testPolicy(t, T)
	nm := func(tool string) string { return strings.ReplaceAll(noMatch, "%q", `"`+tool+`"`) }
	tests := map[string]struct {
		tool, args string // args: JSON with $T for the tree
		want       Verdict
		rule       string
		reason     string
	}{
		// Verdicts and their order.
		"a read inside the root is allowed": {"read_file", `{"path":"$T/root/a.txt"}`, Allow, readRule,
			`allowed by rule "` + readRule + `": path "$T/root/a.txt" resolves to $T/root/a.txt, within $T/root`},
		"an unknown tool is denied":                       {"rm_rf", `{}`, Deny, "unknown tool", `no rule names tool "rm_rf"; unknown tools get deny`},
		"a named tool whose rules do not match is denied": {"read_file", `{"path":"/etc/passwd"}`, Deny, "no matching rule", nm("read_file")},
		"escalate beats allow":                            {"git_push", `{}`, Escalate, "default remote", `escalated by rule "default remote": remote is absent`},
		"allow alone is allowed":                          {"git_push", `{"remote":"origin"}`, Allow, "allow git_push", `allowed by rule "allow git_push" for every call`},
		"deny beats escalate": {"write_file", `{"path":"$T/root/.env"}`, Deny, "no env files",
			`denied by rule "no env files": path "$T/root/.env" is like "*.env"`},
		"a write inside the root is escalated": {"write_file", `{"path":"notes.md"}`, Escalate, writeRule,
			`escalated by rule "` + writeRule + `": path "notes.md" resolves to $T/root/notes.md, within $T/root`},

		// Paths.
		"a relative path resolves against the first root": {"read_file", `{"path":"sub/x"}`, Allow, readRule,
			`allowed by rule "` + readRule + `": path "sub/x" resolves to $T/root/sub/x, within $T/root`},
		"dot-dot cannot climb out of the root":                     {"read_file", `{"path":"$T/root/../outside/x"}`, Deny, "no matching rule", nm("read_file")},
		"a relative dot-dot cannot climb out of the root":          {"read_file", `{"path":"../outside/x"}`, Deny, "no matching rule", nm("read_file")},
		"a sibling named like the root is not within it":           {"read_file", `{"path":"$T/root2/x"}`, Deny, "no matching rule", nm("read_file")},
		"a symlink out of the root is followed":                    {"read_file", `{"path":"$T/root/link-out/x"}`, Deny, "no matching rule", nm("read_file")},
		"a new file under a symlinked dir resolves via its parent": {"read_file", `{"path":"link-out/new/file"}`, Deny, "no matching rule", nm("read_file")},
		"a dangling symlink resolves to where the file would be":   {"read_file", `{"path":"dangling"}`, Deny, "no matching rule", nm("read_file")},
		"dot-dot after a symlink is taken the kernel's way too":    {"read_file", `{"path":"deep/../a.txt"}`, Deny, "no matching rule", nm("read_file")},
		"a relative path through a symlink loop is denied before any rule": {"read_file", `{"path":"loop1/x"}`, Deny, "protected",
			`protected: argument path "loop1/x" cannot be resolved (more than 40 symlinks (a loop?)), so it might name a protected path`},
		"a path that is a number fails the condition": {"read_file", `{"path":7}`, Deny, "no matching rule", nm("read_file")},
		"an absent path fails the condition":          {"read_file", `{}`, Deny, "no matching rule", nm("read_file")},
		"every path in a list must be within":         {"read_multiple_files", `{"paths":["a.txt","$T/outside/x"]}`, Deny, "no matching rule", nm("read_multiple_files")},
		"a list of paths within the root is allowed": {"read_multiple_files", `{"paths":["a.txt","sub"]}`, Allow, "allow read_multiple_files when paths within [@roots]",
			`allowed by rule "allow read_multiple_files when paths within [@roots]": paths "a.txt" resolves to $T/root/a.txt, within $T/root, paths "sub" resolves to $T/root/sub, within $T/root`},
		"a list with a non-string fails the condition": {"read_multiple_files", `{"paths":["a.txt",1]}`, Deny, "no matching rule", nm("read_multiple_files")},
		"a file URL is a path":                         {"read_file", `{"path":"file://$T/root/a.txt"}`, Allow, readRule, `allowed by rule "` + readRule + `": path "file://$T/root/a.txt" resolves to $T/root/a.txt, within $T/root`},

		// Protected paths.
		"the protected dir is denied whatever the rules": {"read_file", `{"path":"$T/airlock/config.yaml"}`, Deny, "protected",
			`protected: argument path "$T/airlock/config.yaml" resolves to $T/airlock/config.yaml, inside protected $T/airlock`},
		"a symlink into the protected dir is denied": {"read_file", `{"path":"link-prot/config.yaml"}`, Deny, "protected",
			`protected: argument path "link-prot/config.yaml" resolves to $T/airlock/config.yaml, inside protected $T/airlock`},
		"an absolute path under any argument name is checked": {"git_push", `{"remote":"origin","message":"$T/airlock/decisions.json"}`, Deny, "protected",
			`protected: argument message "$T/airlock/decisions.json" resolves to $T/airlock/decisions.json, inside protected $T/airlock`},
		"a relative path under a path-named key is checked": {"write_file", `{"file_path":"sub/../link-prot"}`, Deny, "protected",
			`protected: argument file_path "sub/../link-prot" resolves to $T/airlock, inside protected $T/airlock`},
		"a nested list of paths is checked": {"git_push", `{"opts":{"add":["a","$T/airlock/"]}}`, Deny, "protected",
			`protected: argument add "$T/airlock/" resolves to $T/airlock, inside protected $T/airlock`},
		"an object key that is a path is checked": {"git_push", `{"files":{"$T/airlock/x":"data"}}`, Deny, "protected",
			`protected: argument key "$T/airlock/x" resolves to $T/airlock/x, inside protected $T/airlock`},
		"a tilde path is expanded to the home dir": {"read_file", `{"path":"~/airlock/x"}`, Deny, "protected",
			`protected: argument path "~/airlock/x" resolves to $T/airlock/x, inside protected $T/airlock`},
		"a file URL is checked": {"fetch", `{"url":"file://$T/airlock/x"}`, Deny, "protected",
			`protected: argument url "file://$T/airlock/x" resolves to $T/airlock/x, inside protected $T/airlock`},
		"a path that cannot be resolved is denied as possibly protected": {"read_file", `{"path":"$T/root/loop1"}`, Deny, "protected",
			`protected: argument path "$T/root/loop1" cannot be resolved (more than 40 symlinks (a loop?)), so it might name a protected path`},
		"multi-line text is not a path": {"git_push", `{"remote":"o","message":"$T/airlock/x\nmore"}`, Allow, "allow git_push", `allowed by rule "allow git_push" for every call`},

		// URLs.
		"one label below a wildcard host matches": {"fetch", `{"url":"https://api.github.com/repos"}`, Allow, fetchRule,
			fetchAllow + `url host api.github.com matches *.github.com`},
		"the apex matches a wildcard host":              {"fetch", `{"url":"https://github.com"}`, Allow, fetchRule, fetchAllow + `url host github.com matches *.github.com`},
		"two labels below a wildcard host do not match": {"fetch", `{"url":"https://a.b.github.com/"}`, Deny, "no matching rule", nm("fetch")},
		"a host is compared lower case without trailing dot": {"fetch", `{"url":"HTTPS://PyPI.org.:443/simple"}`, Allow, fetchRule,
			fetchAllow + `url host pypi.org matches pypi.org`},
		"userinfo does not hide the real host": {"fetch", `{"url":"https://pypi.org@evil.com/"}`, Deny, "evil",
			`denied by rule "evil": url host evil.com matches evil.com`},
		"a URL parsers disagree on cannot be checked so a deny rule matches": {"fetch", `{"url":"https://evil.com\\@pypi.org/"}`, Deny, "evil",
			`denied by rule "evil": url "https://evil.com\\@pypi.org/" is not a URL that can be checked: contains '\\', which URL parsers read differently`},
		"an IP literal matches by address":                {"fetch", `{"url":"http://10.0.0.1:8080/"}`, Allow, fetchRule, fetchAllow + `url host 10.0.0.1 matches 10.0.0.1`},
		"an IPv4-mapped IPv6 literal is the IPv4 address": {"fetch", `{"url":"http://[::ffff:10.0.0.1]/"}`, Allow, fetchRule, fetchAllow + `url host 10.0.0.1 matches 10.0.0.1`},
		"a numeric host inet_aton reads as an address cannot be checked": {"fetch", `{"url":"http://167772161/"}`, Deny, "evil",
			`denied by rule "evil": url "http://167772161/" is not a URL that can be checked: host "167772161": numeric last label: this reads as an IPv4 address; write the address in dotted-quad form`},
		"a URL without a scheme cannot be checked": {"fetch", `{"url":"pypi.org/simple"}`, Deny, "evil",
			`denied by rule "evil": url "pypi.org/simple" is not a URL that can be checked: not an absolute URL with a host`},
		"a URL that is a list is not a string": {"fetch", `{"url":{"host":"pypi.org"}}`, Deny, "evil",
			`denied by rule "evil": url is an object, not a URL or list of URLs`},

		// Values.
		"a boolean equals its JSON text": {"git_push", `{"remote":"o","force":true}`, Deny, "no force", `denied by rule "no force": force equals "true"`},
		"a number equals its JSON text":  {"run", `{"mode":1}`, Allow, `allow run when mode = "1"`, `allowed by rule "allow run when mode = \"1\"": mode equals "1"`},
		"an object equals nothing":       {"run", `{"mode":{}}`, Deny, "no matching rule", nm("run")},
		"a dotted name reaches a nested argument": {"opts", `{"options":{"mode":"ro"}}`, Allow, `allow opts when options.mode = "ro"`,
			`allowed by rule "allow opts when options.mode = \"ro\"": options.mode equals "ro"`},
		"a regex must match the whole value": {"checkout", `{"branch":"main-evil"}`, Deny, "no matching rule", nm("checkout")},
		"a regex alternative matches": {"checkout", `{"branch":"dev"}`, Allow, `allow checkout when branch matches /main|dev/`,
			`allowed by rule "allow checkout when branch matches /main|dev/": branch "dev" matches ^(?:main|dev)$`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var args map[string]any
			if err := json.Unmarshal([]byte(strings.ReplaceAll(tc.args, "$T", T)), &args); err != nil {
				t.Fatal(err)
			}
			d := p.Decide(tc.tool, args)
			want := Decision{Verdict: tc.want, Rule: tc.rule, Reason: strings.ReplaceAll(tc.reason, "$T", T)}
			if d != want {
				t.Errorf("Decide(%q, %s) =\n  %v\nwant\n  %v", tc.tool, tc.args, d, want)
			}
		})
	}
}

func TestConfig(t *testing.T) {
	T := tree(t)
	t.Run("an unknown tool gets the configured Unknown verdict", func(t *testing.T) {
		p, err := New(Config{Unknown: Escalate})
		if err != nil {
			t.Fatal(err)
		}
		want := Decision{Escalate, "unknown tool", `no rule names tool "x"; unknown tools get escalate`}
		if d := p.Decide("x", nil); d != want {
			t.Errorf("Decide = %v, want %v", d, want)
		}
	})
	t.Run("protected paths are checked even for unknown tools and Allow defaults", func(t *testing.T) {
		p, err := New(Config{Unknown: Allow, Protected: []string{T + "/airlock"}})
		if err != nil {
			t.Fatal(err)
		}
		if d := p.Decide("anything", map[string]any{"x": T + "/airlock"}); d.Verdict != Deny || d.Rule != "protected" {
			t.Errorf("Decide = %v, want protected deny", d)
		}
	})
	t.Run("a relative path without roots is not a host path", func(t *testing.T) {
		p, err := New(Config{Unknown: Allow, Protected: []string{T + "/airlock"}})
		if err != nil {
			t.Fatal(err)
		}
		if d := p.Decide("get_file", map[string]any{"path": "airlock/x"}); d.Verdict != Allow {
			t.Errorf("Decide = %v, want allow", d)
		}
	})
	t.Run("a protected path given through a symlinked root is resolved", func(t *testing.T) {
		p, err := New(Config{Unknown: Allow, Protected: []string{T + "/root/link-prot"}})
		if err != nil {
			t.Fatal(err)
		}
		d := p.Decide("x", map[string]any{"p": T + "/airlock/config.yaml"})
		if d.Verdict != Deny || d.Rule != "protected" {
			t.Errorf("Decide = %v, want protected deny", d)
		}
	})
	t.Run("a path that cannot be resolved makes allow rules miss and deny rules match", func(t *testing.T) {
		within := []Condition{{Arg: "path", PathWithin: []string{RootsToken}}}
		p, err := New(Config{Roots: []string{T + "/root"}, Rules: []Rule{
			{Tool: "read", Verdict: Allow, When: within},
			{Tool: "write", Verdict: Allow}, {Tool: "write", Verdict: Deny, Name: "in root", When: within},
		}})
		if err != nil {
			t.Fatal(err)
		}
		args := map[string]any{"path": "loop1/x"}
		if d := p.Decide("read", args); d.Verdict != Deny || d.Rule != "no matching rule" {
			t.Errorf("Decide(read) = %v, want no matching rule", d)
		}
		want := Decision{Deny, "in root", `denied by rule "in root": path "loop1/x" cannot be resolved: more than 40 symlinks (a loop?)`}
		if d := p.Decide("write", args); d != want {
			t.Errorf("Decide(write) = %v, want %v", d, want)
		}
	})
	bad := map[string]struct {
		c    Config
		want string
	}{
		"a bad regex is an error naming the rule": {Config{Rules: []Rule{{Tool: "x", Verdict: Allow}, {Tool: "y", Verdict: Deny, Name: "r2", When: []Condition{{Arg: "a", Regex: "("}}}}},
			`mcppolicy: rule 1 ("r2"): condition 0 on "a": regex "(": error parsing regexp: missing closing ): ` + "`^(?:()$`"},
		"a rule without a verdict is an error": {Config{Rules: []Rule{{Tool: "x"}}}, `mcppolicy: rule 0 (Verdict(0) x): verdict 0 is not Allow, Escalate or Deny`},
		"a condition without a test is an error": {Config{Rules: []Rule{{Tool: "x", Verdict: Allow, When: []Condition{{Arg: "a"}}}}},
			`mcppolicy: rule 0 (allow x when a ): condition 0 on "a": no test (want path_within, host_in, equals, glob, regex or present)`},
		"roots without roots is an error": {Config{Rules: []Rule{{Tool: "x", Verdict: Allow, When: []Condition{{Arg: "a", PathWithin: []string{RootsToken}}}}}},
			`mcppolicy: rule 0 (allow x when a within [@roots]): condition 0 on "a": path_within: roots, but the server has no roots`},
		"a host with a port is an error": {Config{Rules: []Rule{{Tool: "x", Verdict: Allow, When: []Condition{{Arg: "u", HostIn: []string{"a.com:443"}}}}}},
			`mcppolicy: rule 0 (allow x when u host in [a.com:443]): condition 0 on "u": host_in "a.com:443": a port is not part of host_in; write the host alone`},
		"a relative root is an error": {Config{Roots: []string{"rel"}}, `mcppolicy: root "rel": not an absolute path`},
	}
	for name, tc := range bad {
		t.Run(name, func(t *testing.T) {
			_, err := New(tc.c)
			if err == nil || err.Error() != tc.want {
				t.Errorf("New = %v,\nwant %s", err, tc.want)
			}
		})
	}
}
