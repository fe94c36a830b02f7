package hostexec

import (
	"fmt"
	"regexp"
	"strings"
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

// Decision is what the rules say of a canonical command: the verdict, the
// regex that decided it (empty when none matched) and why, for the audit log
// and the refusal.
type Decision struct {
	Verdict string
	Rule    string
	Reason  string
}

// Policy holds the three regex lists. It does no I/O.
type Policy struct {
	approve, ask, deny []*regexp.Regexp
}

// NewPolicy compiles the lists (Go RE2 syntax, unanchored: write ^ and $ to
// match a whole command). A bad regex is an error naming its list and itself.
func NewPolicy(autoApprove, ask, autoDeny []string) (*Policy, error) {
	var p Policy
	var err error
	if p.approve, err = compile("auto_approve", autoApprove); err != nil {
		return nil, err
	}
	if p.ask, err = compile("ask", ask); err != nil {
		return nil, err
	}
	if p.deny, err = compile("auto_deny", autoDeny); err != nil {
		return nil, err
	}
	return &p, nil
}

func compile(list string, exprs []string) ([]*regexp.Regexp, error) {
	out := make([]*regexp.Regexp, 0, len(exprs))
	for _, e := range exprs {
		re, err := regexp.Compile(e)
		if err != nil {
			return nil, fmt.Errorf("hostexec: %s regex %q: %w", list, e, err)
		}
		out = append(out, re)
	}
	return out, nil
}

// Decide matches cmd (a Canonical string): any auto_deny match denies, then
// an auto_approve match allows, then an ask match asks a human; a command no
// rule matches is denied.
func (p *Policy) Decide(cmd string) Decision {
	if re := first(p.deny, cmd); re != "" {
		return Decision{Deny, re, "matches auto_deny " + re}
	}
	if re := first(p.approve, cmd); re != "" {
		return Decision{Allow, re, "matches auto_approve " + re}
	}
	if re := first(p.ask, cmd); re != "" {
		return Decision{Ask, re, "matches ask " + re}
	}
	return Decision{Deny, "", "no rule matches"}
}

func first(res []*regexp.Regexp, s string) string {
	for _, re := range res {
		if re.MatchString(s) {
			return re.String()
		}
	}
	return ""
}
