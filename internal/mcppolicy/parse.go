package mcppolicy

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// ParseRules reads rules from decoded YAML or JSON (maps and lists): either the list
// itself or a map whose only key is "rules". Each rule is a map:
//
//	rules:
//	  - tool: read_*              # glob over tool names (* and ?)
//	    allow:                    # exactly one of allow, escalate, deny
//	      path: {path_within: roots}          # ARG: {TEST: VALUE, ...}
//	  - tool: write_file
//	    escalate:
//	      path: {path_within: [/home/me/notes]}
//	  - tool: fetch
//	    allow:
//	      url: {host_in: ["*.github.com", pypi.org]}
//	  - tool: git_push
//	    deny:
//	      force: {equals: true}
//	    name: no force pushes     # optional; shown in the audit log
//	  - tool: "*"
//	    deny:                     # every tool: nothing under /srv/private
//	      path: {path_within: [/srv/private]}
//	  - tool: delete_*
//	    deny: always              # no conditions: always, true, {} or null
//
// A tool no rule names is denied already; a deny rule without conditions
// that matches a tool some other rule allows is refused by New, since the
// most restrictive matching rule wins and that allow could never apply.
//
// Tests: path_within (absolute paths, or "roots" for the server's roots; a string or
// a list), host_in (name, *.name or IP; a string or a list), equals (string, number or
// boolean), glob, regex (whole value) and present (true or false). Several tests on
// one argument must all hold, as must the conditions on several arguments.
// Errors name the rule index and the key.
func ParseRules(raw any) ([]Rule, error) {
	if m, ok, err := asMap(raw); ok {
		if err != nil {
			return nil, fmt.Errorf("rules: %v", err)
		}
		for k := range m {
			if k != "rules" {
				return nil, fmt.Errorf("key %q: unknown (want rules)", k)
			}
		}
		raw = m["rules"]
	}
	if raw == nil {
		return nil, nil
	}
	list, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("rules: %s, not a list of rules", aType(raw))
	}
	var rules []Rule
	var errs []error
	for i, item := range list {
		r, err := parseRule(item)
		if err != nil {
			errs = append(errs, fmt.Errorf("rules[%d]%s", i, err))
			continue
		}
		rules = append(rules, r)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return rules, nil
}

var verdictKeys = map[string]Verdict{"allow": Allow, "escalate": Escalate, "deny": Deny}

// parseRule's errors start with the path below rules[i] (".allow.path: ...") or ": ".
func parseRule(item any) (Rule, error) {
	var r Rule
	m, ok, err := asMap(item)
	if !ok {
		return r, fmt.Errorf(": %s, not a map with tool and allow, escalate or deny", aType(item))
	}
	if err != nil {
		return r, fmt.Errorf(": %v", err)
	}
	var verdictKey string
	for _, k := range sortedKeys(m) {
		switch k {
		case "tool", "name":
			s, ok := m[k].(string)
			if !ok {
				return r, fmt.Errorf(".%s: %s, not a string", k, aType(m[k]))
			}
			if k == "tool" {
				r.Tool = s
			} else {
				r.Name = s
			}
		case "allow", "escalate", "deny":
			if verdictKey != "" {
				return r, fmt.Errorf(": both %s and %s; a rule has exactly one verdict", verdictKey, k)
			}
			verdictKey = k
		default:
			return r, fmt.Errorf(".%s: unknown key (want tool, allow, escalate, deny or name)", k)
		}
	}
	if strings.TrimSpace(r.Tool) == "" {
		return r, errors.New(": no tool (a glob over tool names; * for every tool)")
	}
	if verdictKey == "" {
		return r, errors.New(": no allow, escalate or deny")
	}
	r.Verdict = verdictKeys[verdictKey]
	r.When, err = parseConditions(m[verdictKey])
	if err != nil {
		return r, fmt.Errorf(".%s%v", verdictKey, err)
	}
	return r, nil
}

