package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// RepoFileName is a repository's own config file, honoured once trusted.
const RepoFileName = ".airlock.yaml"

// Dir is airlock's directory in the user's config dir
// ($XDG_CONFIG_HOME/airlock, else ~/.config/airlock).
func Dir() (string, error) {
	d, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("config: no config directory: %w", err)
	}
	return filepath.Join(d, "airlock"), nil
}

// DataDir is airlock's directory for data it keeps for the user (installed
// agent CLIs, agents' private homes): $AIRLOCK_DATA_DIR, else
// $XDG_DATA_HOME/airlock, else ~/.local/share/airlock.
func DataDir() (string, error) {
	if d := os.Getenv("AIRLOCK_DATA_DIR"); d != "" {
		return filepath.Abs(d)
	}
	if x := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "airlock"), nil
	}
	h, err := os.UserHomeDir()
	if err != nil || !filepath.IsAbs(h) {
		return "", errors.New("config: no data directory: set AIRLOCK_DATA_DIR or HOME")
	}
	return filepath.Join(h, ".local", "share", "airlock"), nil
}

// GlobalFile is the global config file in dir (see Dir).
func GlobalFile(dir string) string { return filepath.Join(dir, "config.yaml") }

// ProjectOf is the project workspace ws (absolute, symlinks resolved)
// belongs to, as recorded in airlock's config dir (dir) when the workspace
// was first used: ProjectDir then. The sandbox can write the workspace, so
// what is in it now cannot say which project it is: a .git made (or
// removed) in a workspace that is a repository's subdirectory would
// otherwise turn the next run into another project, out of reach of the
// repository's project file and its denies. The config dir is out of the
// sandbox's reach. Without a config dir there are no project files, trust
// or saved decisions to lose, and ProjectDir answers. A record that cannot
// be written is retried at the next use.
func ProjectOf(dir, ws string) string {
	if dir == "" {
		return ProjectDir(ws)
	}
	rec := projectRecord(dir, ws)
	if b, err := ReadRegular(rec, 16<<10); err == nil {
		if p, w, ok := strings.Cut(strings.TrimSuffix(string(b), "\n"), "\n"); ok && w == ws && filepath.IsAbs(p) {
			return p
		}
	}
	p := ProjectDir(ws)
	// Recorded where the user's config home exists (~/.config may be made,
	// not a missing home: HOME=/nonexistent is how many service users run).
	if _, err := os.Stat(filepath.Dir(filepath.Dir(dir))); err == nil {
		_ = WriteFileAtomic(rec, []byte(p+"\n"+ws+"\n"), 0o600) // best effort: see above
	}
	return p
}

// projectRecord is where ProjectOf records the project of ws.
func projectRecord(dir, ws string) string {
	sum := sha256.Sum256([]byte(ws))
	return filepath.Join(dir, "projects", "workspaces", hex.EncodeToString(sum[:16]))
}

// ProjectDir is the project a workspace would belong to by what is there
// now: the git repository containing it, else the workspace itself. ws is
// absolute. Callers want ProjectOf, which records this at first use.
func ProjectDir(ws string) string {
	for d := ws; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(filepath.Join(d, ".git")); err == nil {
			return d
		}
		if d == filepath.Dir(d) {
			return ws
		}
	}
}

// ProjectFile is the project's config file in dir: keyed by the project's
// path, outside the workspace, which the sandbox can write.
func ProjectFile(dir, project string) string {
	sum := sha256.Sum256([]byte(project))
	return filepath.Join(dir, "projects", hex.EncodeToString(sum[:8])+".yaml")
}

