package suggest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/config"
)

func lineOf(r audit.Record) string {
	b, _ := json.Marshal(r)
	return string(b) + "\n"
}

func deny(host string, port int) string {
	return lineOf(audit.Record{Kind: "network", Host: host, Port: port, Decision: "deny", Rule: "default", Reason: "no rule"})
}

func suggestFrom(t *testing.T, log string, cur Current) (*Suggestion, string) {
	t.Helper()
	var ns Needs
	if err := ns.Read(strings.NewReader(log)); err != nil {
		t.Fatal(err)
	}
	s, err := Suggest(&ns, cur)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	Render(&b, s)
	return s, b.String()
}

func hostValues(s *Suggestion) []string {
	var out []string
	for _, e := range s.Entries {
		if e.Key == "network.allow_hosts" {
			out = append(out, e.Value)
		}
	}
	return out
}

func TestWildcardsOnlyWhereThePublicSuffixListAllows(t *testing.T) {
	for name, c := range map[string]struct {
		hosts []string
		want  string
	}{
		"two names under a registrable domain make its wildcard":         {[]string{"a.example.com", "b.example.com"}, "*.example.com"},
		"the apex refused too is covered by the wildcard":                {[]string{"a.example.com", "b.example.com", "example.com"}, "*.example.com"},
		"one name under a domain stays exact":                            {[]string{"api.example.com"}, "api.example.com"},
		"the same name twice is one name":                                {[]string{"api.example.com", "API.example.com."}, "api.example.com"},
		"two registrable domains under com are never *.com":              {[]string{"example.com", "other.com"}, "example.com other.com"},
		"two registrable domains under co.uk are never *.co.uk":          {[]string{"foo.co.uk", "bar.co.uk"}, "bar.co.uk foo.co.uk"},
		"names under a registrable co.uk domain make its wildcard":       {[]string{"a.shop.co.uk", "b.shop.co.uk"}, "*.shop.co.uk"},
		"a private-section suffix such as github.io is never a wildcard": {[]string{"alice.github.io", "bob.github.io"}, "alice.github.io bob.github.io"},
		"names under a name under a private suffix make its wildcard":    {[]string{"a.alice.github.io", "b.alice.github.io"}, "*.alice.github.io"},
		"deeper names make the deepest parent's wildcard":                {[]string{"a.eu.example.com", "b.eu.example.com"}, "*.eu.example.com"},
		"names at different depths stay exact":                           {[]string{"a.example.com", "b.eu.example.com"}, "a.example.com b.eu.example.com"},
		"an unknown top-level domain's registrable name is one owner":    {[]string{"a.corp.internal", "b.corp.internal"}, "*.corp.internal"},
		"another port is host:port, never a wildcard":                    {[]string{"a.example.com:5432", "b.example.com:5432"}, "a.example.com:5432 b.example.com:5432"},
	} {
		t.Run(name, func(t *testing.T) {
			var log strings.Builder
			for _, h := range c.hosts {
				port := 443
				if hh, p, ok := strings.Cut(h, ":"); ok {
					h = hh
					fmt.Sscan(p, &port)
				}
				log.WriteString(deny(h, port))
			}
			s, out := suggestFrom(t, log.String(), Current{})
			if got := strings.Join(hostValues(s), " "); got != c.want {
				t.Errorf("suggested %q, want %q\n%s", got, c.want, out)
			}
		})
	}
}

