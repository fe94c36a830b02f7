package workspace

import (
	"encoding/json"
	"fmt"
	"path"
	"reflect"
	"sort"
	"strings"
)

// Reader gives a change's contents for the audit: the before side (the host
// file as it was) and the after side (what the sandbox left). Both are
// bounded by the caller; an error means "unknown", which is itself risky
// where contents matter.
type Reader interface {
	Before(c Change) ([]byte, error)
	After(c Change) ([]byte, error)
}

// Audit sets each change's Risks: one reason per rule that flags it. root
// is the workspace's absolute path (symlinks that point out of it are
// flagged). It reads contents only for the few files whose rules need them.
func Audit(changes []Change, root string, r Reader) {
	for i := range changes {
		changes[i].Risks = risks(changes[i], root, r)
	}
}

// gitRiskyKeys are .git/config variables that run code or send git
// somewhere else; a "*" stands for a subsection.
var gitRiskyKeys = []struct{ pattern, why string }{
	{"core.hookspath", "moves git's hooks to a directory of the sandbox's choosing"},
	{"core.fsmonitor", "runs a program on every git status"},
	{"core.sshcommand", "runs a program on every fetch and push over SSH"},
	{"core.gitproxy", "runs a program for git:// connections"},
	{"core.pager", "runs a program on git log, diff, show"},
	{"core.editor", "runs a program on commit and rebase"},
	{"core.askpass", "runs a program when git needs a password"},
	{"core.worktree", "points git at another directory"},
	{"sequence.editor", "runs a program on rebase -i"},
	{"gpg.program", "runs a program on signed commits"},
	{"gpg.*.program", "runs a program on signed commits"},
	{"credential.*", "changes how git finds credentials (helpers run programs)"},
	{"credential.helper", "runs a program that receives your credentials"},
	{"filter.*", "runs a program on checkout and add"},
	{"diff.*.textconv", "runs a program on git diff"},
	{"diff.*.command", "runs a program on git diff"},
	{"diff.external", "runs a program on git diff"},
	{"merge.*.driver", "runs a program on merges"},
	{"url.*.insteadof", "redirects remote URLs"},
	{"url.*.pushinsteadof", "redirects push URLs"},
	{"remote.*.url", "points a remote somewhere else"},
	{"remote.*.pushurl", "points a remote's pushes somewhere else"},
	{"remote.*.uploadpack", "runs a program on fetch"},
	{"remote.*.receivepack", "runs a program on push"},
	{"include.path", "pulls in another config file"},
	{"includeif.*", "pulls in another config file"},
	{"alias.*", "adds a git alias (one starting with ! runs a shell command)"},
	{"pager.*", "runs a program as a pager"},
	{"http.*", "changes HTTP settings (proxy, certificate checks, headers)"},
	{"http.proxy", "sends git's traffic through a proxy"},
	{"http.sslverify", "turns certificate checks off or on"},
	{"protocol.*", "allows other transport protocols"},
	{"uploadpack.*", "changes what fetch serves"},
	{"receive.*", "changes what push accepts"},
	{"submodule.*", "changes submodule URLs or update commands"},
	{"safe.directory", "trusts other repositories"},
	{"core.alternaterefscommand", "runs a program on fetch and push"},
	{"core.attributesfile", "reads attributes (naming filters) from a file elsewhere"},
	{"core.excludesfile", "reads a file elsewhere"},
	{"commit.template", "reads a file elsewhere into the commit message"},
	{"hook.*", "runs a program as a hook"},
	{"trailer.*.command", "runs a program on commit"},
	{"trailer.*.cmd", "runs a program on commit"},
	{"browser.*.cmd", "runs a program"},
	{"browser.*.path", "runs a program"},
	{"difftool.*.cmd", "runs a program on git difftool"},
	{"mergetool.*.cmd", "runs a program on git mergetool"},
	{"man.*.cmd", "runs a program on git help"},
	{"sendemail.*", "runs a program or sends mail on git send-email"},
	{"imap.tunnel", "runs a program on git imap-send"},
	{"ssh.variant", "changes how git runs ssh"},
	{"gc.*", "changes what git gc runs and keeps"},
	{"maintenance.*", "changes what git maintenance runs"},
	{"extensions.worktreeconfig", "makes git read config.worktree"},
}