// ProjectTemplate is a new project file, every key commented out.
func ProjectTemplate(project string) []byte {
	return []byte(`# airlock's settings for ` + project + `
# (this file lives in your config dir, out of the sandbox's reach).
# Later sources win: defaults, ~/.config/airlock/config.yaml, this file,
# a trusted .airlock.yaml, flags. Deny rules from any source always apply.
# airlock config show --origin shows the result.
version: 1
project: ` + project + `

# backend: native            # native, docker, vm or kubernetes
# image: airlock/minimal:latest
# home: ~/.local/share/airlock/home   # keep the sandbox's home across runs
# env: [GOFLAGS, CI=1]
# mounts:
#   ro: [~/src/shared]
#   rw: [~/.cache/go-build]
# limits:
#   memory: 4g
#   cpus: 2
#   pids: 1024
#   tmp_size: 1g
#   timeout: 30m
# network:
#   mode: auto               # auto, transparent or proxy
#   allow_hosts: ["*.github.com", proxy.golang.org]
#   tunnel_hosts: [downloads.example.com]  # blind TLS tunnel: SNI checked, not intercepted
#   deny_hosts: [gist.github.com]
#   endpoints: ["api.github.com GET /repos/*"]
#   add_hosts: ["db.internal:10.0.0.5"]
#   upstream_ca: corp-ca.pem  # relative to this file
#   dns_upstream: 1.1.1.1:53
# ports: ["8000:8000", 3000]  # published: [HOST_IP:]HOST_PORT:SANDBOX_PORT, 127.0.0.1 unless named
# secrets:
#   - name: GITHUB_TOKEN
#     from: command          # env, file, command or github_app
#     command: gh auth token
#     hosts: [github.com, api.github.com]
#     body: false
#     git: true              # git over HTTPS to hosts uses it (user x-access-token)
#   - name: GH_APP_TOKEN     # a GitHub App installation token, minted on the host
#     github_app: {app_id: 1, installation_id: 2, private_key: ~/.config/airlock/app.pem,
#                  repositories: [org/repo], permissions: {contents: write}}
#     hosts: [github.com]
#     git: true
# workspace:
#   mode: overlay            # bind, overlay or copy
#   exclude: [node_modules]
#   protect_git: true
#   no_delete: false
#   auto_apply: false
#   apply_risky: false
#   undo_size: 1g            # bind: what runs overwrote and deleted, kept for airlock undo
# audit:
#   max_size: 100m
#   keep: 3
# budget:                    # LLM use counted at the gateway; once spent, LLM requests are refused
#   tokens: 2000000          # input + output + cache tokens
#   usd: 5                   # priced per model: a built-in table, then these
#   prices:                  # USD per million tokens, by model glob
#     "my-model-*": {input: 1, output: 4, cache_read: 0.1, cache_write: 1.25}
# agents:                    # per agent, for its runs (a flag still wins)
#   default: claude          # the agent run when none is named
#   claude:
#     keys: [ANTHROPIC_API_KEY]   # which of its key variables it gets (default: all)
#     hosts: [docs.example.com]   # allowed besides its provider's
#     args: [--model, opus]       # before the arguments after --
#     limits: {memory: 4g, timeout: 1h}
#     budget: {usd: 5}
#     backend: docker
#     image: airlock/agents:latest
`)
}

// Options say where Load looks.
type Options struct {
	Workspace string // absolute, symlinks resolved
	Dir       string // airlock's config dir; "" = Dir(), none if that fails
	Flags     *Layer // the command line's layer; nil for none
	// NoFiles reads no config file: defaults and flags only (a sandbox
	// airlock starts for its own use, such as an MCP server's).
	NoFiles bool
}

// Loaded is the effective config for one workspace.
type Loaded struct {
	Spec     Spec
	Origins  Origins
	Project  string   // the project directory
	Dir      string   // airlock's config dir ("" when there is none)
	Files    []string // config files read, lowest precedence first
	Warnings []string // e.g. an untrusted .airlock.yaml, ignored
}

