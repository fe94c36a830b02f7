package policy

import (
	"errors"
	"strings"
	"testing"
)

// fakeScript answers from a table: host -> "allow", "deny", "fail" or none.
type fakeScript map[string]string

func (f fakeScript) File() string { return "p.star" }
func (f fakeScript) IsHostAllowed(host string, port uint16) (bool, bool, error) {
	switch f[host] {
	case "allow":
		return true, true, nil
	case "deny":
		return false, true, nil
	case "fail":
		return false, false, errors.New("policy script p.star:3: is_host_allowed: boom")
	}
	return false, false, nil
}

func TestAScriptDecidesBetweenDenyRulesAndAllowRules(t *testing.T) {
	p, err := New(Config{AllowHosts: []string{"allowed.test", "vetoed.test"}, DenyHosts: []string{"denied.test", "10.0.0.0/8"},
		Script: fakeScript{"extra.test": "allow", "vetoed.test": "deny", "denied.test": "allow", "broken.test": "fail", "allowed.test": "", "10.1.2.3": "allow"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host string
		want Verdict
		rule string
	}{
		{"allowed.test", Allow, "allowed.test"},                // no opinion: the rules decide
		{"extra.test", Allow, "script:p.star:is_host_allowed"}, // the script widens the allow rules
		{"vetoed.test", Deny, "script:p.star:is_host_allowed"}, // and narrows them
		{"denied.test", Deny, "denied.test"},                   // a deny rule wins over the script
		{"broken.test", Deny, "script:p.star:is_host_allowed"}, // a failing script denies
		{"10.1.2.3", Deny, "10.0.0.0/8"},                       // addresses are not the script's
		{"nobody.test", Deny, "default"},
	} {
		d := p.Host(c.host, 443)
		if d.Verdict != c.want || d.Rule != c.rule {
			t.Errorf("Host(%s) = %v; want %v by %s", c.host, d, c.want, c.rule)
		}
	}
	if d := p.Name("extra.test"); d.Verdict != Allow {
		t.Errorf("Name(extra.test) = %v; DNS must answer where the script allows", d)
	}
	if d := p.Name("denied.test"); d.Verdict != Deny {
		t.Errorf("Name(denied.test) = %v; a deny rule wins", d)
	}
	if d := p.Host("broken.test", 443); !strings.Contains(d.Reason, "p.star:3") {
		t.Errorf("a failing script's denial should name its line: %v", d)
	}
}