func TestSuggestionIsGroupedExplainedAndLoads(t *testing.T) {
	log := deny("a.example.com", 443) + deny("a.example.com", 443) + deny("b.example.com", 80) +
		lineOf(audit.Record{Kind: "dns", Host: "b.example.com", Decision: "deny", Rule: "default"}) +
		lineOf(audit.Record{Kind: "network", Host: "api.other.test", Port: 443, Decision: "ask", Rule: "default", Count: 3}) +
		lineOf(audit.Record{Kind: "network", Host: "allowed.test", Port: 443, Decision: "allow", Rule: "allowed.test"}) +
		lineOf(audit.Record{Kind: "network", Host: "10.0.0.1", Port: 443, Decision: "deny", Rule: "class:private"}) +
		lineOf(audit.Record{Kind: "http", Host: "api.github.com", Method: "POST", Path: "/repos/x/y/issues", Decision: "deny", Rule: "endpoint rules"}) +
		lineOf(audit.Record{Kind: "http", Host: "api.github.com", Method: "GET", Path: "/x", Decision: "secret_blocked"}) +
		lineOf(audit.Record{Kind: "mcp", Subject: "github/create_issue", Decision: "deny", Rule: "unknown tool", Extra: map[string]string{"server": "github", "tool": "create_issue"}}) +
		lineOf(audit.Record{Kind: "hostexec", Op: "decide", Subject: "git push origin main", Decision: "deny", Reason: "no rule matches", Extra: map[string]string{"by": "auto"}}) +
		lineOf(audit.Record{Kind: "hostexec", Op: "decide", Subject: "make lint", Decision: "deny", Rule: "^make", Reason: "make: not found", Extra: map[string]string{"by": "auto"}}) +
		lineOf(audit.Record{Kind: "hostexec", Op: "decide", Subject: "make test", Decision: "allow", Rule: "^make", Extra: map[string]string{"by": "human:cli"}}) +
		lineOf(audit.Record{Kind: "hostexec", Op: "decide", Subject: "make deploy", Decision: "deny", Rule: "^make", Extra: map[string]string{"by": "human:cli"}}) +
		lineOf(audit.Record{Kind: "network", Host: "tracker.test", Port: 443, Decision: "ask", Rule: "default"}) +
		lineOf(audit.Record{Kind: "approval", Subject: "tracker.test:443", Host: "tracker.test", Port: 443, Decision: "deny", Rule: "once", Extra: map[string]string{"by": "cli"}}) +
		lineOf(audit.Record{Kind: "hostexec", Op: "decide", Subject: "rm -rf /", Decision: "deny", Rule: "^rm ", Reason: "matches auto_deny ^rm ", Extra: map[string]string{"by": "auto"}})
	cur := Current{Endpoints: []string{"api.github.com GET /repos/*"}, FileEndpoints: []string{"api.github.com GET /repos/*"}, AllowHosts: []string{"api.github.com"}, HostExecDeny: []string{"^rm "},
		Origin: func(key, rule string) string { return "global:3" }}
	s, out := suggestFrom(t, log, cur)
	for _, want := range []string{
		"network:\n  allow_hosts:\n    # 3 records: network ask ×3\n    - api.other.test\n    # 4 records for 2 names (a.example.com, b.example.com): dns deny ×1, network deny ×3\n    - '*.example.com'\n",
		"  endpoints:\n    # 1 record: http deny ×1\n    - api.github.com POST /repos/x/y/issues\n",
		"hostexec:\n  commands:\n",
		"    - match: ^git push origin main$\n      ask: true\n",
		"    - match: ^make test$\n",
		"#       - {tool: create_issue, allow: always}\n",
		`auto_deny "^rm " (global:3) forbids it`,
		`host command "make deploy": a person refused it when asked; not suggested`,
		"tracker.test: a person refused it when asked; not suggested",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "10.0.0.1") || strings.Contains(out, "allowed.test") || strings.Contains(out, "make lint") {
		t.Errorf("suggested what no allow rule can change or what was allowed:\n%s", out)
	}
	// The printed suggestion loads as a config file.
	if _, err := config.Parse("suggestion.yaml", []byte(out), config.SourceProject); err != nil {
		t.Errorf("the printed suggestion does not load: %v\n%s", err, out)
	}
	merged, n, err := Merge("p.yaml", nil, "/src/app", s.Writable())
	if err != nil || n != 5 {
		t.Fatalf("Merge into an empty file = %d, %v; want 5 entries", n, err)
	}
	again, n2, err := Merge("p.yaml", merged, "/src/app", s.Writable())
	if err != nil || n2 != 0 || !bytes.Equal(again, merged) {
		t.Errorf("merging twice added %d (%v), want nothing new:\n%s", n2, err, Diff(merged, again))
	}
}

