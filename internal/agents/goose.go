package agents

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Goose (aaif-goose/goose, formerly block/goose) is a Rust binary, not on
// npm: its profile is generated and table-tested, not run live here (no
// binary on this machine). From its v1.50.0 sources and docs:
//   - `goose run -t TEXT` runs headless; `goose session` is interactive;
//     both take -n/--name, -r/--resume and --session-id; `run` also
//     --provider/--model, --system (not with --recipe) and --no-session
//     (not with a name or resume).
//   - a resume looks a session up by name or id, so airlock names each new
//     session (`-n airlock-...`) and resumes it with `-r -n NAME`; sessions
//     live in a SQLite database under ~/.local/share/goose/sessions since
//     1.10 (.jsonl files before), which airlock does not parse.
//   - ~/.config/goose/config.yaml holds GOOSE_PROVIDER/GOOSE_MODEL and
//     `extensions:` (type stdio: name, cmd, args, timeout in seconds);
//     environment variables beat it, so -e GOOSE_MODEL=... still works.
//   - ~/.config/goose/.goosehints is read into every session's system
//     prompt (with the developer extension), run or interactive.
//   - keys come from ANTHROPIC_API_KEY, OPENAI_API_KEY, GOOGLE_API_KEY;
//     GOOSE_DISABLE_KEYRING keeps it from a keyring that does not exist
//     in a sandbox; it trusts the system CA store.
var goose = &Profile{
	Name:    "goose",
	Display: "Goose",
	Version: "1.50.0",
	Binary:  "goose",
	Install: "Goose is not on npm: install its binary from GitHub releases, e.g. " +
		"curl -fsSL https://github.com/aaif-goose/goose/releases/download/v1.50.0/download_cli.sh | GOOSE_VERSION=v1.50.0 CONFIGURE=false bash " +
		"(it goes to ~/.local/bin; put that on PATH), or the image ghcr.io/aaif-goose/goose",
	// No fixed hosts: each key found opens its own provider's host only.
	Keys: []Key{
		{Env: "ANTHROPIC_API_KEY", Hosts: []string{"api.anthropic.com"}},
		{Env: "OPENAI_API_KEY", Hosts: []string{"api.openai.com"}},
		{Env: "GOOGLE_API_KEY", From: []string{"GOOGLE_API_KEY", "GEMINI_API_KEY"}, Hosts: []string{geminiHost}},
	},
	Env: []string{
		"GOOSE_MODE=auto",                   // no approval prompts: the sandbox is the boundary
		"GOOSE_DISABLE_KEYRING=1",           // no keyring in a sandbox; keys are in the environment
		"GOOSE_TELEMETRY_ENABLED=false",     // no usage data
		"GOOSE_DISABLE_SESSION_NAMING=true", // no extra model call to title the session
	},
	RepoSettings: []string{".goosehints", "AGENTS.md", ".goose/recipes"},
	Launch:       gooseLaunch,
	FindSession:  gooseFindSession,
}

func init() { register(goose) }

// gooseProviders maps the key found to goose's provider and the model it
// starts with (GOOSE_MODEL in the environment or --model overrides it).
var gooseProviders = []struct{ key, provider, model string }{
	{"ANTHROPIC_API_KEY", "anthropic", "claude-sonnet-4-5"},
	{"OPENAI_API_KEY", "openai", "gpt-4o"},
	{"GOOGLE_API_KEY", "google", "gemini-2.5-pro"},
}

// The private home's goose files.
const (
	gooseConfig  = ".config/goose/config.yaml"
	gooseHints   = ".config/goose/.goosehints"
	gooseMarker  = ".local/share/goose/airlock-session" // the name of this run's session
	gooseDataDir = ".local/share/goose/sessions"
)

