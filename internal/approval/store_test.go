package approval

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const example = `version: 1
decisions:
  - id: r-1a2b3c4d
    host: "*.example.com"
    decision: allow      # or deny
    scope: global
    created: 2026-11-23T17:00:00Z
    expires: 2026-12-23T17:00:00Z
    by: ui
  - id: r-00000002
    host: evil.com
    decision: deny
    scope: project
    project: /src/app
    created: 2026-11-23T17:00:00Z
`

func TestParseRules(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    int    // rules
		wantErr string // substring, with the line as "decisions.yaml:N:"
	}{
		"the documented example parses":           {in: example, want: 2},
		"an empty file is no decisions":           {in: "", want: 0},
		"a file of comments is no decisions":      {in: "# nothing yet\n", want: 0},
		"a version and no decisions is none":      {in: "version: 1\n", want: 0},
		"an empty list is none":                   {in: "version: 1\ndecisions: []\n", want: 0},
		"a missing version is refused":            {in: "decisions: []\n", wantErr: "decisions.yaml:1: missing version"},
		"a newer version is refused":              {in: "version: 2\ndecisions: []\n", wantErr: "decisions.yaml:1: version 2 is not supported"},
		"a version that is no number is refused":  {in: "version: one\n", wantErr: "decisions.yaml:1: version must be a number"},
		"an unknown top-level key names its line": {in: "version: 1\nrules: []\n", wantErr: `decisions.yaml:2: unknown key "rules"`},
		"an unknown rule key names its line": {
			in: "version: 1\ndecisions:\n  - host: a.com\n    decision: deny\n    scope: global\n    note: x\n", wantErr: `decisions.yaml:6: unknown key "note"`,
		},
		"a misspelt decision names its line": {
			in: "version: 1\ndecisions:\n  - host: a.com\n    decision: denied\n    scope: global\n", wantErr: `decisions.yaml:4: decision "denied" is not allow or deny`,
		},
		"a missing decision is refused rather than read as allow or deny": {
			in: "version: 1\ndecisions:\n  - host: a.com\n    scope: global\n", wantErr: "decisions.yaml:3: missing decision",
		},
		"a bad host names its line": {
			in: "version: 1\ndecisions:\n  - host: http://a.com/\n    decision: deny\n    scope: global\n", wantErr: "decisions.yaml:3: host",
		},
		"scope once is not a saved decision": {
			in: "version: 1\ndecisions:\n  - host: a.com\n    decision: deny\n    scope: once\n", wantErr: `decisions.yaml:5: scope "once"`,
		},
		"a project decision needs its project": {
			in: "version: 1\ndecisions:\n  - host: a.com\n    decision: deny\n    scope: project\n", wantErr: "decisions.yaml:3: a project decision needs project",
		},
		"a relative project path is refused": {
			in: "version: 1\ndecisions:\n  - host: a.com\n    decision: deny\n    scope: project\n    project: app\n", wantErr: "decisions.yaml:3: a project decision needs project",
		},
		"a project path on a global decision is refused": {
			in: "version: 1\ndecisions:\n  - host: a.com\n    decision: deny\n    scope: global\n    project: /app\n", wantErr: "project: is only for scope project",
		},
		"a bad time names its line": {
			in: "version: 1\ndecisions:\n  - host: a.com\n    decision: deny\n    scope: global\n    expires: tomorrow\n", wantErr: `decisions.yaml:6: expires "tomorrow" is not a time`,
		},
		"expiry before creation is refused": {
			in: "version: 1\ndecisions:\n  - host: a.com\n    decision: deny\n    scope: global\n    created: 2026-11-23T17:00:00Z\n    expires: 2026-11-22T17:00:00Z\n", wantErr: "expires is not after created",
		},
		"a bad id names its line": {
			in: "version: 1\ndecisions:\n  - id: 7\n    host: a.com\n    decision: deny\n    scope: global\n", wantErr: "decisions.yaml:3: id must be",
		},
		"a duplicate id is refused": {
			in:      "version: 1\ndecisions:\n  - {id: r-00000001, host: a.com, decision: deny, scope: global}\n  - {id: r-00000001, host: b.com, decision: deny, scope: global}\n",
			wantErr: "decisions.yaml:4: id r-00000001 is also used on line 3",
		},
		"a key given twice is refused": {
			in: "version: 1\ndecisions:\n  - {host: a.com, decision: allow, decision: deny, scope: global}\n", wantErr: "decision given twice",
		},
		"a list where a value belongs is refused": {
			in: "version: 1\ndecisions:\n  - host: [a.com]\n    decision: deny\n    scope: global\n", wantErr: "decisions.yaml:3: host must be a single value",
		},
		"decisions given twice are refused, not the first list dropped": {
			in: "version: 1\ndecisions:\n  - {host: evil.com, decision: deny, scope: global}\ndecisions: []\n", wantErr: "decisions.yaml:4: decisions given twice",
		},
		"decisions that are no list are refused": {in: "version: 1\ndecisions: a.com\n", wantErr: "decisions.yaml:2: decisions must be a list"},
		"a second document is refused":           {in: "version: 1\n---\nversion: 1\n", wantErr: "a second YAML document"},
		"broken YAML names its line":             {in: "version: 1\ndecisions:\n  - host: [\n", wantErr: "decisions.yaml: line"},
		"a file over 1 MiB is refused":           {in: "version: 1\n" + strings.Repeat("#", MaxFileSize), wantErr: "larger than"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rules, err := ParseRules("decisions.yaml", []byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseRules = %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || len(rules) != tc.want {
				t.Fatalf("ParseRules = %d rules, %v; want %d", len(rules), err, tc.want)
			}
		})
	}
}