func TestDenyRulesAreNeverSuggestedAround(t *testing.T) {
	log := deny("a.example.com", 443) + deny("b.example.com", 443) + deny("evil.example.com", 443) + deny("x.blocked.test", 443)
	cur := Current{DenyHosts: []string{"evil.example.com", "*.blocked.test"}, Origin: func(key, rule string) string { return "~/.config/airlock/config.yaml:4" }}
	s, out := suggestFrom(t, log, cur)
	if got := strings.Join(hostValues(s), " "); got != "*.example.com" {
		t.Errorf("suggested %q, want *.example.com for a and b only", got)
	}
	for _, want := range []string{
		"evil.example.com: deny rule evil.example.com (~/.config/airlock/config.yaml:4) forbids it, so an allow would be overridden",
		"x.blocked.test: deny rule *.blocked.test",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, e := range s.Entries {
		for _, n := range e.Needs {
			if n.Host == "evil.example.com" {
				t.Errorf("the denied host is counted under %s", e.Value)
			}
		}
	}
}

func TestHostileAuditLinesAreNotSuggested(t *testing.T) {
	log := deny("*.com", 443) + deny("*.example.com", 443) + deny("a.example.com\x1b[31m", 443) +
		deny("evil.com\nnetwork:\n  allow_hosts: ['*']", 443) + deny("xn--zz.example.com", 443) +
		deny("ünï.example.com", 443) + deny("airlock.internal", 443) + deny("127.1", 443) + deny("com", 443) +
		deny("a.example.com", 0) + deny("a.example.com", 70000) +
		lineOf(audit.Record{Kind: "http", Host: "api.test.dev", Method: "GET", Path: "/a/*", Decision: "deny", Rule: "endpoint rules"}) +
		lineOf(audit.Record{Kind: "http", Host: "api.test.dev", Method: "GET /x", Path: "/a", Decision: "deny", Rule: "endpoint rules"}) +
		lineOf(audit.Record{Kind: "mcp", Decision: "deny", Rule: "unknown tool", Extra: map[string]string{"server": "gh", "tool": "*"}}) +
		lineOf(audit.Record{Kind: "hostexec", Op: "decide", Subject: "git push\n- match: .*", Decision: "deny", Reason: "no rule matches", Extra: map[string]string{"by": "auto"}}) +
		"not json at all\n" + `{"kind":"network","host":` + "\n"
	s, out := suggestFrom(t, log, Current{})
	if !s.Empty() {
		t.Errorf("hostile lines made a suggestion:\n%s", out)
	}
	for _, l := range strings.Split(out, "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			t.Errorf("a line that is not a comment: %q", l)
		}
		for _, c := range l {
			if c < ' ' {
				t.Errorf("a control character reached the output: %q", l)
			}
		}
	}
	if !strings.Contains(out, `"*.com"`) || !strings.Contains(out, `\x1b`) {
		t.Errorf("the unusable names are not reported, escaped:\n%s", out)
	}
}

// A log far past the bounds is read only in part, and says so.
func TestAHugeAuditLogIsReadInPart(t *testing.T) {
	defer func(n int) { readLimit = n }(readLimit)
	readLimit = 20_000 // MaxRecords, scaled down to keep the test quick
	line := deny("a.example.com", 443)
	r := io.MultiReader(strings.NewReader(strings.Repeat(line, 1000)), &endless{line: []byte(deny("b.example.com", 443))})
	var ns Needs
	if err := ns.Read(r); err != nil {
		t.Fatal(err)
	}
	if !ns.Truncated || ns.Records > readLimit {
		t.Errorf("read %d records, truncated %v; want at most %d and truncated", ns.Records, ns.Truncated, readLimit)
	}
	// The bytes are bounded over every file of a run, as the records are.
	readLimit = MaxRecords
	byteLimit = 64 << 10
	var nb Needs
	for range 3 { // three rotated files' worth
		if err := nb.Read(&endless{line: []byte(line)}); err != nil {
			t.Fatal(err)
		}
	}
	if !nb.Truncated || int64(nb.Records*len(line)) > byteLimit {
		t.Errorf("read %d records (%d bytes) from endless files, truncated %v; want at most %d bytes in all", nb.Records, nb.Records*len(line), nb.Truncated, byteLimit)
	}
	byteLimit = MaxBytes
	// Distinct names past MaxNeeds are counted, not kept.
	var many strings.Builder
	for i := range MaxNeeds + 10 {
		many.WriteString(deny(fmt.Sprintf("h%d.example%d.com", i, i), 443))
	}
	var ns2 Needs
	ns2.Read(strings.NewReader(many.String()))
	if len(ns2.List) != MaxNeeds || ns2.Dropped != 10 {
		t.Errorf("kept %d needs, dropped %d; want %d and 10", len(ns2.List), ns2.Dropped, MaxNeeds)
	}
}

type endless struct {
	line []byte
	off  int
}

func (e *endless) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], e.line[e.off:])
		n += c
		e.off = (e.off + c) % len(e.line)
	}
	return n, nil
}