// gitKeyRisk says why a .git/config key is risky, or "".
func gitKeyRisk(key string) string {
	parts := strings.Split(strings.ToLower(key), ".")
	for _, r := range gitRiskyKeys {
		pp := strings.Split(r.pattern, ".")
		if matchKey(pp, parts) {
			return r.why
		}
	}
	return ""
}

// matchKey matches section[.sub...].name patterns: "*" in the middle matches
// any subsection (one or more dot-separated parts); a trailing "*" any name.
func matchKey(pat, key []string) bool {
	if len(pat) == 0 || len(key) == 0 || pat[0] != key[0] {
		return false
	}
	switch len(pat) {
	case 2:
		return pat[1] == "*" || (len(key) == 2 && key[1] == pat[1])
	case 3:
		return len(key) >= 3 && key[len(key)-1] == pat[2]
	}
	return false
}

// ciPaths are CI definitions: they run with the repository's secrets.
var ciPaths = []string{".github/workflows/", ".github/actions/", ".gitlab-ci.yml", ".gitlab/", ".circleci/",
	".travis.yml", "Jenkinsfile", "azure-pipelines.yml", ".azure-pipelines/", ".buildkite/",
	"bitbucket-pipelines.yml", ".drone.yml", "appveyor.yml", ".appveyor.yml", ".woodpecker.yml", ".woodpecker/",
	".cirrus.yml", "cloudbuild.yaml", "cloudbuild.yml", ".tekton/", "codemagic.yaml", ".semaphore/"}

// buildNames are files a build runs (anywhere in the tree).
var buildNames = map[string]string{
	"Makefile": "a Makefile (make runs it)", "makefile": "a Makefile (make runs it)", "GNUmakefile": "a Makefile (make runs it)",
	"setup.py": "setup.py (pip runs it)", "setup.cfg": "setup.cfg (pip reads build settings)",
	"conftest.py": "conftest.py (pytest runs it)", "noxfile.py": "noxfile.py (nox runs it)", "tox.ini": "tox.ini (tox runs its commands)",
	"build.rs": "a Cargo build script", "justfile": "a justfile", "Justfile": "a justfile", "Taskfile.yml": "a Taskfile", "Rakefile": "a Rakefile",
	"CMakeLists.txt": "CMakeLists.txt (cmake runs it)", "meson.build": "meson.build", "build.gradle": "a Gradle build script",
	"build.gradle.kts": "a Gradle build script", "gradlew": "the Gradle wrapper", "mvnw": "the Maven wrapper", "pom.xml": "a Maven build (plugins run code)",
	".npmrc": ".npmrc (npm settings, registries, scripts)", ".yarnrc": "yarn settings", ".yarnrc.yml": "yarn settings (plugins run code)",
	".pnpmfile.cjs": "a pnpm hook file", "Gemfile": "a Gemfile (bundler runs it)", "go.work": "go.work (changes which modules build)",
}

var buildDirs = []string{".cargo/config", ".cargo/config.toml", ".mvn/", ".husky/", ".githooks/", ".devcontainer/"}

// agentFiles are read by coding agents as instructions or configuration.
var agentNames = map[string]bool{
	"CLAUDE.md": true, "CLAUDE.local.md": true, "AGENTS.md": true, "AGENT.md": true, "GEMINI.md": true,
	".cursorrules": true, ".windsurfrules": true, ".clinerules": true, ".goosehints": true, ".mcp.json": true,
	"copilot-instructions.md": true, ".aider.conf.yml": true,
}

var agentDirs = []string{".claude/", ".cursor/", ".codex/", ".gemini/", ".windsurf/", ".clinerules/", ".roo/", ".continue/", ".goose/", ".github/copilot-instructions.md", ".github/instructions/", ".github/prompts/", ".github/chatmodes/"}

var editorDirs = []string{".vscode/", ".idea/", ".fleet/", ".zed/", ".nvim.lua", ".nvimrc", ".exrc", ".lvimrc", ".dir-locals.el", ".helix/", ".theia/"}

var shellRC = map[string]bool{
	".bashrc": true, ".bash_profile": true, ".bash_login": true, ".bash_logout": true, ".profile": true,
	".zshrc": true, ".zprofile": true, ".zshenv": true, ".zlogin": true, ".zlogout": true, ".inputrc": true,
	".kshrc": true, ".cshrc": true, ".tcshrc": true, ".xprofile": true, ".xinitrc": true, ".xsessionrc": true,
	".gitconfig": true, ".pythonrc": true, ".pythonstartup": true, ".irbrc": true, ".pdbrc": true, ".curlrc": true,
	".wgetrc": true, ".ssh/config": true, ".config/fish/config.fish": true, ".config/git/config": true,
}