func TestParseRulesReadsEveryField(t *testing.T) {
	rules, err := ParseRules("d.yaml", []byte(example))
	if err != nil {
		t.Fatal(err)
	}
	want := []Rule{
		{ID: "r-1a2b3c4d", Host: "*.example.com", Allow: true, Scope: Global, Created: t0, Expires: t0.AddDate(0, 1, 0), By: "ui"},
		{ID: "r-00000002", Host: "evil.com", Scope: Project, Project: "/src/app", Created: t0},
	}
	for i := range want {
		if rules[i] != want[i] {
			t.Errorf("rule %d = %+v, want %+v", i, rules[i], want[i])
		}
	}
}

func TestAPreparedFileWithoutIDsGetsStableOnes(t *testing.T) {
	in := []byte("version: 1\ndecisions:\n  - {host: a.com, decision: allow, scope: session}\n  - {host: b.com, decision: deny, scope: global}\n")
	a, err := ParseRules("f", in)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := ParseRules("f", in)
	if a[0].ID == "" || a[0].ID == a[1].ID || a[0].ID != b[0].ID || !validID(a[0].ID) {
		t.Errorf("derived IDs %s %s (again %s), want stable, distinct r-XXXXXXXX", a[0].ID, a[1].ID, b[0].ID)
	}
}

func TestMarshalRulesRoundTrips(t *testing.T) {
	rules, _ := ParseRules("d", []byte(example))
	rules = append(rules, Rule{ID: "r-0000000a", Host: "[::1]:8080", Allow: true, Scope: Global, Created: t0})
	data, err := MarshalRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseRules("d", data)
	if err != nil {
		t.Fatalf("ParseRules(MarshalRules) = %v\n%s", err, data)
	}
	if len(back) != len(rules) {
		t.Fatalf("round trip gave %d rules, want %d", len(back), len(rules))
	}
	for i := range rules {
		if back[i] != rules[i] {
			t.Errorf("round trip rule %d = %+v, want %+v", i, back[i], rules[i])
		}
	}
}

func TestOpenStore(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(filepath.Join(dir, "missing"))
	if err != nil || len(s.All()) != 0 {
		t.Fatalf("OpenStore of a missing dir = %v, %v; want no rules", s, err)
	}
	os.WriteFile(filepath.Join(dir, StoreFile), []byte("version: 1\ndecisions:\n  - host: a.com\n    decision: nope\n"), 0o600)
	if _, err := OpenStore(dir); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, StoreFile)+":4:") {
		t.Fatalf("OpenStore of a malformed file = %v, want an error naming the file and line 4", err)
	}
}

func TestTheStoresFileHoldsOnlySavedScopes(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, StoreFile), []byte("version: 1\ndecisions:\n  - {host: a.com, decision: deny, scope: session}\n"), 0o600)
	if _, err := OpenStore(dir); err == nil || !strings.Contains(err.Error(), ":3:") || !strings.Contains(err.Error(), "saved scopes") {
		t.Errorf("OpenStore of a file with a session decision = %v, want an error at line 3", err)
	}
}