// Load reads every source for o.Workspace and merges them: defaults, the
// global file, the project file, a trusted .airlock.yaml, o.Flags. A missing
// config dir or file is no error: a user without one gets the defaults.
func Load(o Options) (*Loaded, error) {
	r := &Loaded{Dir: o.Dir}
	if r.Dir == "" {
		r.Dir, _ = Dir()
	}
	if o.NoFiles {
		r.Project = ProjectDir(o.Workspace)
	} else {
		r.Project = ProjectOf(r.Dir, o.Workspace)
	}
	layers := []*Layer{Defaults()}
	add := func(path string, src Source) error {
		l, err := ReadFile(path, src)
		if errors.Is(err, fs.ErrPermission) {
			r.Warnings = append(r.Warnings, fmt.Sprintf("cannot read %s (permission denied): ignored", DisplayPath(path)))
			return nil
		}
		if err != nil || l == nil {
			return err
		}
		r.Files = append(r.Files, path)
		layers = append(layers, l)
		return nil
	}
	if r.Dir != "" && !o.NoFiles {
		if err := add(GlobalFile(r.Dir), SourceGlobal); err != nil {
			return nil, err
		}
		if err := r.enclosingDenies(&layers); err != nil {
			return nil, err
		}
		pf := ProjectFile(r.Dir, r.Project)
		if err := add(pf, SourceProject); err != nil {
			return nil, err
		}
		if l := layers[len(layers)-1]; l.Source == SourceProject {
			if s := l.vals["project"]; s != nil && s.v.(string) != r.Project {
				r.Warnings = append(r.Warnings, fmt.Sprintf("%s says it is for %s, but it is the file of %s", DisplayPath(pf), s.v, r.Project))
			}
		}
	}
	if !o.NoFiles {
		repo := filepath.Join(r.Project, RepoFileName)
		l, warn, err := repoLayer(r.Dir, repo)
		if err != nil {
			return nil, err
		}
		if warn != "" {
			r.Warnings = append(r.Warnings, warn)
		}
		if l != nil {
			r.Files = append(r.Files, l.File)
			layers = append(layers, l)
		}
	}
	layers = append(layers, o.Flags)
	r.Spec, r.Origins = Merge(layers...)
	if err := r.Spec.Network.CheckTunnels(); err != nil {
		return nil, err
	}
	r.Spec.Workspace.Path = o.Workspace
	if err := r.checkReadPaths(); err != nil {
		return nil, err
	}
	return r, nil
}

// LoadSpec is Load for a spec made whole elsewhere (a sandbox airlock starts
// for its own use: see internal/childspec): no file is read and s replaces
// the merged layers, then the same checks as Load's run on it.
func LoadSpec(o Options, s Spec) (*Loaded, error) {
	r := &Loaded{Dir: o.Dir, Spec: s, Origins: Origins{}}
	if r.Dir == "" {
		r.Dir, _ = Dir()
	}
	r.Project = ProjectDir(o.Workspace)
	if err := r.Spec.Network.CheckTunnels(); err != nil {
		return nil, err
	}
	r.Spec.Workspace.Path = o.Workspace
	if err := r.checkReadPaths(); err != nil {
		return nil, err
	}
	return r, nil
}

// DefaultSpec is the spec of the built-in defaults alone: what a run with
// no config file and no flag gets, and where a spec made in code starts.
func DefaultSpec() Spec {
	s, _ := Merge(Defaults())
	return s
}

// EnclosingRepos are the git repositories above project, outermost first:
// a repository nested in another (a clone inside a monorepo, or a .git a
// sandbox made before the workspace was first used) is still inside them.
func EnclosingRepos(project string) []string {
	var out []string
	for d := filepath.Dir(project); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(filepath.Join(d, ".git")); err == nil {
			out = append([]string{d}, out...)
		}
		if d == filepath.Dir(d) {
			return out
		}
	}
}

// enclosingDenies adds the deny rules of every repository enclosing the
// project (its project file's, its trusted .airlock.yaml's): only denies,
// which narrow, so a nested project never escapes the one it is in.
func (r *Loaded) enclosingDenies(layers *[]*Layer) error {
	for _, a := range EnclosingRepos(r.Project) {
		pf := ProjectFile(r.Dir, a)
		l, err := ReadFile(pf, SourceProject)
		if err != nil && !errors.Is(err, fs.ErrPermission) {
			return err
		}
		rl, warn, err := repoLayer(r.Dir, filepath.Join(a, RepoFileName))
		if err != nil {
			return err
		}
		for _, l := range []*Layer{l, rl} {
			if l == nil {
				continue
			}
			l.keepOnly(denyKeys)
			if len(l.vals) == 0 {
				continue
			}
			r.Files = append(r.Files, l.File+" (its denies: "+a+" encloses the project)")
			*layers = append(*layers, l)
		}
		if rl != nil && warn != "" {
			r.Warnings = append(r.Warnings, warn)
		}
	}
	return nil
}