func hasPrefixAny(p string, prefixes []string) bool {
	for _, pre := range prefixes {
		if p == strings.TrimSuffix(pre, "/") || (strings.HasSuffix(pre, "/") && strings.HasPrefix(p, pre)) {
			return true
		}
	}
	return false
}

func risks(c Change, root string, r Reader) []string {
	var out []string
	add := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }
	if c.Kind == Reverted {
		return nil
	}
	p := c.Path
	base := path.Base(p)
	if c.After != nil && c.After.Type == TypeDir && c.After.Mode&0o6000 == 0 {
		return nil // a directory alone runs nothing; what goes in it is audited
	}
	if c.Kind == Deleted {
		// Removing a hook or a CI file runs nothing. Removing a git dir's
		// own files loses history, or makes git find another repository
		// above (one the sandbox cannot change, a project re-homed): never
		// applied without a yes, but for what git removes in passing.
		if why := gitDeletionRisk(p); why != "" {
			return []string{why}
		}
		return nil
	}

	// Git never runs a hook named *.sample; git init and clone write a dozen
	// executable ones, which are not "new executables" to worry about (the
	// workspace's own .git/hooks is flagged whatever the name, below).
	inertHook := strings.HasSuffix(base, ".sample") && path.Base(path.Dir(p)) == "hooks" &&
		(strings.HasPrefix(p, ".git/") || strings.Contains(p, "/.git/"))
	out = append(out, gitPathRisks(c, r, inertHook)...)
	if base == ".gitattributes" {
		if why := attributesRisk(c, r); why != "" {
			add("%s", why)
		}
	}
	if base == ".gitmodules" {
		add(".gitmodules: submodule URLs and update commands")
	}
	if hasPrefixAny(p, ciPaths) {
		add("CI definition: runs in CI with the repository's secrets")
	}
	if why, ok := buildNames[base]; ok {
		add("build file: %s", why)
	} else if strings.HasSuffix(base, ".mk") {
		add("build file: a make include")
	} else if hasPrefixAny(p, buildDirs) {
		add("build tool configuration or hook")
	}
	switch base {
	case "package.json":
		if why := packageJSONRisk(c, r); why != "" {
			add("%s", why)
		}
	case "pyproject.toml":
		if why := pyprojectRisk(c, r); why != "" {
			add("%s", why)
		}
	}
	if base == ".envrc" {
		add(".envrc: direnv runs it when you cd into the directory")
	}
	if base == ".airlock.yaml" {
		add(".airlock.yaml: airlock's sandbox settings for this repository (what later sandboxes may reach and change, once trusted)")
	}
	if hasPrefixAny(p, editorDirs) || strings.Contains(p, "/.vscode/") || strings.Contains(p, "/.idea/") {
		add("editor settings or tasks: an editor may run them when it opens the folder")
	}
	if agentNames[base] || hasPrefixAny(p, agentDirs) || strings.Contains(p, "/.claude/") || strings.Contains(p, "/.cursor/") {
		add("coding-agent instructions or configuration: the next agent session reads them")
	}
	if shellRC[p] || shellRC[base] && !strings.Contains(p, "/") {
		add("shell or tool startup file: runs when a shell or tool starts")
	}
	if a := c.After; a != nil {
		if a.Type == TypeFile && a.Mode&0o111 != 0 && !inertHook && (c.Before == nil || c.Before.Mode&0o111 == 0 || c.Before.Type != TypeFile) {
			add("new executable")
		}
		if a.Mode&0o6000 != 0 && (c.Before == nil || c.Before.Mode&0o6000 != a.Mode&0o6000) {
			add("setuid or setgid bit (%04o)", a.Mode&0o7777)
		}
		if a.Type == TypeSymlink && escapes(p, a.Link, root) {
			add("symlink pointing outside the workspace (to %s)", Quote(a.Link))
		}
		if a.Type == TypeOther {
			add("%s: not a regular file", a.Other)
		}
	}
	if Quote(p) != p && strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		add("name holds control characters")
	}
	sort.Strings(out)
	return out
}