func TestStoreAddRulesRevokeAndExpiry(t *testing.T) {
	dir := t.TempDir()
	s, _ := OpenStore(dir)
	clk := &clock{t: t0}
	s.now = clk.now
	g, err := s.Add(Rule{Host: "*.example.com", Allow: true, Scope: Global, By: "ui"})
	if err != nil {
		t.Fatal(err)
	}
	if !validID(g.ID) || !g.Created.Equal(t0) {
		t.Errorf("Add = %+v, want a fresh ID and Created now", g)
	}
	p, _ := s.Add(Rule{Host: "evil.com", Scope: Project, Project: "/src/app"})
	s.Add(Rule{Host: "other.com", Scope: Project, Project: "/src/other"})
	e, _ := s.Add(Rule{Host: "brief.com", Allow: true, Scope: Global, Expires: t0.Add(time.Hour)})

	hosts := func(rs []Rule) string {
		var h []string
		for _, r := range rs {
			h = append(h, r.Host)
		}
		return strings.Join(h, " ")
	}
	if got := hosts(s.Rules("/src/app")); got != "*.example.com evil.com brief.com" {
		t.Errorf("Rules(/src/app) = %s, want the global ones and that project's", got)
	}
	clk.add(time.Hour)
	if got := hosts(s.Rules("/src/app")); got != "*.example.com evil.com" {
		t.Errorf("Rules after expiry = %s, want brief.com gone", got)
	}
	if len(s.All()) != 4 {
		t.Errorf("All() = %d rules, want 4 (expired ones until the next write)", len(s.All()))
	}
	if _, err := s.Add(Rule{Host: "evil.com", Allow: true, Scope: Project, Project: "/src/app"}); err != nil {
		t.Fatal(err)
	}
	all := s.All()
	if got := hosts(all); got != "*.example.com other.com evil.com" {
		t.Errorf("after a superseding Add: %s, want the expired one pruned and evil.com replaced", got)
	}
	if !all[2].Allow {
		t.Errorf("superseding rule = %+v, want the new allow", all[2])
	}
	if r, err := s.Revoke(g.ID); err != nil || r.Host != "*.example.com" {
		t.Errorf("Revoke(%s) = %+v, %v", g.ID, r, err)
	}
	if _, err := s.Revoke(g.ID); !errors.Is(err, ErrNoRule) {
		t.Errorf("second Revoke = %v, want ErrNoRule", err)
	}
	if _, err := s.Revoke(p.ID); !errors.Is(err, ErrNoRule) {
		t.Errorf("Revoke of a superseded rule = %v, want ErrNoRule", err)
	}
	_ = e
	again, err := OpenStore(dir)
	if err != nil || hosts(again.All()) != "other.com evil.com" {
		t.Errorf("reopened: %s, %v; want other.com evil.com", hosts(again.All()), err)
	}
	fi, _ := os.Stat(filepath.Join(dir, StoreFile))
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestStoreAddRefuses(t *testing.T) {
	tests := map[string]Rule{
		"a session decision":               {Host: "a.com", Scope: Session},
		"a once decision":                  {Host: "a.com", Scope: Once},
		"a bad host":                       {Host: "a com", Scope: Global},
		"a project decision with no path":  {Host: "a.com", Scope: Project},
		"a global decision with a project": {Host: "a.com", Scope: Global, Project: "/x"},
		"a malformed id":                   {ID: "42", Host: "a.com", Scope: Global},
	}
	for name, r := range tests {
		t.Run(name, func(t *testing.T) {
			s, _ := OpenStore(t.TempDir())
			if got, err := s.Add(r); err == nil {
				t.Errorf("Add(%+v) = %+v, want an error", r, got)
			}
		})
	}
}

func TestStoreNeverOverwritesAFileItCannotRead(t *testing.T) {
	dir := t.TempDir()
	s, _ := OpenStore(dir)
	bad := []byte("version: 1\ndecisions:\n  - {host: evil.com, decision: deny, scope: global, colour: red}\n")
	os.WriteFile(filepath.Join(dir, StoreFile), bad, 0o600)
	if _, err := s.Add(Rule{Host: "a.com", Allow: true, Scope: Global}); err == nil || !strings.Contains(err.Error(), ":3:") {
		t.Errorf("Add over a malformed file = %v, want its error with the line", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, StoreFile)); string(got) != string(bad) {
		t.Errorf("the malformed file was rewritten:\n%s", got)
	}
}

func TestTwoStoresAddingConcurrentlyLoseNothing(t *testing.T) {
	dir := t.TempDir()
	a, _ := OpenStore(dir)
	b, _ := OpenStore(dir)
	const each = 40
	var wg sync.WaitGroup
	for i, s := range []*Store{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range each {
				if _, err := s.Add(Rule{Host: fmt.Sprintf("h%d-%d.com", i, j), Allow: true, Scope: Global}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	c, err := OpenStore(dir)
	if err != nil || len(c.All()) != 4*each {
		t.Fatalf("after concurrent Adds: %d rules, %v; want %d", len(c.All()), err, 4*each)
	}
}

// TestStoreChildProcess is run by TestTwoProcessesAddingConcurrentlyLoseNothing.
func TestStoreChildProcess(t *testing.T) {
	dir := os.Getenv("APPROVAL_STORE_DIR")
	if dir == "" {
		t.Skip("only run as a child process")
	}
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(os.Getenv("APPROVAL_STORE_N"))
	for j := range n {
		if _, err := s.Add(Rule{Host: fmt.Sprintf("%s-%d.com", os.Getenv("APPROVAL_STORE_NAME"), j), Scope: Global}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTwoProcessesAddingConcurrentlyLoseNothing(t *testing.T) {
	dir := t.TempDir()
	const each = 30
	var cmds []*exec.Cmd
	for _, name := range []string{"p1", "p2", "p3"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestStoreChildProcess$")
		cmd.Env = append(os.Environ(), "APPROVAL_STORE_DIR="+dir, "APPROVAL_STORE_NAME="+name, "APPROVAL_STORE_N="+strconv.Itoa(each))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child: %v", err)
		}
	}
	s, err := OpenStore(dir)
	if err != nil || len(s.All()) != 3*each {
		t.Fatalf("after three processes: %d rules, %v; want %d", len(s.All()), err, 3*each)
	}
}

func TestAWatcherSeesAnotherStoresChanges(t *testing.T) {
	dir := t.TempDir()
	a, _ := OpenStore(dir)
	b, _ := OpenStore(dir)
	const every = 100 * time.Millisecond
	changed := make(chan struct{}, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { b.Watch(ctx, every, func() { changed <- struct{}{} }); close(done) }()
	defer func() { cancel(); <-done }()

	wait := func(what string) {
		t.Helper()
		select {
		case <-changed:
		case <-time.After(2 * every):
			t.Fatalf("the watcher did not see %s within 2 poll intervals", what)
		}
	}
	r, err := a.Add(Rule{Host: "a.com", Allow: true, Scope: Global})
	if err != nil {
		t.Fatal(err)
	}
	wait("an Add")
	if got := b.Rules(""); len(got) != 1 || got[0].ID != r.ID {
		t.Fatalf("watcher's rules = %+v, want the one added", got)
	}
	a.Revoke(r.ID)
	wait("a Revoke")
	if got := b.Rules(""); len(got) != 0 {
		t.Fatalf("watcher's rules after Revoke = %+v, want none", got)
	}

	a.Add(Rule{Host: "keep.com", Scope: Global})
	wait("a deny")
	os.WriteFile(filepath.Join(dir, StoreFile), []byte("version: 1\ndecisions: {\n"), 0o600)
	deadline := time.Now().Add(time.Second)
	for b.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(every / 2)
	}
	if err := b.Err(); err == nil || !strings.Contains(err.Error(), StoreFile) {
		t.Errorf("Err() after a malformed write = %v, want the file's error", err)
	}
	if got := b.Rules(""); len(got) != 1 || got[0].Host != "keep.com" {
		t.Errorf("rules while the file is malformed = %+v, want the last good (keep.com)", got)
	}
	select {
	case <-changed:
		t.Error("changed was called for a malformed file")
	default:
	}
	c, _ := OpenStore(t.TempDir())
	c.path = filepath.Join(dir, StoreFile)
	writeAtomic(c.path, []byte("version: 1\ndecisions: []\n"))
	wait("a repaired file")
	if b.Err() != nil || len(b.Rules("")) != 0 {
		t.Errorf("after repair: Err %v, rules %+v; want nil and none", b.Err(), b.Rules(""))
	}
}

func FuzzParseRules(f *testing.F) {
	f.Add([]byte(example))
	f.Add([]byte(""))
	f.Add([]byte("version: 1\ndecisions:\n  - {host: a.com, decision: deny, scope: global}\n"))
	f.Add([]byte("version: 1\ndecisions:\n  - &a {host: a.com, decision: deny, scope: global}\n  - *a\n")) // aliases
	f.Add([]byte("version: 1\ndecisions:\n  - {<<: {host: a.com}, decision: deny, scope: global}\n"))      // merge keys
	f.Add([]byte("version: 1\ndecisions:\n  - {host: \"[::1]:*\", decision: allow, scope: project, project: /p}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rules, err := ParseRules("f", b)
		if err != nil {
			return
		}
		// Whatever parses is valid, and survives a write and a read.
		for i := range rules {
			if err := validRule(&rules[i]); err != nil || !validID(rules[i].ID) {
				t.Fatalf("ParseRules accepted an invalid rule %+v: %v", rules[i], err)
			}
		}
		data, err := MarshalRules(rules)
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseRules("f", data)
		if err != nil || len(back) != len(rules) {
			t.Fatalf("re-reading what was written: %d rules, %v; want %d\n%s", len(back), err, len(rules), data)
		}
	})
}
