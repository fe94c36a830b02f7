package approval

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/internal/policy"
)

// RuleFor turns a decision on r into the rule that remembers it, in the
// policy's syntax: the host alone for ports 80 and 443 (or none), host:port
// for any other port. A bare deny rule denies every port, as in policy.
//
// Wildcard gives "*." + the parent domain, one label plus the apex: for
// api.example.com the rule *.example.com; for example.com itself
// *.example.com. A wildcard never covers a public suffix (the Public
// Suffix List's, private section included: co.uk, workers.dev, github.io):
// when the parent would be one, the host itself is the apex (foo.co.uk
// gives *.foo.co.uk), and a single-label name, a suffix itself or an IP
// address falls back to the exact rule. Scope and Expires come from d; Project is
// set for Project scope only. The ID is fresh and random (r- and 8 hex).
func RuleFor(r Request, d Decision, project string, now time.Time) Rule {
	host, port := r.Host, r.Port
	if host == "" {
		host, port = splitSubject(r.Subject)
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	ip, isIP := parseIP(host)
	if isIP {
		host = ip.String()
	} else if n, err := policy.NormalizeName(host); err == nil {
		host = n
		if d.Wildcard {
			host = wildcard(n)
		}
	}
	text := host
	if port != 0 && port != 80 && port != 443 {
		if isIP && ip.Is6() {
			text = "[" + host + "]"
		}
		text += ":" + strconv.Itoa(int(port))
	}
	scope := d.Scope
	if scope == "" {
		scope = Once
	}
	rule := Rule{ID: NewRuleID(), Host: text, Allow: d.Allow, Scope: scope, Created: now.UTC(), By: d.By}
	if !d.Expires.IsZero() {
		rule.Expires = d.Expires.UTC()
	}
	if scope == Project {
		rule.Project = project
	}
	return rule
}

// NewRuleID returns a fresh rule ID: "r-" and 8 random hex digits.
func NewRuleID() string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux (Go ≥1.24 it panics instead)
	return "r-" + hex.EncodeToString(b[:])
}

// wildcard returns the pattern for "this host's siblings": *. + parent,
// or *. + n when the parent is a public suffix, or n alone when n is one
// itself or has a single label. Public suffixes are the Public Suffix
// List's, its private section included (see policy.SpansPublicSuffix):
// abc.workers.dev gives *.abc.workers.dev, never *.workers.dev, where
// anyone can host.
func wildcard(n string) string {
	labels := strings.Split(n, ".")
	switch {
	case len(labels) < 2:
		return n
	case !policy.SpansPublicSuffix(strings.Join(labels[1:], ".")):
		return "*." + strings.Join(labels[1:], ".")
	case !policy.SpansPublicSuffix(n):
		return "*." + n
	}
	return n // the host is itself a suffix (co.uk): never a wildcard over it
}

func parseIP(h string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(strings.Trim(h, "[]"))
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// splitSubject reads "host" or "host:port" (a bracketed IPv6 address too).
func splitSubject(s string) (string, uint16) {
	if h, p, err := net.SplitHostPort(s); err == nil {
		if n, err := strconv.ParseUint(p, 10, 16); err == nil {
			return h, uint16(n)
		}
	}
	return strings.Trim(s, "[]"), 0
}

// Subject is the Request.Subject for a connection: the host, or host:port
// for a port other than 80 and 443 (an IPv6 address in brackets then).
func Subject(host string, port uint16) string {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if port == 0 || port == 80 || port == 443 {
		return h
	}
	return net.JoinHostPort(h, strconv.Itoa(int(port)))
}

// Match decides a connection to host:port by the rules, with the policy's
// own precedence (exact deny > pattern deny > exact allow > pattern allow):
// the unexpired rules are compiled into a policy.Policy as AllowHosts and
// DenyHosts, so the semantics are identical by construction. It reports
// false when no rule covers the connection (including an address whose
// class policy refuses unless a rule names it precisely). A rule that
// does not parse is ignored; Store and ParseRules never produce one.
func Match(rules []Rule, host string, port uint16, now time.Time) (Decision, bool) {
	m := Compile(rules, now)
	return m.Match(host, port)
}

// Matcher is a compiled rule set, for callers that match many connections
// against rules that change rarely.
type Matcher struct {
	p     *policy.Policy
	rules map[string]*Rule // by rule text; the deny when text is both
}

// Compile builds a Matcher from the rules unexpired at now.
func Compile(rules []Rule, now time.Time) *Matcher {
	m := &Matcher{rules: make(map[string]*Rule)}
	var c policy.Config
	c.Default = policy.Ask
	for i := range rules {
		r := &rules[i]
		if expired(r, now) {
			continue
		}
		if err := checkRule(r.Host, r.Allow); err != nil {
			continue // an allow over a public suffix (saved before it was refused) holds nowhere
		}
		text := strings.TrimSpace(r.Host)
		if old, ok := m.rules[text]; !ok || (old.Allow && !r.Allow) {
			m.rules[text] = r
		}
		if r.Allow {
			c.AllowHosts = append(c.AllowHosts, text)
		} else {
			c.DenyHosts = append(c.DenyHosts, text)
		}
	}
	p, err := policy.New(c)
	if err != nil {
		p, _ = policy.New(policy.Config{Default: policy.Ask}) // unreachable: every host was checked
	}
	m.p = p
	return m
}

// Match decides host:port; see the package function Match.
func (m *Matcher) Match(host string, port uint16) (Decision, bool) {
	r, ok := m.Rule(host, port)
	if !ok {
		return Decision{}, false
	}
	return Decision{Allow: r.Allow, Scope: r.Scope, Wildcard: strings.HasPrefix(r.Host, "*."),
		By: "rule " + r.ID, Expires: r.Expires}, true
}

// Rule returns the rule that decides host:port, for the audit log: when
// an allow and a deny share a host text, the deny.
func (m *Matcher) Rule(host string, port uint16) (Rule, bool) {
	pd := m.p.Host(host, port)
	r, ok := m.rules[pd.Rule]
	if !ok || pd.Verdict == policy.Ask || r.Allow != (pd.Verdict == policy.Allow) {
		return Rule{}, false
	}
	return *r, true
}

// HostRules are the rules in force at now as policy host rules: expired
// ones left out, and allows over a public suffix (saved before they were
// refused) too, so that what remains always makes a valid policy.
func HostRules(rules []Rule, now time.Time) (allow, deny []string) {
	for i := range rules {
		r := &rules[i]
		if expired(r, now) || checkRule(r.Host, r.Allow) != nil {
			continue
		}
		if r.Allow {
			allow = append(allow, r.Host)
		} else {
			deny = append(deny, r.Host)
		}
	}
	return allow, deny
}

func expired(r *Rule, now time.Time) bool {
	return !r.Expires.IsZero() && !now.Before(r.Expires)
}

// checkHost validates one rule host in the policy's syntax (a deny's: a
// wildcard over a public suffix is a valid rule to deny).
func checkHost(h string) error {
	if _, err := policy.New(policy.Config{DenyHosts: []string{h}}); err != nil {
		return fmt.Errorf("host %q is not a valid rule (example.com, *.example.com, example.com:8443, 10.1.2.3)", h)
	}
	return nil
}

// checkRule validates a rule host as an allow or a deny: an allow may not
// be a wildcard over a public suffix.
func checkRule(h string, allow bool) error {
	if err := checkHost(h); err != nil || !allow {
		return err
	}
	if _, err := policy.New(policy.Config{AllowHosts: []string{h}}); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "policy: "))
	}
	return nil
}