func parseConditions(v any) ([]Condition, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case bool:
		if x {
			return nil, nil
		}
		return nil, errors.New(": false; delete the rule instead")
	case string:
		if x == "always" {
			return nil, nil
		}
		return nil, fmt.Errorf(": %q; want a map of argument conditions, or always", x)
	}
	m, ok, err := asMap(v)
	if !ok {
		return nil, fmt.Errorf(": %s; want a map of argument conditions, or always", aType(v))
	}
	if err != nil {
		return nil, fmt.Errorf(": %v", err)
	}
	var out []Condition
	for _, arg := range sortedKeys(m) {
		c, err := parseCondition(arg, m[arg])
		if err != nil {
			return nil, fmt.Errorf(".%s: %v", arg, err)
		}
		out = append(out, c)
	}
	return out, nil
}

func parseCondition(arg string, v any) (Condition, error) {
	c := Condition{Arg: arg}
	if arg == "" {
		return c, errors.New("empty argument name")
	}
	m, ok, err := asMap(v)
	if !ok {
		return c, fmt.Errorf("%s; want a map of tests (path_within, host_in, equals, glob, regex, present)", aType(v))
	}
	if err != nil {
		return c, err
	}
	if len(m) == 0 {
		return c, errors.New("no test (want path_within, host_in, equals, glob, regex or present)")
	}
	for _, k := range sortedKeys(m) {
		val := m[k]
		switch k {
		case "path_within":
			list, err := stringOrList(val)
			if err != nil {
				return c, fmt.Errorf("path_within: %v", err)
			}
			for _, p := range list {
				switch {
				case p == "roots" || p == RootsToken:
					c.PathWithin = append(c.PathWithin, RootsToken)
				case filepath.IsAbs(p):
					c.PathWithin = append(c.PathWithin, filepath.Clean(p))
				default:
					return c, fmt.Errorf("path_within: %q is not an absolute path or roots", p)
				}
			}
		case "host_in":
			list, err := stringOrList(val)
			if err != nil {
				return c, fmt.Errorf("host_in: %v", err)
			}
			for _, h := range list {
				if _, err := parseHostPattern(h); err != nil {
					return c, fmt.Errorf("host_in: %q: %v", h, err)
				}
			}
			c.HostIn = list
		case "equals":
			s, ok := scalarText(val)
			if !ok {
				return c, fmt.Errorf("equals: %s, not a string, number or boolean", aType(val))
			}
			c.Equals = &s
		case "glob", "regex":
			s, ok := val.(string)
			if !ok || s == "" {
				return c, fmt.Errorf("%s: %s, not a non-empty string", k, aType(val))
			}
			if k == "glob" {
				c.Glob = s
			} else {
				if _, err := regexp.Compile(s); err != nil {
					return c, fmt.Errorf("regex: %v", err)
				}
				c.Regex = s
			}
		case "present":
			b, ok := val.(bool)
			if !ok {
				return c, fmt.Errorf("present: %s, not true or false", aType(val))
			}
			c.Present = &b
		default:
			return c, fmt.Errorf("%s: unknown test (want path_within, host_in, equals, glob, regex or present)", k)
		}
	}
	return c, nil
}

func stringOrList(v any) ([]string, error) {
	list, ok := stringList(v)
	if !ok {
		if _, isList := v.([]any); isList {
			return nil, errors.New("a list with an entry that is not a string")
		}
		return nil, fmt.Errorf("%s, not a string or list of strings", aType(v))
	}
	if len(list) == 0 {
		return nil, errors.New("an empty list")
	}
	return list, nil
}

// asMap accepts map[string]any (encoding/json, yaml.v3) and map[any]any (yaml.v2);
// ok says v is a map at all, err that a key is not a string.
func asMap(v any) (m map[string]any, ok bool, err error) {
	switch x := v.(type) {
	case map[string]any:
		return x, true, nil
	case map[any]any:
		m = make(map[string]any, len(x))
		var bad []string
		for k, val := range x {
			s, isStr := k.(string)
			if !isStr {
				bad = append(bad, fmt.Sprint(k))
				continue
			}
			m[s] = val
		}
		if len(bad) > 0 {
			sort.Strings(bad)
			return m, true, fmt.Errorf("key %s is not a string", bad[0])
		}
		return m, true, nil
	}
	return nil, false, nil
}