// escapes reports whether a symlink at p with target link points out of the
// workspace, by its text (apply never follows links, so this is about what
// the link will do for later readers).
func escapes(p, link, root string) bool {
	if link == "" {
		return false
	}
	if path.IsAbs(link) {
		clean := path.Clean(link)
		return root == "" || !(clean == root || strings.HasPrefix(clean, strings.TrimSuffix(root, "/")+"/"))
	}
	j := path.Join(parent(p), link)
	return j == ".." || strings.HasPrefix(j, "../")
}

// knownHooks are the hook names git runs (githooks(5)).
var knownHooks = map[string]bool{
	"applypatch-msg": true, "pre-applypatch": true, "post-applypatch": true, "pre-commit": true,
	"pre-merge-commit": true, "prepare-commit-msg": true, "commit-msg": true, "post-commit": true,
	"pre-rebase": true, "post-checkout": true, "post-merge": true, "pre-push": true, "pre-receive": true,
	"update": true, "proc-receive": true, "post-receive": true, "post-update": true, "reference-transaction": true,
	"push-to-checkout": true, "pre-auto-gc": true, "post-rewrite": true, "sendemail-validate": true,
	"fsmonitor-watchman": true, "p4-changelist": true, "p4-prepare-changelist": true, "p4-post-changelist": true,
	"p4-pre-submit": true, "post-index-change": true,
}

// gitPathRisks flags a path of a git directory anywhere in the tree (the
// workspace's .git, a nested repository's, a submodule's under
// .git/modules) that git reads to run or read something, and a .git file
// or link. A bare repository elsewhere is known by its hooks' names.
func gitPathRisks(c Change, r Reader, inertHook bool) []string {
	p := c.Path
	parts := strings.Split(p, "/")
	if parts[len(parts)-1] == ".git" {
		if c.After != nil && c.After.Type != TypeDir {
			return []string{"a .git file or link points git at another repository"}
		}
		return nil
	}
	j := -1
	for i := len(parts) - 2; i >= 0; i-- {
		if parts[i] == ".git" {
			j = i
			break
		}
	}
	if j < 0 {
		if len(parts) >= 2 && parts[len(parts)-2] == "hooks" && knownHooks[parts[len(parts)-1]] {
			return []string{"git hook, if this directory is a git repository"}
		}
		if n := len(parts); n >= 3 && parts[n-3] == "objects" && parts[n-2] == "info" && strings.HasSuffix(parts[n-1], "alternates") {
			return []string{"alternates: redirects git to objects or a repository elsewhere"}
		}
		return nil
	}
	nested := j > 0
	rel := strings.Join(parts[j+1:], "/")
	if c.After != nil && c.After.Type == TypeSymlink {
		return []string{"a link in a git directory: git would read what it points at"}
	}
	role, why := gitRole(rel)
	switch role {
	case roleConfig:
		return gitConfigRisks(c, r)
	case roleRun:
		if inertHook && (nested || !strings.HasPrefix(rel, "hooks/")) {
			return nil // git clone's sample hooks, never run (the workspace's own are flagged whatever the name)
		}
		if nested {
			why = "in a nested repository: " + why
		}
		return []string{why}
	}
	return nil
}

// gitDeletionRisk says why removing p is risky, or "": a .git, or what
// makes a directory a repository (HEAD, config, objects, refs). What git
// removes in passing (loose objects and refs packed by gc, hooks, locks)
// is not.
func gitDeletionRisk(p string) string {
	parts := strings.Split(p, "/")
	n := len(parts)
	if parts[n-1] == ".git" {
		return "removes a repository's .git: git would find another repository above, or none"
	}
	if n >= 2 && parts[n-2] == ".git" {
		switch parts[n-1] {
		case "HEAD", "config", "objects", "refs":
			return "removes a repository's " + parts[n-1] + ": git would find another repository above, or none"
		}
	}
	return ""
}

// maxAuditBytes bounds what the audit reads of one file.
const maxAuditBytes = 1 << 20

