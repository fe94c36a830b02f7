package mcppolicy

import (
	"encoding/json"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func FuzzDecide(f *testing.F) {
	T := tree(f)
	p := testPolicy(f, T)
	denyAll, err := New(Config{Rules: []Rule{{Tool: "*", Verdict: Deny}}, Unknown: Allow, NoMatch: Allow})
	if err != nil {
		f.Fatal(err)
	}
	g := NewGuard(GuardConfig{})
	for _, s := range []struct{ tool, args string }{
		{"read_file", `{"path":"$T/root/a.txt"}`},
		{"read_file", `{"path":"deep/../a.txt"}`},
		{"read_file", `{"path":"loop1/x"}`},
		{"read_\xa7", `{"path":["0"]}`},
		{"read_file", `{"path":["a.txt","deep/../a.txt"]}`},
		{"read_file", `{"path":"file:///$T/root/link-prot"}`},
		{"read_multiple_files", `{"paths":["a.txt",["x"],null,{"p":"~/airlock"}]}`},
		{"fetch", `{"url":"https://user:pw@[::ffff:10.0.0.1]:1/"}`},
		{"fetch", `{"url":["https://a.github.com","http://pypi.org./"]}`},
		{"opts", `{"options":{"mode":"ro"},"options.mode":"rw"}`},
		{"git_push", `{"force":1e400}`},
		{"", `{"":""}`},
		{"*", `{"a":{"b":{"c":{"d":"/"}}}}`},
	} {
		f.Add(s.tool, strings.ReplaceAll(s.args, "$T", T))
	}
	f.Fuzz(func(t *testing.T, tool, raw string) {
		var args map[string]any
		if json.Unmarshal([]byte(raw), &args) != nil {
			return
		}
		d := p.Decide(tool, args)
		if !d.Verdict.valid() || d.Rule == "" || d.Reason == "" {
			t.Fatalf("Decide(%q, %s) = %#v: invalid", tool, raw, d)
		}
		// An allowed read has a path, or a list of paths, each of which resolves,
		// every way, inside the root.
		if d.Verdict == Allow && strings.HasPrefix(tool, "read_") && tool != "read_multiple_files" {
			paths, ok := stringList(args["path"])
			if !ok || len(paths) == 0 {
				t.Fatalf("Decide(%q, %s) = %v, but path is not a path or a list of paths", tool, raw, d)
			}
			for _, s := range paths {
				cands, err := p.resolve(s)
				if err != nil {
					t.Fatalf("Decide(%q, %s) = %v, but the path %q does not resolve: %v", tool, raw, d, s, err)
				}
				for _, c := range cands {
					if !within(c, T+"/root") || within(c, T+"/airlock") {
						t.Fatalf("Decide(%q, %s) = %v, but the path resolves to %s", tool, raw, d, c)
					}
				}
			}
		}
		if d := denyAll.Decide(tool, args); d.Verdict != Deny {
			t.Fatalf("deny-all Decide(%q, %s) = %v", tool, raw, d)
		}
		g.Allow(tool, args)
	})
}

func FuzzParseRules(f *testing.F) {
	root := f.TempDir()
	for _, s := range []string{
		`rules: [{tool: "read_*", allow: {path: {path_within: roots}}}]`,
		`[{tool: x, deny: always, name: n}, {tool: y, escalate: {u: {host_in: "*.a.com"}}}]`,
		`[{tool: x, allow: {a: {equals: 1, glob: "a*", regex: "b|c", present: true}}}]`,
		`{"rules":[{"tool":"x","allow":{"a.b":{"path_within":["/tmp","roots"]}}}]}`,
		`[{tool: x, allow: {a: {regex: "(?i)x{2,1000}"}}}]`,
		`[{tool: x, deny: false}]`, `[{? [a] : b}]`, `~`, `[]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		var raw any
		if yaml.Unmarshal([]byte(src), &raw) != nil {
			return
		}
		rules, err := ParseRules(raw)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		p, err := New(Config{Rules: rules, Roots: []string{root}})
		if err != nil {
			return // e.g. a path_within root the host cannot resolve
		}
		for _, r := range rules {
			p.Decide(r.Tool, map[string]any{"a": "x", "path": root + "/f", "u": "https://a.com"})
		}
	})
}
