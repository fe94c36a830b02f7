package hostexec

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/airlock-dev/airlock/internal/secrets"
)

// Canonical is the one string a command's argv is matched and shown as: the
// arguments joined by single spaces, each quoted the way a POSIX shell would
// need to get it back (as Python's shlex.quote does). An argument made only
// of letters, digits and @%+=:,./_- is written as is; any other, and the
// empty one, goes in single quotes, a single quote inside it closing the
// quotes, escaped, and reopening them:
//
//	[rm -rf /]        rm -rf /
//	[rm "-rf /"]      rm '-rf /'
//	[echo "it's" ""]  echo 'it'\''s' ''
//
// So a newline can only appear inside quotes, where $ (end of text, without
// (?m)) cannot match it, and a regex anchored with ^ and $ sees every
// argument.
func Canonical(argv []string) string {
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(quote(a))
	}
	return b.String()
}

func quote(s string) string {
	if s == "" {
		return "''"
	}
	for i := 0; i < len(s); i++ {
		if !safe(s[i]) {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
}

func safe(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("@%+=:,./_-", c) >= 0
}

// Verdicts of a Decision.
const (
	Allow = "allow"
	Deny  = "deny"
	Ask   = "ask"
)

// Rule is one host-command rule: the commands Match selects (a regular
// expression over the Canonical line), whether a human approves each (Ask;
// else it runs at once), and what the command's own sandbox may reach
// besides the workspace. Nothing else reaches it: no host variable, no
// other host path, no network.
type Rule struct {
	Match      string
	Ask        bool
	AllowHosts []string       // as --allow-host
	Secrets    []secrets.Spec // placeholders inside, the value in that sandbox's gateway
	RO, RW     []string       // absolute host paths
	SSHAgent   bool           // the host's SSH agent socket, at SSHAgentInside
}

// Decision is what the rules say of a canonical command: the verdict, the
// regex that decided it (empty when none matched) and why, for the audit log
// and the refusal; Grant is the rule whose grants the command runs with.
type Decision struct {
	Verdict string
	Rule    string
	Reason  string
	Grant   *Rule
}

// Policy holds the rules and the deny list. It does no I/O.
type Policy struct {
	approve, ask []compiled
	deny         []*regexp.Regexp
}

type compiled struct {
	re   *regexp.Regexp
	rule *Rule
}

// NewPolicy compiles the three plain lists (Go RE2 syntax, unanchored:
// write ^ and $ to match a whole command) as rules that grant nothing but
// the workspace. A bad regex is an error naming its list and itself.
func NewPolicy(autoApprove, ask, autoDeny []string) (*Policy, error) {
	return NewRules(nil, autoApprove, ask, autoDeny)
}

// NewRules compiles rules (their grants kept) and the plain lists.
func NewRules(rules []Rule, autoApprove, ask, autoDeny []string) (*Policy, error) {
	var p Policy
	add := func(list string, r Rule) error {
		re, err := regexp.Compile(r.Match)
		if err != nil {
			return fmt.Errorf("hostexec: %s regex %q: %w", list, r.Match, err)
		}
		c := compiled{re, &r}
		if r.Ask {
			p.ask = append(p.ask, c)
		} else {
			p.approve = append(p.approve, c)
		}
		return nil
	}
	for _, r := range rules {
		if err := add("commands", r); err != nil {
			return nil, err
		}
	}
	for _, e := range autoApprove {
		if err := add("auto_approve", Rule{Match: e}); err != nil {
			return nil, err
		}
	}
	for _, e := range ask {
		if err := add("ask", Rule{Match: e, Ask: true}); err != nil {
			return nil, err
		}
	}
	for _, e := range autoDeny {
		re, err := regexp.Compile(e)
		if err != nil {
			return nil, fmt.Errorf("hostexec: auto_deny regex %q: %w", e, err)
		}
		p.deny = append(p.deny, re)
	}
	return &p, nil
}

// Decide matches cmd (a Canonical string): any auto_deny match denies, then
// the first rule that runs at once allows, then the first that asks asks a
// human; a command no rule matches is denied.
func (p *Policy) Decide(cmd string) Decision {
	for _, re := range p.deny {
		if re.MatchString(cmd) {
			return Decision{Verdict: Deny, Rule: re.String(), Reason: "matches auto_deny " + re.String()}
		}
	}
	if c := first(p.approve, cmd); c != nil {
		return Decision{Allow, c.re.String(), "matches auto_approve " + c.re.String(), c.rule}
	}
	if c := first(p.ask, cmd); c != nil {
		return Decision{Ask, c.re.String(), "matches ask " + c.re.String(), c.rule}
	}
	return Decision{Verdict: Deny, Reason: "no rule matches"}
}

func first(cs []compiled, s string) *compiled {
	for i := range cs {
		if cs[i].re.MatchString(s) {
			return &cs[i]
		}
	}
	return nil
}