// checkReadPaths refuses files airlock reads at start to decide what a
// sandbox may do (a decisions file's allows, a CA it trusts upstream) in
// a place the sandbox can write: the workspace, the project, a writable
// mount, a kept home. A run could then rewrite what the next one obeys; a
// trusted .airlock.yaml naming .airlock/decisions.yaml is the sandbox's to
// rewrite. A config file naming one is an error; a flag, a warning (the
// user typed it, now).
func (r *Loaded) checkReadPaths() error {
	writable := append([]string{r.Spec.Workspace.Path, r.Project, r.Spec.Home}, r.Spec.RW...)
	for key, p := range map[string]string{"approvals.decisions": r.Spec.Approvals.Decisions, "network.upstream_ca": r.Spec.Network.UpstreamCA, "network.policy_script": r.Spec.Network.PolicyScript} {
		if p == "" {
			continue
		}
		in := writableBy(p, writable)
		if in == "" {
			continue
		}
		var o Origin
		if ors := r.Origins[key]; len(ors) > 0 {
			o = ors[0]
		}
		msg := fmt.Sprintf("%s is inside %s, which the sandbox can write, so a run could change what the next one obeys: keep the file where no sandbox writes (e.g. in %s) and name it by its absolute path", p, in, DisplayPath(r.Dir))
		// A policy script is code that decides: refused wherever it was named.
		if (o.Source == SourceFlag || o.File == "") && key != "network.policy_script" {
			r.Warnings = append(r.Warnings, fmt.Sprintf("%s: %s", o, msg))
			continue
		}
		if o.File == "" {
			return fmt.Errorf("%s: %s", o, msg)
		}
		return &Error{File: strings.TrimSuffix(o.File, " (as last trusted)"), Line: o.Line, Key: key, Msg: msg}
	}
	return nil
}

// WritableBy returns the directory of dirs that p (as named, or where its
// links lead) is in, or "": a file airlock obeys must not be in one.
func WritableBy(p string, dirs []string) string { return writableBy(p, dirs) }

// writableBy returns the directory of dirs that p (as named, or where its
// links lead) is in, or "".
func writableBy(p string, dirs []string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return ""
	}
	paths := []string{abs}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		paths = append(paths, real)
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		ds := []string{d}
		if real, err := filepath.EvalSymlinks(d); err == nil && real != d {
			ds = append(ds, real)
		}
		for _, d := range ds {
			for _, q := range paths {
				if q == d || strings.HasPrefix(q, d+string(filepath.Separator)) {
					return d
				}
			}
		}
	}
	return ""
}

// repoLayer is what a repository's .airlock.yaml (file) adds: the whole
// file when its exact content is trusted; nothing when it was never
// trusted. Once trusted, a file the sandbox changed, removed, or replaced
// by something that is not a regular file (a FIFO, a link) still gives the
// deny rules of the version last trusted, with a warning: the sandbox can
// write the file, and must not remove a deny by touching it. When no copy
// of that version was kept (trust recorded by an older airlock) the run
// stops with the reason instead.
func repoLayer(dir, file string) (*Layer, string, error) {
	data, rerr := readCapped(file)
	gone := errors.Is(rerr, fs.ErrNotExist) || errors.Is(rerr, errNotDir)
	var st TrustStatus
	if rerr == nil {
		switch st = CheckTrust(dir, file, data); st {
		case Trusted:
			l, err := Parse(file, data, SourceRepo)
			return l, "", err
		case Untrusted, NoDir:
			return nil, st.warning(file), nil
		}
	}
	prev, kept, recorded := lastTrusted(dir, file)
	what := fmt.Sprintf("%s changed since you trusted it", file)
	switch {
	case gone:
		what = fmt.Sprintf("%s, which you trusted, is gone", file)
	case rerr != nil:
		what = fmt.Sprintf("%v", rerr)
	}
	switch {
	case !recorded && gone:
		return nil, "", nil
	case !recorded:
		return nil, fmt.Sprintf("%s; ignored", what), nil
	case !kept:
		return nil, "", fmt.Errorf("%s, and no copy of the version you trusted was kept to hold its deny rules: review it, then: airlock trust %s (or airlock trust --revoke %s)",
			what, filepath.Dir(file), filepath.Dir(file))
	}
	l, err := Parse(file+" (as last trusted)", prev, SourceRepo)
	if err != nil {
		return nil, "", fmt.Errorf("config: the trusted copy of %s: %w", file, err)
	}
	l.keepOnly(denyKeys)
	fix := "review it, then: airlock trust " + filepath.Dir(file)
	if gone {
		fix = "airlock trust --revoke " + filepath.Dir(file) + " drops them"
	}
	return l, fmt.Sprintf("%s: only its deny rules as last trusted apply; %s", what, fix), nil
}