func gitConfigRisks(c Change, r Reader) []string {
	after, err := r.After(c)
	if err != nil || len(after) > maxAuditBytes {
		return []string{Quote(c.Path) + " changed and could not be read for review"}
	}
	av, perr := ParseGitConfig(after)
	var before []GitConfigVar
	if c.Before != nil {
		if b, err := r.Before(c); err == nil {
			before, _ = ParseGitConfig(b)
		}
	}
	old := map[string]bool{}
	for _, v := range before {
		old[v.Key+"\x00"+v.Value] = true
	}
	var out []string
	seen := map[string]bool{}
	for _, v := range av {
		if old[v.Key+"\x00"+v.Value] || seen[v.Key] {
			continue
		}
		if why := gitKeyRisk(v.Key); why != "" {
			seen[v.Key] = true
			out = append(out, fmt.Sprintf("%s sets %s = %s: %s", gitConfigName(c.Path), v.Key, Quote(shorten(v.Value, 80)), why))
		}
	}
	if perr != nil {
		out = append(out, fmt.Sprintf("%s no longer parses (%v): git may read it differently", gitConfigName(c.Path), perr))
	}
	return out
}

// gitConfigName names a git config file in a finding.
func gitConfigName(p string) string {
	if p == ".git/config" {
		return p
	}
	return Quote(p)
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// attributesRisk flags .gitattributes lines that name filters, diff or
// merge drivers (which .git/config maps to programs).
func attributesRisk(c Change, r Reader) string {
	after, err := r.After(c)
	if err != nil || len(after) > maxAuditBytes {
		return ".gitattributes changed and could not be read for review"
	}
	var before []byte
	if c.Before != nil {
		before, _ = r.Before(c)
	}
	old := map[string]bool{}
	for _, l := range strings.Split(string(before), "\n") {
		old[strings.TrimSpace(l)] = true
	}
	for _, l := range strings.Split(string(after), "\n") {
		l = strings.TrimSpace(l)
		if old[l] || strings.HasPrefix(l, "#") {
			continue
		}
		for _, f := range strings.Fields(l)[min(1, len(strings.Fields(l))):] {
			if strings.HasPrefix(f, "filter=") || strings.HasPrefix(f, "diff=") || strings.HasPrefix(f, "merge=") {
				return fmt.Sprintf(".gitattributes sets %s: git runs the program configured for it", Quote(f))
			}
		}
	}
	return ""
}

// packageJSONRisk flags changed npm lifecycle and run scripts.
func packageJSONRisk(c Change, r Reader) string {
	after, err := r.After(c)
	if err != nil || len(after) > maxAuditBytes {
		return "package.json changed and could not be read for review"
	}
	type pkg struct {
		Scripts map[string]any `json:"scripts"`
		Bin     any            `json:"bin"`
		Config  any            `json:"config"`
	}
	var a, b pkg
	if err := json.Unmarshal(after, &a); err != nil {
		return "package.json does not parse: npm may read it differently"
	}
	if c.Before != nil {
		if bb, err := r.Before(c); err == nil {
			json.Unmarshal(bb, &b)
		}
	}
	var changed []string
	for k, v := range a.Scripts {
		if !reflect.DeepEqual(b.Scripts[k], v) {
			changed = append(changed, k)
		}
	}
	if len(changed) > 0 {
		sort.Strings(changed)
		return fmt.Sprintf("package.json scripts changed (%s): npm runs them", Quote(strings.Join(changed, ", ")))
	}
	if !reflect.DeepEqual(a.Bin, b.Bin) {
		return "package.json bin entries changed"
	}
	return ""
}

// pyprojectRisk flags a changed [build-system] table (the build backend
// pip runs) or tool hooks.
func pyprojectRisk(c Change, r Reader) string {
	after, err := r.After(c)
	if err != nil || len(after) > maxAuditBytes {
		return "pyproject.toml changed and could not be read for review"
	}
	var before []byte
	if c.Before != nil {
		before, _ = r.Before(c)
	}
	if tomlTable(after, "build-system") != tomlTable(before, "build-system") {
		return "pyproject.toml build system changed: pip runs its backend"
	}
	return ""
}

// tomlTable returns the raw lines of one [table] (enough to tell a change).
func tomlTable(b []byte, name string) string {
	var out []string
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "[") {
			in = strings.Trim(t, "[] ") == name || strings.HasPrefix(strings.Trim(t, "[] "), name+".")
			continue
		}
		if in && t != "" && !strings.HasPrefix(t, "#") {
			out = append(out, t)
		}
	}
	return strings.Join(out, "\n")
}