// gooseLaunch runs `goose run [naming] ARGS...` (or `goose session` when
// ARGS are empty or start with "session"), naming a new session so it can
// be resumed, or resuming in.Resume.
func gooseLaunch(in Inputs) (Launch, error) {
	cfg, err := gooseConfigYAML(in)
	if err != nil {
		return Launch{}, err
	}
	sub, args := "run", slices.Clone(in.Args)
	switch {
	case len(args) == 0:
		sub = "session"
	case args[0] == "run" || args[0] == "session":
		sub, args = args[0], args[1:]
	}
	argv := []string{"goose", sub}
	files := map[string][]byte{gooseConfig: cfg}
	if in.Orientation != "" {
		files[gooseHints] = []byte(in.Orientation + "\n")
	}
	// The user's own naming or --no-session wins (and the marker of an
	// earlier run is emptied); otherwise the session is named by airlock
	// (new) or by the id to resume.
	files[gooseMarker] = nil
	if !hasFlag(args, "-n", "--name", "--session-id", "--id", "--path", "-r", "--resume", "--no-session") {
		name := in.Resume
		if name != "" {
			argv = append(argv, "--resume")
		} else {
			b := make([]byte, 8)
			if _, err := rand.Read(b); err != nil {
				return Launch{}, err
			}
			name = "airlock-" + hex.EncodeToString(b)
		}
		argv = append(argv, "--name", name)
		files[gooseMarker] = []byte(name + "\n")
	}
	return Launch{Argv: append(argv, args...), Files: files}, nil
}

// hasFlag reports whether args hold one of the flags (alone or as --flag=V).
func hasFlag(args []string, flags ...string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		name, _, _ := strings.Cut(a, "=")
		if slices.Contains(flags, name) {
			return true
		}
	}
	return false
}

// gooseConfigYAML is ~/.config/goose/config.yaml: the provider of the
// first key found and its starting model, telemetry off, the developer
// extension (shell and file tools), and each MCP server as a stdio
// extension running airlock's bridge, with a timeout (seconds) above the
// approval timeout.
func gooseConfigYAML(in Inputs) ([]byte, error) {
	timeout := in.ToolTimeout
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	secs := int64(timeout/time.Second) + 1
	exts := map[string]any{
		"developer": map[string]any{
			"type": "builtin", "name": "developer", "enabled": true, "bundled": true, "timeout": 300,
		},
	}
	for _, s := range in.MCP {
		if s.Name == "" || s.Command == "" {
			return nil, errors.New("goose: an MCP server without a name or command")
		}
		if _, dup := exts[s.Name]; dup {
			return nil, errors.New("goose: MCP server " + s.Name + " has the name of a built-in extension")
		}
		exts[s.Name] = map[string]any{
			"type":        "stdio",
			"name":        s.Name,
			"description": "MCP server " + s.Name + " through airlock",
			"cmd":         s.Command,
			"args":        append([]string{}, s.Args...),
			"envs":        map[string]string{},
			"env_keys":    []string{},
			"timeout":     secs,
			"enabled":     true,
			"bundled":     false,
		}
	}
	cfg := map[string]any{
		"GOOSE_MODE":              "auto",
		"GOOSE_TELEMETRY_ENABLED": false,
		"extensions":              exts,
	}
	for _, p := range gooseProviders {
		if _, ok := in.Keys[p.key]; ok {
			cfg["GOOSE_PROVIDER"] = p.provider
			cfg["GOOSE_MODEL"] = p.model
			break
		}
	}
	return yaml.Marshal(cfg)
}

// gooseFindSession returns the name airlock gave this run's session when
// goose wrote to its session store during the run; for a goose before
// 1.10, the newest .jsonl session file written since.
func gooseFindSession(home string, since time.Time) (string, error) {
	entries, err := readHomeDir(home, filepath.ToSlash(gooseDataDir))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var written bool
	var legacy string
	var legacyTime time.Time
	for i, e := range entries {
		if i >= geminiMaxSessionFiles {
			break
		}
		if !e.Mode.IsRegular() || e.ModTime.Before(since) {
			continue
		}
		written = true
		if id, ok := strings.CutSuffix(e.Name, ".jsonl"); ok && gooseIDOK(id) && e.ModTime.After(legacyTime) {
			legacy, legacyTime = id, e.ModTime
		}
	}
	if !written {
		return "", nil
	}
	if name := gooseReadMarker(home); name != "" {
		return name, nil
	}
	return legacy, nil
}

// gooseReadMarker reads the session name airlock wrote, if it is still a
// small regular file holding a valid name (the sandbox can write there).
func gooseReadMarker(home string) string {
	b, err := readHomeFile(home, filepath.ToSlash(gooseMarker), 256)
	if err != nil {
		return ""
	}
	name := strings.TrimSpace(string(b))
	if !gooseIDOK(name) {
		return ""
	}
	return name
}

// gooseIDOK accepts names and ids that are safe as an argument.
func gooseIDOK(id string) bool {
	if id == "" || len(id) > 128 || id[0] == '-' {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