func TestMergeKeepsTheFileAndAddsUnderComments(t *testing.T) {
	file := []byte("# my settings\nversion: 1\nproject: /src/app\nnetwork:\n  allow_hosts: [pypi.org]  # python\n  deny_hosts: [gist.github.com]\nlimits:\n  memory: 2g\n")
	entries := []Entry{{Key: "network.allow_hosts", Value: "api.example.com", Needs: []*Need{{Kind: KindHost, Host: "api.example.com", Port: 443, Records: map[string]int{"network deny": 2}}}}}
	out, n, err := Merge("p.yaml", file, "/src/app", entries)
	if err != nil || n != 1 {
		t.Fatalf("Merge = %d, %v", n, err)
	}
	l, err := config.Parse("p.yaml", out, config.SourceProject)
	if err != nil {
		t.Fatal(err)
	}
	sp, _ := config.Merge(l)
	if strings.Join(sp.Network.AllowHosts, " ") != "pypi.org api.example.com" || strings.Join(sp.Network.DenyHosts, " ") != "gist.github.com" || sp.Limits.MemoryBytes != 2<<30 {
		t.Errorf("merged file reads as %+v", sp.Network)
	}
	d := Diff(file, out)
	if !strings.Contains(d, "+ ") || !strings.Contains(out2(out), "# 2 records: network deny ×2") || !strings.Contains(string(out), "# my settings") ||
		!strings.Contains(string(out), "  allow_hosts: # python\n    - pypi.org\n") || !strings.Contains(string(out), "\nlimits:\n") {
		t.Errorf("diff:\n%s\nfile:\n%s", d, out)
	}
	if _, _, err := Merge("p.yaml", []byte("network: [x]\n"), "/src/app", entries); err == nil {
		t.Error("merged into a network: that is not a mapping")
	}
}

func out2(b []byte) string { return string(b) }

func FuzzReadAndSuggest(f *testing.F) {
	f.Add([]byte(deny("a.example.com", 443) + deny("b.example.com", 443)))
	f.Add([]byte(deny("*.com", 443)))
	f.Add([]byte(lineOf(audit.Record{Kind: "http", Host: "api.test.dev", Method: "GET", Path: "/a/b", Decision: "deny", Rule: "endpoint rules"})))
	f.Add([]byte(lineOf(audit.Record{Kind: "hostexec", Op: "decide", Subject: "git 'a b'", Decision: "deny", Reason: "no rule matches", Extra: map[string]string{"by": "auto"}})))
	f.Add([]byte(`{"kind":"dns","host":"x.y.z","decision":"deny","rule":"default","count":99999999999}` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var ns Needs
		if err := ns.Read(bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
		s, err := Suggest(&ns, Current{DenyHosts: []string{"evil.example.com"}})
		if err != nil {
			t.Fatalf("Suggest: %v", err)
		}
		var out bytes.Buffer
		Render(&out, s)
		if _, err := config.Parse("s.yaml", out.Bytes(), config.SourceProject); err != nil {
			t.Fatalf("the suggestion does not load: %v\n%s", err, out.String())
		}
		for _, e := range s.Entries {
			if e.Value == "*.com" || strings.Contains(e.Value, "evil.example.com") {
				t.Fatalf("suggested %q", e.Value)
			}
		}
		if _, _, err := Merge("p.yaml", nil, "/p", s.Writable()); err != nil {
			t.Fatalf("Merge: %v", err)
		}
	})
}

func TestAWildcardsCommentNamesAFewOfItsNames(t *testing.T) {
	var log strings.Builder
	for _, h := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		log.WriteString(deny(h+".example.com", 443))
	}
	_, out := suggestFrom(t, log.String(), Current{})
	if want := "# 7 records for 7 names (a.example.com, b.example.com, c.example.com, d.example.com, e.example.com, …): network deny ×7\n    - '*.example.com'\n"; !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
}

// Endpoint rules only a run's flags had: an endpoint suggested for the
// files would, alone there, limit the host; the comment says so.
func TestAnEndpointForAHostWithoutRulesInTheFilesSaysItWouldLimitIt(t *testing.T) {
	log := lineOf(audit.Record{Kind: "http", Host: "api.github.com", Method: "POST", Path: "/graphql", Decision: "deny", Rule: "endpoint rules"})
	_, out := suggestFrom(t, log, Current{AllowHosts: []string{"api.github.com"}, Endpoints: []string{"api.github.com GET /repos/*"}})
	if want := "the config files have no endpoint rules for api.github.com (the run's came from flags), so this one alone would limit it to what is listed\n    - api.github.com POST /graphql\n"; !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
}

func TestDiffShowsWhatGoesThenWhatComesWithContext(t *testing.T) {
	old := "a\nb\nc\nd\ne\nf\ng\nh\n"
	new := "a\nb\nc\nd\nE\nf\ng\nh\ni\n"
	want := "  c\n  d\n- e\n+ E\n  f\n  g\n  h\n+ i\n"
	if got := Diff([]byte(old), []byte(new)); got != want {
		t.Errorf("Diff =\n%s\nwant\n%s", got, want)
	}
	if got := Diff(nil, []byte("x\n")); got != "+ x\n" {
		t.Errorf("Diff from nothing = %q", got)
	}
}
