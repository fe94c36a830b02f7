package hostexec

import (
	"strings"
	"testing"
)

func TestCanonical(t *testing.T) {
	tests := map[string]struct {
		argv []string
		want string
	}{
		"plain arguments are joined by single spaces": {[]string{"git", "push", "origin", "main"}, "git push origin main"},
		"an argument with a space is quoted":          {[]string{"rm", "-rf /"}, "rm '-rf /'"},
		"separate arguments are not quoted":           {[]string{"rm", "-rf", "/"}, "rm -rf /"},
		"the empty argument is two quotes":            {[]string{"echo", ""}, "echo ''"},
		"a single quote is closed, escaped, reopened": {[]string{"echo", "it's"}, `echo 'it'\''s'`},
		"shell syntax is quoted":                      {[]string{"echo", "a;b", "$(x)", "*"}, `echo 'a;b' '$(x)' '*'`},
		"a newline stays inside quotes":               {[]string{"git", "status\nrm"}, "git 'status\nrm'"},
		"safe punctuation is left alone":              {[]string{"make", "A=b,c:d@e%f+g./h_i-j"}, "make A=b,c:d@e%f+g./h_i-j"},
	}
	for name, tt := range tests {
		if got := Canonical(tt.argv); got != tt.want {
			t.Errorf("%s: Canonical(%q) = %q, want %q", name, tt.argv, got, tt.want)
		}
	}
}

func TestPolicyDecide(t *testing.T) {
	p, err := NewPolicy([]string{`^git (status|push)( |$)`, `^rm `}, []string{`^docker build( |$)`, `^git `}, []string{`^rm -rf( |$)`})
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		argv    []string
		verdict string
		rule    string
	}{
		"deny wins over approve":                      {[]string{"rm", "-rf", "/tmp/x"}, Deny, `^rm -rf( |$)`},
		"a quoted -rf is another command":             {[]string{"rm", "-rf /tmp/x"}, Allow, `^rm `},
		"approve wins over ask":                       {[]string{"git", "push", "origin"}, Allow, `^git (status|push)( |$)`},
		"ask when only an ask rule matches":           {[]string{"git", "commit"}, Ask, `^git `},
		"a command no rule matches is denied":         {[]string{"curl", "evil"}, Deny, ""},
		"a newline cannot smuggle past an anchored $": {[]string{"docker", "build\nx"}, Deny, ""},
	}
	for name, tt := range tests {
		d := p.Decide(Canonical(tt.argv))
		if d.Verdict != tt.verdict || d.Rule != tt.rule || d.Reason == "" {
			t.Errorf("%s: Decide(%q) = %+v, want %s by %q with a reason", name, Canonical(tt.argv), d, tt.verdict, tt.rule)
		}
	}
}

func TestRulesKeepTheirGrantsAndADenyStillWins(t *testing.T) {
	p, err := NewRules([]Rule{
		{Match: `^git push( |$)`, AllowHosts: []string{"github.com"}},
		{Match: `^docker build `, Ask: true, RW: []string{"/cache"}},
	}, []string{`^git `}, nil, []string{`--force`})
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		argv    []string
		verdict string
		hosts   int
	}{
		"an entry's command runs with its grants":          {[]string{"git", "push", "origin"}, Allow, 1},
		"a plain list's command runs with none":            {[]string{"git", "fetch"}, Allow, 0},
		"an entry that asks asks, grants kept":             {[]string{"docker", "build", "."}, Ask, 0},
		"a deny wins over an entry":                        {[]string{"git", "push", "--force"}, Deny, 0},
		"what matches nothing is denied, granting nothing": {[]string{"curl", "x"}, Deny, 0},
	}
	for name, tt := range tests {
		d := p.Decide(Canonical(tt.argv))
		if d.Verdict != tt.verdict || (d.Verdict != Deny) != (d.Grant != nil) || d.Grant != nil && len(d.Grant.AllowHosts) != tt.hosts {
			t.Errorf("%s: Decide(%q) = %+v (grant %+v), want %s with %d hosts", name, tt.argv, d, d.Grant, tt.verdict, tt.hosts)
		}
	}
	if d := p.Decide("docker build ."); d.Grant == nil || len(d.Grant.RW) != 1 {
		t.Errorf("the ask entry's grant: %+v", d.Grant)
	}
}

func TestNewPolicyNamesABadRegex(t *testing.T) {
	_, err := NewPolicy(nil, []string{"ok", "bad("}, nil)
	if err == nil || !strings.Contains(err.Error(), `ask regex "bad("`) {
		t.Fatalf("NewPolicy with a bad ask regex: err = %v, want it named", err)
	}
	if _, err := New(Config{AutoDeny: []string{"["}}, Env{Dir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "auto_deny") {
		t.Fatalf("New with a bad auto_deny regex: err = %v", err)
	}
}

func TestWorkspaceDir(t *testing.T) {
	tests := map[string]struct{ ws, cwd, want string }{
		"a subdirectory is sent relative":           {"/work", "/work/a/b", "a/b"},
		"the workspace itself is sent as none":      {"/work", "/work", ""},
		"outside the workspace is sent as none":     {"/work", "/tmp", ""},
		"a sibling with the same prefix is outside": {"/work", "/workshop", ""},
		"no AIRLOCK_WORKSPACE sends none":           {"", "/work/a", ""},
	}
	for name, tt := range tests {
		if got := WorkspaceDir(tt.ws, tt.cwd); got != tt.want {
			t.Errorf("%s: WorkspaceDir(%q, %q) = %q, want %q", name, tt.ws, tt.cwd, got, tt.want)
		}
	}
}
