package mcppolicy

import (
	"os"
	"reflect"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestParseRulesReadsTheDocumentedForm(t *testing.T) {
	b, err := os.ReadFile("testdata/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var raw any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	got, err := ParseRules(raw)
	if err != nil {
		t.Fatal(err)
	}
	want := []Rule{
		{Tool: "read_*", Verdict: Allow, When: []Condition{{Arg: "path", PathWithin: []string{RootsToken}}}},
		{Tool: "write_file", Verdict: Escalate, When: []Condition{{Arg: "path", PathWithin: []string{RootsToken, "/srv/shared"}}}},
		{Tool: "write_file", Verdict: Deny, Name: "no env files", When: []Condition{{Arg: "path", Glob: "*.env"}}},
		{Tool: "fetch", Verdict: Allow, When: []Condition{{Arg: "url", HostIn: []string{"*.github.com", "pypi.org"}}}},
		{Tool: "git_push", Verdict: Deny, When: []Condition{{Arg: "force", Equals: ptr("true")}, {Arg: "remote", Regex: "origin|upstream", Present: ptr(true)}}},
		{Tool: "run", Verdict: Allow, When: []Condition{{Arg: "options.level", Equals: ptr("2")}}},
		{Tool: "*", Verdict: Deny, Name: "nothing private", When: []Condition{{Arg: "path", PathWithin: []string{"/srv/private"}}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseRules =\n%#v\nwant\n%#v", got, want)
	}
	if _, err := New(Config{Rules: got, Roots: []string{t.TempDir()}}); err != nil {
		t.Errorf("New(parsed rules) = %v", err)
	}
}

func TestParseRulesErrorsNameTheRuleAndKey(t *testing.T) {
	tests := map[string]struct{ yaml, want string }{
		"a misspelt verdict":              {`[{tool: x, alow: {}}]`, `rules[0].alow: unknown key (want tool, allow, escalate, deny or name)`},
		"two verdicts":                    {`[{tool: x, allow: always, deny: always}]`, `rules[0]: both allow and deny; a rule has exactly one verdict`},
		"no verdict":                      {`[{tool: x}]`, `rules[0]: no allow, escalate or deny`},
		"no tool":                         {`[{allow: always}]`, `rules[0]: no tool (a glob over tool names; * for every tool)`},
		"a tool that is not a string":     {`[{tool: [x], allow: always}]`, `rules[0].tool: a list, not a string`},
		"a rule that is not a map":        {`[x]`, `rules[0]: a string, not a map with tool and allow, escalate or deny`},
		"a misspelt test":                 {`[{tool: x, allow: always}, {tool: y, deny: {path: {path_whithin: roots}}}]`, `rules[1].deny.path: path_whithin: unknown test (want path_within, host_in, equals, glob, regex or present)`},
		"a relative root":                 {`[{tool: x, allow: {path: {path_within: [src]}}}]`, `rules[0].allow.path: path_within: "src" is not an absolute path or roots`},
		"an empty root list":              {`[{tool: x, allow: {path: {path_within: []}}}]`, `rules[0].allow.path: path_within: an empty list`},
		"a bad host":                      {`[{tool: x, allow: {url: {host_in: [https://a.com]}}}]`, `rules[0].allow.url: host_in: "https://a.com": a URL or path, not a host; write the host alone`},
		"a bad regex":                     {`[{tool: x, allow: {a: {regex: "("}}}]`, "rules[0].allow.a: regex: error parsing regexp: missing closing ): `(`"},
		"present that is not a boolean":   {`[{tool: x, allow: {a: {present: yes please}}}]`, `rules[0].allow.a: present: a string, not true or false`},
		"equals on a list":                {`[{tool: x, allow: {a: {equals: [1]}}}]`, `rules[0].allow.a: equals: a list, not a string, number or boolean`},
		"a condition that is not a map":   {`[{tool: x, allow: {a: b}}]`, `rules[0].allow.a: a string; want a map of tests (path_within, host_in, equals, glob, regex, present)`},
		"a condition without a test":      {`[{tool: x, allow: {a: {}}}]`, `rules[0].allow.a: no test (want path_within, host_in, equals, glob, regex or present)`},
		"conditions that are not a map":   {`[{tool: x, allow: [a]}]`, `rules[0].allow: a list; want a map of argument conditions, or always`},
		"a verdict that is false":         {`[{tool: x, deny: false}]`, `rules[0].deny: false; delete the rule instead`},
		"rules that are not a list":       {`{rules: {tool: x}}`, `rules: an object, not a list of rules`},
		"an unknown top-level key":        {`{rulez: []}`, `key "rulez": unknown (want rules)`},
		"two bad rules are both reported": {`[{tool: x}, {tool: y}]`, "rules[0]: no allow, escalate or deny\nrules[1]: no allow, escalate or deny"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var raw any
			if err := yaml.Unmarshal([]byte(tc.yaml), &raw); err != nil {
				t.Fatal(err)
			}
			rules, err := ParseRules(raw)
			if err == nil || err.Error() != tc.want {
				t.Errorf("ParseRules(%s) = %v, %v\nwant error %s", tc.yaml, rules, err, tc.want)
			}
		})
	}
}

func TestParseRulesAcceptsJSONAndYAMLv2Maps(t *testing.T) {
	raw := []any{map[any]any{"tool": "x", "allow": map[any]any{"n": map[string]any{"equals": 1.5}}}}
	got, err := ParseRules(raw)
	want := []Rule{{Tool: "x", Verdict: Allow, When: []Condition{{Arg: "n", Equals: ptr("1.5")}}}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ParseRules = %#v, %v; want %#v", got, err, want)
	}
}