// denyKeys are the settings that only narrow what a sandbox may do: those
// of a trusted .airlock.yaml hold even after the file changes.
var denyKeys = []string{"network.deny_hosts", "hostexec.auto_deny"}

// keepOnly drops every setting but keys.
func (l *Layer) keepOnly(keys []string) {
	for k := range l.vals {
		if !contains(keys, k) {
			delete(l.vals, k)
		}
	}
}

// TrustStatus is whether a .airlock.yaml may be used.
type TrustStatus int

const (
	Untrusted TrustStatus = iota // never trusted
	Trusted                      // trusted with exactly this content
	Changed                      // trusted once, changed since
	NoDir                        // no config dir to keep trust in
)

func (s TrustStatus) warning(file string) string {
	switch s {
	case Changed:
		return fmt.Sprintf("%s changed since you trusted it, so it was ignored; review it, then: airlock trust %s", file, filepath.Dir(file))
	case NoDir:
		return fmt.Sprintf("%s was ignored: there is no config directory to record trust in (set HOME or XDG_CONFIG_HOME)", file)
	}
	return fmt.Sprintf("%s is not trusted, so it was ignored; review it, then: airlock trust %s", file, filepath.Dir(file))
}

// trustFile is where the trust of file (absolute) is recorded in dir: a
// line "HASH PATH", then the trusted content itself, so that its deny
// rules outlive a change the sandbox makes to the file.
func trustFile(dir, file string) string {
	sum := sha256.Sum256([]byte(file))
	return filepath.Join(dir, "trusted", hex.EncodeToString(sum[:16]))
}

// ContentHash is what trust records of a file's content.
func ContentHash(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// readTrust reads file's trust record: the hash and, when kept, the content.
func readTrust(dir, file string) (hash string, content []byte, kept, ok bool) {
	if dir == "" {
		return "", nil, false, false
	}
	rec, err := ReadRegular(trustFile(dir, file), MaxFileSize+8<<10)
	if err != nil {
		return "", nil, false, false
	}
	line, rest, nl := bytes.Cut(rec, []byte("\n"))
	h, path, _ := strings.Cut(strings.TrimSpace(string(line)), " ")
	if path != file {
		return "", nil, false, false
	}
	if nl && ContentHash(rest) == h {
		return h, rest, true, true
	}
	return h, nil, false, true
}

// lastTrusted is the content file was last trusted with: kept is false
// when trust was recorded without it; recorded, whether file was trusted.
func lastTrusted(dir, file string) (data []byte, kept, recorded bool) {
	_, data, kept, recorded = readTrust(dir, file)
	return data, kept, recorded
}

// CheckTrust says whether file (absolute) was trusted with content data.
func CheckTrust(dir, file string, data []byte) TrustStatus {
	if dir == "" {
		return NoDir
	}
	hash, _, _, ok := readTrust(dir, file)
	if !ok {
		return Untrusted
	}
	if hash != ContentHash(data) {
		return Changed
	}
	return Trusted
}

// Trust records that file (absolute), with content data, may be used; the
// content is kept with the record (see trustFile).
func Trust(dir, file string, data []byte) error {
	if dir == "" {
		return errors.New("no config directory to record trust in (set HOME or XDG_CONFIG_HOME)")
	}
	return WriteFileAtomic(trustFile(dir, file), append([]byte(ContentHash(data)+" "+file+"\n"), data...), 0o600)
}

// Revoke forgets file's trust; it reports whether there was any.
func Revoke(dir, file string) (bool, error) {
	if dir == "" {
		return false, nil
	}
	err := os.Remove(trustFile(dir, file))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// WriteFileAtomic replaces path with data: readers see the old file or the
// new one, never half of it. Missing parent directories are made private.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
