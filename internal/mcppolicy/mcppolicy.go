// Package mcppolicy decides whether an MCP tool call may go to its server, must wait
// for a human, or is refused; apart from resolving path arguments on the host it does
// no I/O, so the proxy checks first and forwards exactly what was checked.
//
// Decide evaluates every rule whose Tool glob names the tool; the most restrictive
// matching rule wins (Deny > Escalate > Allow), the first in configuration order on a
// tie. Before any rule, every path-like argument is resolved and checked against
// Config.Protected: a hit is Deny with Rule "protected" whatever the rules say.
//
// Conditions are three-valued. An argument that cannot be checked (a path condition
// on a number, a URL that does not parse, a path through a symlink loop) makes an
// allow rule not match and a deny or escalate rule match, so doubt is always decided
// the restrictive way and a malformed argument cannot slip past a deny rule.
//
// Resolving a path at check time does not stop a race: whoever can write a symlink
// inside a root between this check and the server's open() can still redirect it.
// The server's own sandbox (its mounts) is the boundary; this is the policy on top.
package mcppolicy

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Verdict is what the proxy does with a call; the order is restrictiveness.
type Verdict int

const (
	// Allow forwards the call to the server.
	Allow Verdict = iota + 1
	// Escalate holds the call until a human decides in the approval queue.
	Escalate
	// Deny refuses the call with an error result that says it was policy.
	Deny
)

