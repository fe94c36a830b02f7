// Package mcppolicy decides MCP tool calls. THIS FILE IS A STAND-IN on the
// mcpproxy branch so internal/mcpproxy compiles before the real package
// lands; the lead drops it at merge. It implements just enough of the agreed
// API (first matching rule, path-within, equals, present; protected paths;
// the identical-call breaker and a token bucket) for mcpproxy's tests.
package mcppolicy

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

type Verdict int

const (
	Allow Verdict = iota + 1
	Escalate
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
	return "unknown"
}

type Rule struct {
	Tool    string
	Verdict Verdict
	When    []Condition
	Name    string
}

type Condition struct {
	Arg                string
	PathWithin, HostIn []string
	Equals             *string
	Glob, Regex        string
	Present            *bool
}

type Config struct {
	Rules     []Rule
	Roots     []string
	Protected []string
	Unknown   Verdict
}

type Decision struct {
	Verdict      Verdict
	Rule, Reason string
}

type Policy struct{ c Config }

func New(c Config) (*Policy, error) {
	if c.Unknown == 0 {
		c.Unknown = Deny
	}
	return &Policy{c: c}, nil
}

func within(p string, dirs []string) bool {
	if !filepath.IsAbs(p) {
		return false
	}
	p = filepath.Clean(p)
	if r, err := filepath.EvalSymlinks(p); err == nil {
		p = r
	}
	for _, d := range dirs {
		d = filepath.Clean(d)
		if r, err := filepath.EvalSymlinks(d); err == nil {
			d = r
		}
		if p == d || strings.HasPrefix(p, d+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

func (p *Policy) Decide(tool string, args map[string]any) Decision {
	for k, v := range args {
		if s, ok := v.(string); ok && within(s, p.c.Protected) {
			return Decision{Verdict: Deny, Rule: "protected", Reason: fmt.Sprintf("argument %s names a protected path", k)}
		}
	}
	var best *Decision
	for _, r := range p.c.Rules {
		if r.Tool != tool && r.Tool != "*" {
			continue
		}
		ok := true
		for _, c := range r.When {
			v, has := args[c.Arg]
			s, _ := v.(string)
			switch {
			case c.Present != nil && *c.Present != has:
				ok = false
			case c.Equals != nil && s != *c.Equals:
				ok = false
			case c.PathWithin != nil && !within(s, c.PathWithin):
				ok = false
			}
		}
		if ok && (best == nil || r.Verdict > best.Verdict) {
			name := r.Name
			if name == "" {
				name = r.Tool
			}
			best = &Decision{Verdict: r.Verdict, Rule: name, Reason: "rule " + name + " matched"}
		}
	}
	if best != nil {
		return *best
	}
	return Decision{Verdict: p.c.Unknown, Rule: "default", Reason: "no rule covers tool " + tool}
}

func ParseRules(raw any) ([]Rule, error) {
	list, ok := raw.([]any)
	if raw == nil {
		return nil, nil
	}
	if !ok {
		return nil, fmt.Errorf("rules: want a list")
	}
	var out []Rule
	for i, x := range list {
		m, ok := x.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("rules[%d]: want a map", i)
		}
		r := Rule{}
		r.Tool, _ = m["tool"].(string)
		r.Name, _ = m["name"].(string)
		switch m["verdict"] {
		case "allow":
			r.Verdict = Allow
		case "escalate", "ask":
			r.Verdict = Escalate
		case "deny":
			r.Verdict = Deny
		default:
			return nil, fmt.Errorf("rules[%d]: verdict %v", i, m["verdict"])
		}
		if w, ok := m["when"].(map[string]any); ok {
			for arg, cv := range w {
				cm, _ := cv.(map[string]any)
				c := Condition{Arg: arg}
				if pw, ok := cm["path_within"].([]any); ok {
					for _, d := range pw {
						s, _ := d.(string)
						c.PathWithin = append(c.PathWithin, s)
					}
				}
				r.When = append(r.When, c)
			}
		}
		out = append(out, r)
	}
	return out, nil
}

type GuardConfig struct {
	Identical int
	Window    time.Duration
	Rate      float64
	Burst     int
	Now       func() time.Time
}

type Guard struct {
	mu     sync.Mutex
	c      GuardConfig
	seen   map[string][]time.Time
	tokens float64
	last   time.Time
}

func NewGuard(c GuardConfig) *Guard {
	if c.Identical == 0 {
		c.Identical = 20
	}
	if c.Window == 0 {
		c.Window = time.Minute
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return &Guard{c: c, seen: map[string][]time.Time{}, tokens: float64(c.Burst)}
}

func (g *Guard) Allow(tool string, args map[string]any) (bool, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.c.Now()
	if g.c.Rate > 0 {
		if !g.last.IsZero() {
			g.tokens += now.Sub(g.last).Seconds() * g.c.Rate
			if g.tokens > float64(g.c.Burst) {
				g.tokens = float64(g.c.Burst)
			}
		}
		g.last = now
		if g.tokens < 1 {
			return false, "rate limit"
		}
		g.tokens--
	}
	b, _ := json.Marshal(args)
	k := tool + "\x00" + string(b)
	ts := g.seen[k][:0]
	for _, t := range g.seen[k] {
		if now.Sub(t) < g.c.Window {
			ts = append(ts, t)
		}
	}
	ts = append(ts, now)
	g.seen[k] = ts
	if len(ts) > g.c.Identical {
		return false, fmt.Sprintf("circuit breaker: more than %d identical calls in %s", g.c.Identical, g.c.Window)
	}
	return true, ""
}
