package config

import (
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

// ProjectDir is the project a workspace belongs to: the git repository
// containing it, else the workspace itself. ws is absolute.
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

# backend: native            # native, docker or vm
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
# audit:
#   max_size: 100m
#   keep: 3
# budget:                    # LLM use counted at the gateway; once spent, LLM requests are refused
#   tokens: 2000000          # input + output + cache tokens
#   usd: 5                   # priced per model: a built-in table, then these
#   prices:                  # USD per million tokens, by model glob
#     "my-model-*": {input: 1, output: 4, cache_read: 0.1, cache_write: 1.25}
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
	r := &Loaded{Project: ProjectDir(o.Workspace), Dir: o.Dir}
	if r.Dir == "" {
		r.Dir, _ = Dir()
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
	repo := filepath.Join(r.Project, RepoFileName)
	if data, err := readCapped(repo); err == nil && !o.NoFiles {
		switch st := CheckTrust(r.Dir, repo, data); st {
		case Trusted:
			l, err := Parse(repo, data, SourceRepo)
			if err != nil {
				return nil, err
			}
			r.Files = append(r.Files, repo)
			layers = append(layers, l)
		default:
			r.Warnings = append(r.Warnings, st.warning(repo))
		}
	} else if ce := (*Error)(nil); errors.As(err, &ce) {
		r.Warnings = append(r.Warnings, fmt.Sprintf("%v; ignored", err))
	}
	layers = append(layers, o.Flags)
	r.Spec, r.Origins = Merge(layers...)
	if err := r.Spec.Network.CheckTunnels(); err != nil {
		return nil, err
	}
	r.Spec.Workspace.Path = o.Workspace
	return r, nil
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

// trustFile is where the trust of file (absolute) is recorded in dir.
func trustFile(dir, file string) string {
	sum := sha256.Sum256([]byte(file))
	return filepath.Join(dir, "trusted", hex.EncodeToString(sum[:16]))
}

// ContentHash is what trust records of a file's content.
func ContentHash(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// CheckTrust says whether file (absolute) was trusted with content data.
func CheckTrust(dir, file string, data []byte) TrustStatus {
	if dir == "" {
		return NoDir
	}
	rec, err := os.ReadFile(trustFile(dir, file))
	if err != nil {
		return Untrusted
	}
	hash, path, _ := strings.Cut(strings.TrimSpace(string(rec)), " ")
	if path != file {
		return Untrusted
	}
	if hash != ContentHash(data) {
		return Changed
	}
	return Trusted
}

// Trust records that file (absolute), with content data, may be used.
func Trust(dir, file string, data []byte) error {
	if dir == "" {
		return errors.New("no config directory to record trust in (set HOME or XDG_CONFIG_HOME)")
	}
	return WriteFileAtomic(trustFile(dir, file), []byte(ContentHash(data)+" "+file+"\n"), 0o600)
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