func (v Verdict) String() string {
	switch v {
	case Allow:
		return "allow"
	case Escalate:
		return "escalate"
	case Deny:
		return "deny"
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

func (v Verdict) valid() bool { return v == Allow || v == Escalate || v == Deny }

// RootsToken in Condition.PathWithin stands for Config.Roots (YAML: path_within: roots).
const RootsToken = "@roots"

// Rule is one per-tool rule.
type Rule struct {
	Tool    string      // glob over tool names: * is any run of characters, ? one character
	Verdict Verdict     // what a match means
	When    []Condition // all must hold for the rule to match; none = always
	Name    string      // for the audit log; default: a rendering of the rule (see Rule.String)
}

// Condition tests one argument. Every test that is set must hold; at least one must be set.
type Condition struct {
	// Arg is the argument's name: a top-level key of the call's arguments, or, when no
	// such key exists, a dotted path into nested objects ("options.mode").
	Arg string
	// PathWithin: the argument is a path (or list of paths) that resolves, the way the
	// server will, to one of these roots or below. RootsToken stands for Config.Roots.
	PathWithin []string
	// HostIn: the argument is an absolute URL (or list of them) whose host is one of
	// these: a name (exact), *.name (name itself or exactly one more label, as in
	// internal/policy) or an IP address.
	HostIn []string
	// Equals, Glob, Regex test a scalar argument: strings as they are, numbers and
	// booleans in their JSON text (1, 2.5, true). Regex must match the whole value.
	Equals *string
	Glob   string
	Regex  string
	// Present: the argument is present (true) or absent (false); null counts as present.
	Present *bool
}

// Config is the rule set for one MCP server; New validates it.
type Config struct {
	Rules []Rule
	// Roots are the server's roots (host paths): what RootsToken means, and the
	// directory relative paths are resolved against (the first one).
	Roots []string
	// Protected paths are always denied whatever the rules: airlock's config dir,
	// decisions file, audit logs, state dir.
	Protected []string
	// Unknown is the verdict for a tool no rule's Tool glob matches (default Deny).
	Unknown Verdict
	// NoMatch is the verdict for a tool some rule names but none matches, e.g. a read
	// outside the roots when the only rule allows reads within them (default Deny).
	NoMatch Verdict
	// Home expands a leading ~ in path arguments, as filesystem servers do; empty
	// means the current user's home directory, if there is one.
	Home string
}

// Decision is a verdict with the rule that produced it and why, for the audit log.
type Decision struct {
	Verdict Verdict
	// Rule is the deciding rule's Name, or "protected", "unknown tool", "no matching rule".
	Rule string
	// Reason is one human sentence.
	Reason string
}

func (d Decision) String() string { return fmt.Sprintf("%s [%s]: %s", d.Verdict, d.Rule, d.Reason) }

// Policy is a compiled, immutable rule set; it is safe for concurrent use.
type Policy struct {
	rules     []compiledRule
	roots     []string // resolved
	protected []string // resolved
	unknown   Verdict
	noMatch   Verdict
	home      string
}

type compiledRule struct {
	name    string
	verdict Verdict
	tool    *regexp.Regexp
	when    []compiledCond
}

type compiledCond struct {
	arg        string
	pathWithin []string // resolved
	hostIn     []hostPattern
	equals     *string
	glob       *regexp.Regexp
	globText   string
	regex      *regexp.Regexp
	present    *bool
}

// New compiles globs and regexes and resolves roots; the error names each bad rule.
func New(c Config) (*Policy, error) {
	p := &Policy{unknown: c.Unknown, noMatch: c.NoMatch, home: c.Home}
	if p.unknown == 0 {
		p.unknown = Deny
	}
	if p.noMatch == 0 {
		p.noMatch = Deny
	}
	var errs []error
	if !p.unknown.valid() {
		errs = append(errs, fmt.Errorf("mcppolicy: unknown-tool verdict %d is not Allow, Escalate or Deny", int(c.Unknown)))
	}
	if !p.noMatch.valid() {
		errs = append(errs, fmt.Errorf("mcppolicy: no-match verdict %d is not Allow, Escalate or Deny", int(c.NoMatch)))
	}
	if p.home == "" {
		p.home, _ = os.UserHomeDir()
	}
	if p.home != "" && !filepath.IsAbs(p.home) {
		errs = append(errs, fmt.Errorf("mcppolicy: home %q is not absolute", p.home))
		p.home = ""
	}
	for _, r := range c.Roots {
		rr, err := resolveRoot(r)
		if err != nil {
			errs = append(errs, fmt.Errorf("mcppolicy: root %q: %w", r, err))
			continue
		}
		p.roots = append(p.roots, rr)
	}
	for _, r := range c.Protected {
		rr, err := resolveRoot(r)
		if err != nil {
			errs = append(errs, fmt.Errorf("mcppolicy: protected path %q: %w", r, err))
			continue
		}
		p.protected = append(p.protected, rr)
	}
	for i, r := range c.Rules {
		cr, err := p.compileRule(r)
		if err != nil {
			errs = append(errs, fmt.Errorf("mcppolicy: rule %d (%s): %w", i, ruleLabel(i, r), err))
			continue
		}
		p.rules = append(p.rules, cr)
	}
	errs = append(errs, shadowed(c.Rules)...)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

// shadowed finds allow and escalate rules that can never apply because a
// deny rule without conditions matches every call of their tools: the most
// restrictive matching rule wins, so `tool: "*"` with `deny: always` after
// the allows denies everything. A tool no rule names is denied already.
func shadowed(rules []Rule) []error {
	var errs []error
	for i, r := range rules {
		if r.Verdict == Deny || r.Tool == "" {
			continue
		}
		for j, d := range rules {
			if d.Verdict != Deny || len(d.When) > 0 || d.Tool == "" || !covers(d.Tool, r.Tool) {
				continue
			}
			errs = append(errs, fmt.Errorf("mcppolicy: rule %d (%s) can never %s: rule %d (%s) denies every call of %q, and the most restrictive matching rule wins; remove rule %d (a tool no rule allows is denied already) or give it a condition",
				i, ruleLabel(i, r), r.Verdict, j, ruleLabel(j, d), r.Tool, j))
			break
		}
	}
	return errs
}

// covers reports whether glob d matches every name glob r matches: d is
// all stars, or r has no wildcard and d matches it, or they are the same.
func covers(d, r string) bool {
	if strings.Trim(d, "*") == "" || d == r {
		return true
	}
	return !strings.ContainsAny(r, "*?") && compileGlob(d).MatchString(r)
}

func ruleLabel(i int, r Rule) string {
	if r.Name != "" {
		return strconv.Quote(r.Name)
	}
	return r.String()
}

func resolveRoot(r string) (string, error) {
	if !filepath.IsAbs(r) {
		return "", errors.New("not an absolute path")
	}
	rr, err := walk(r)
	if err != nil {
		return "", err
	}
	return rr, nil
}

func (p *Policy) compileRule(r Rule) (compiledRule, error) {
	cr := compiledRule{name: r.Name, verdict: r.Verdict}
	if cr.name == "" {
		cr.name = r.String()
	}
	if !r.Verdict.valid() {
		return cr, fmt.Errorf("verdict %d is not Allow, Escalate or Deny", int(r.Verdict))
	}
	if r.Tool == "" {
		return cr, errors.New("empty tool glob (use * for every tool)")
	}
	cr.tool = compileGlob(r.Tool)
	for j, c := range r.When {
		cc, err := p.compileCond(c)
		if err != nil {
			return cr, fmt.Errorf("condition %d on %q: %w", j, c.Arg, err)
		}
		cr.when = append(cr.when, cc)
	}
	return cr, nil
}

func (p *Policy) compileCond(c Condition) (compiledCond, error) {
	cc := compiledCond{arg: c.Arg, equals: c.Equals, present: c.Present, globText: c.Glob}
	if c.Arg == "" {
		return cc, errors.New("no argument name")
	}
	if c.PathWithin == nil && c.HostIn == nil && c.Equals == nil && c.Glob == "" && c.Regex == "" && c.Present == nil {
		return cc, errors.New("no test (want path_within, host_in, equals, glob, regex or present)")
	}
	if c.PathWithin != nil && len(c.PathWithin) == 0 {
		return cc, errors.New("path_within is an empty list (write roots for the server's roots)")
	}
	for _, r := range c.PathWithin {
		if r == RootsToken {
			if len(p.roots) == 0 {
				return cc, errors.New("path_within: roots, but the server has no roots")
			}
			cc.pathWithin = append(cc.pathWithin, p.roots...)
			continue
		}
		rr, err := resolveRoot(r)
		if err != nil {
			return cc, fmt.Errorf("path_within %q: %w", r, err)
		}
		cc.pathWithin = append(cc.pathWithin, rr)
	}
	if c.HostIn != nil && len(c.HostIn) == 0 {
		return cc, errors.New("host_in is an empty list")
	}
	for _, h := range c.HostIn {
		hp, err := parseHostPattern(h)
		if err != nil {
			return cc, fmt.Errorf("host_in %q: %w", h, err)
		}
		cc.hostIn = append(cc.hostIn, hp)
	}
	if c.Glob != "" {
		cc.glob = compileGlob(c.Glob)
	}
	if c.Regex != "" {
		re, err := regexp.Compile(`^(?:` + c.Regex + `)$`)
		if err != nil {
			return cc, fmt.Errorf("regex %q: %v", c.Regex, err)
		}
		cc.regex = re
	}
	return cc, nil
}

// compileGlob turns a glob (* any run of characters including /, ? one character,
// everything else literal) into an anchored regexp; it cannot fail.
func compileGlob(g string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString(`(?s)^`)
	for _, r := range g {
		switch r {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString(`$`)
	return regexp.MustCompile(b.String())
}

// String renders the rule for the audit log, e.g.
// `allow read_* when path within @roots`.
func (r Rule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Verdict, r.Tool)
	for i, c := range r.When {
		if i == 0 {
			b.WriteString(" when ")
		} else {
			b.WriteString(" and ")
		}
		b.WriteString(c.String())
	}
	return b.String()
}

// String renders the condition, e.g. `url host in [*.github.com]`.
func (c Condition) String() string {
	var parts []string
	if c.PathWithin != nil {
		parts = append(parts, fmt.Sprintf("within %v", c.PathWithin))
	}
	if c.HostIn != nil {
		parts = append(parts, fmt.Sprintf("host in %v", c.HostIn))
	}
	if c.Equals != nil {
		parts = append(parts, fmt.Sprintf("= %q", *c.Equals))
	}
	if c.Glob != "" {
		parts = append(parts, fmt.Sprintf("like %q", c.Glob))
	}
	if c.Regex != "" {
		parts = append(parts, fmt.Sprintf("matches /%s/", c.Regex))
	}
	if c.Present != nil {
		if *c.Present {
			parts = append(parts, "present")
		} else {
			parts = append(parts, "absent")
		}
	}
	return c.Arg + " " + strings.Join(parts, ", ")
}

// tri is a three-valued truth: a condition holds, does not, or cannot be checked.
type tri int

const (
	no tri = iota
	yes
	unsure
)

// Decide returns the verdict for one call. args is the call's decoded JSON arguments
// (nil for none); Decide never modifies it.
func (p *Policy) Decide(tool string, args map[string]any) Decision {
	if d, hit := p.checkProtected(args); hit {
		return d
	}
	var (
		best   *compiledRule
		reason string
		named  bool
	)
	for i := range p.rules {
		r := &p.rules[i]
		if !r.tool.MatchString(tool) {
			continue
		}
		named = true
		t, why := p.evalRule(r, args)
		if t == no || (t == unsure && r.verdict == Allow) {
			continue
		}
		if best == nil || r.verdict > best.verdict {
			best, reason = r, why
		}
	}
	if best != nil {
		return Decision{Verdict: best.verdict, Rule: best.name, Reason: reason}
	}
	if !named {
		return Decision{Verdict: p.unknown, Rule: "unknown tool",
			Reason: fmt.Sprintf("no rule names tool %q; unknown tools get %s", tool, p.unknown)}
	}
	return Decision{Verdict: p.noMatch, Rule: "no matching rule",
		Reason: fmt.Sprintf("rules name tool %q but none matches these arguments; that gets %s", tool, p.noMatch)}
}

func (p *Policy) evalRule(r *compiledRule, args map[string]any) (tri, string) {
	verb := map[Verdict]string{Allow: "allowed", Escalate: "escalated", Deny: "denied"}[r.verdict]
	if len(r.when) == 0 {
		return yes, fmt.Sprintf("%s by rule %q for every call", verb, r.name)
	}
	result := yes
	var whys []string
	for i := range r.when {
		t, why := p.evalCond(&r.when[i], args)
		if t == no {
			return no, ""
		}
		if t == unsure {
			result = unsure
		}
		whys = append(whys, why)
	}
	return result, fmt.Sprintf("%s by rule %q: %s", verb, r.name, strings.Join(whys, "; "))
}

// lookup finds an argument: the top-level key, or else a dotted path into objects.
func lookup(args map[string]any, name string) (any, bool) {
	if v, ok := args[name]; ok {
		return v, true
	}
	if !strings.Contains(name, ".") {
		return nil, false
	}
	var cur any = args
	for _, part := range strings.Split(name, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func (p *Policy) evalCond(c *compiledCond, args map[string]any) (tri, string) {
	v, present := lookup(args, c.arg)
	var whys []string
	if c.present != nil {
		if present != *c.present {
			return no, ""
		}
		if present {
			whys = append(whys, fmt.Sprintf("%s is present", c.arg))
		} else {
			whys = append(whys, fmt.Sprintf("%s is absent", c.arg))
		}
	}
	if !present {
		if c.pathWithin != nil || c.hostIn != nil || c.equals != nil || c.glob != nil || c.regex != nil {
			return no, ""
		}
		return yes, strings.Join(whys, ", ")
	}
	result := yes
	and := func(t tri, why string) bool {
		if t == no {
			return false
		}
		if t == unsure {
			result = unsure
		}
		whys = append(whys, why)
		return true
	}
	if c.equals != nil || c.glob != nil || c.regex != nil {
		s, ok := scalarText(v)
		if !ok {
			if !and(unsure, fmt.Sprintf("%s is %s, not a string, number or boolean", c.arg, aType(v))) {
				return no, ""
			}
		} else {
			if c.equals != nil {
				if s != *c.equals {
					return no, ""
				}
				whys = append(whys, fmt.Sprintf("%s equals %q", c.arg, s))
			}
			if c.glob != nil {
				if !c.glob.MatchString(s) {
					return no, ""
				}
				whys = append(whys, fmt.Sprintf("%s %q is like %q", c.arg, clip(s), c.globText))
			}
			if c.regex != nil {
				if !c.regex.MatchString(s) {
					return no, ""
				}
				whys = append(whys, fmt.Sprintf("%s %q matches %s", c.arg, clip(s), c.regex))
			}
		}
	}
	if c.pathWithin != nil {
		t, why := p.pathWithin(c, v)
		if !and(t, why) {
			return no, ""
		}
	}
	if c.hostIn != nil {
		t, why := hostIn(c, v)
		if !and(t, why) {
			return no, ""
		}
	}
	return result, strings.Join(whys, ", ")
}

// scalarText renders strings as they are and numbers and booleans as JSON text.
func scalarText(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case bool:
		return strconv.FormatBool(x), true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	case float32:
		return strconv.FormatFloat(float64(x), 'f', -1, 32), true
	case int:
		return strconv.Itoa(x), true
	case int64:
		return strconv.FormatInt(x, 10), true
	case json.Number:
		return string(x), true
	}
	return "", false
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "object"
	case []any:
		return "list"
	case string:
		return "string"
	case bool:
		return "boolean"
	case float64, float32, int, int64, json.Number:
		return "number"
	}
	return fmt.Sprintf("%T", v)
}

// stringList returns a string or a list of strings as a list.
func stringList(v any) ([]string, bool) {
	switch x := v.(type) {
	case string:
		return []string{x}, true
	case []string:
		return x, true
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	}
	return nil, false
}

func clip(s string) string {
	const max = 120
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// aType is jsonType with its article: "an object", "a list".
func aType(v any) string {
	t := jsonType(v)
	if strings.ContainsRune("aeiou", rune(t[0])) {
		return "an " + t
	}
	return "a " + t
}

// DeniedToAll lists the paths the rules deny to every tool they could
// allow: the paths of deny rules whose conditions are all path_within
// (RootsToken aside), kept when, for each allow or escalate rule, a deny
// rule over a glob covering its tool denies that path or one holding it.
// A server's sandbox may hide these whole: no allowed call needs them, so a
// path swapped after the check (a symlink replaced before the server's
// open) finds nothing there.
func DeniedToAll(rules []Rule) []string {
	type deny struct {
		tool  string
		paths []string
	}
	var denies []deny
	for _, r := range rules {
		if r.Verdict != Deny || len(r.When) == 0 {
			continue
		}
		d := deny{tool: r.Tool}
		for _, c := range r.When {
			if c.PathWithin == nil || c.HostIn != nil || c.Equals != nil || c.Glob != "" || c.Regex != "" || c.Present != nil {
				d.paths = nil
				break
			}
			for _, p := range c.PathWithin {
				if p != RootsToken && filepath.IsAbs(p) {
					d.paths = append(d.paths, filepath.Clean(p))
				}
			}
		}
		if len(d.paths) > 0 {
			denies = append(denies, d)
		}
	}
	var out []string
	for _, d := range denies {
		for _, p := range d.paths {
			all := true
			for _, a := range rules {
				if a.Verdict == Deny {
					continue
				}
				covered := false
				for _, o := range denies {
					if !covers(o.tool, a.Tool) {
						continue
					}
					for _, q := range o.paths {
						covered = covered || within(p, q)
					}
				}
				if !covered {
					all = false
					break
				}
			}
			if all && !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}
