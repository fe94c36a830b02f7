package agents

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Codex CLI 0.169 (@openai/codex; the native binary is in the
// platform package @openai/codex-linux-x64 beside it, so the whole
// node_modules tree must be visible inside).
//
// What it does and how it is tamed (checked against 0.169.0 in a sandbox):
//   - It authenticates with CODEX_API_KEY only: with just OPENAI_API_KEY
//     set it sends no Authorization at all. OPENAI_BASE_URL is not read;
//     the built-in provider is kept and the gateway maps its host.
//   - It tries Responses over a WebSocket (GET /v1/responses, Upgrade)
//     before each turn, then falls back to SSE. Both paths load the CA from
//     CODEX_CA_CERTIFICATE (the WebSocket one ignores SSL_CERT_FILE).
//   - Left alone it also calls chatgpt.com/backend-api/codex/models with
//     the API key (features.api_key_model_discovery), syncs a plugin
//     marketplace from github.com, api.github.com and chatgpt.com
//     (features.plugins, remote_plugin), lists ChatGPT apps (features.apps)
//     and sends metrics to ab.chatgpt.com (analytics.enabled); each retry
//     against a refused host costs seconds. All are turned off in its
//     config, after which it reaches api.openai.com only.
//   - Its own sandbox (Landlock/seccomp) cannot run inside ours:
//     sandbox_mode "danger-full-access" and approval_policy "never".
//   - The interactive CLI (no exec) starts a background app-server that
//     fails inside (features.daemon_auto_start off), and reads no key from
//     its environment: its API-key login file ($CODEX_HOME/auth.json)
//     gets the placeholder. It then starts at the prompt, with no trust
//     or login screen.
//
// Settings go in $CODEX_HOME/config.toml of the agent's private home
// (rewritten every run), not on the command line: interactive `codex`
// gets them too, and the user's own -c flags still override them. The
// workspace is not marked trusted, so a .codex/config.toml in the
// repository is not loaded (checked: its model = ... is ignored, git repo
// or not); `exec` gets --skip-git-repo-check instead. The repository's
// AGENTS.md does apply.
func init() {
	register(&Profile{
		Name:    "codex",
		Display: "Codex CLI",
		Package: "@openai/codex",
		Version: "0.169.0",
		Binary:  "codex",
		Hosts:   []string{"api.openai.com"},
		// The Responses API over SSE and over a WebSocket (GET upgrade), its
		// remote compaction (/v1/responses/compact) and the model list.
		Endpoints: []string{
			"api.openai.com POST /v1/responses",
			"api.openai.com GET /v1/responses",
			"api.openai.com POST /v1/responses/*",
			"api.openai.com GET /v1/models",
		},
		Keys: []Key{{
			Env:    "CODEX_API_KEY",
			From:   []string{"CODEX_API_KEY", "OPENAI_API_KEY"},
			Hosts:  []string{"api.openai.com"},
			Prefix: "sk-",
		}},
		Logins: []Login{{
			Path: ".codex/auth.json",
			// A ChatGPT login talks to chatgpt.com/backend-api/codex.
			Hosts: []string{"chatgpt.com", "api.openai.com"},
		}},
		CAEnv:        []string{"CODEX_CA_CERTIFICATE"},
		RepoSettings: []string{"AGENTS.md", "AGENTS.override.md"},
		Launch:       codexLaunch,
		FindSession:  codexFindSession,
	})
}

// codexHome is where CODEX_HOME points, relative to the agent's home.
const codexHome = ".codex"

// codexMCPName is what Codex accepts as an MCP server's name.
var codexMCPName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_-]+$`) })

func codexLaunch(in Inputs) (Launch, error) {
	cfg, err := codexConfig(in)
	if err != nil {
		return Launch{}, err
	}
	files := map[string][]byte{codexHome + "/config.toml": cfg}
	if ph := in.Keys["CODEX_API_KEY"]; ph != "" {
		// The interactive CLI reads no key from its environment (only
		// exec does): it would ask to log in. Its API-key login file holds
		// the same placeholder.
		auth, err := json.Marshal(map[string]string{"auth_mode": "apikey", "OPENAI_API_KEY": ph})
		if err != nil {
			return Launch{}, err
		}
		files[codexHome+"/auth.json"] = auth
	}
	return Launch{
		Argv:  codexArgv(in.Args, in.Resume),
		Env:   []string{"CODEX_HOME=" + filepath.Join(in.Home, codexHome)}, // CODEX_CA_CERTIFICATE is in CAEnv
		Files: files,
	}, nil
}

// codexConfig is the config.toml of one run.
func codexConfig(in Inputs) ([]byte, error) {
	var b strings.Builder
	b.WriteString("# Written by airlock for every run; edits are lost. Add -c KEY=VALUE after -- instead.\n")
	b.WriteString(`sandbox_mode = "danger-full-access"` + "\n")
	b.WriteString(`approval_policy = "never"` + "\n")
	b.WriteString("check_for_update_on_startup = false\n")
	if in.Orientation != "" {
		fmt.Fprintf(&b, "developer_instructions = %s\n", tomlString(in.Orientation))
	}
	b.WriteString("\n[analytics]\nenabled = false\n")
	b.WriteString("\n[feedback]\nenabled = false\n")
	// daemon_auto_start: the interactive CLI's background app-server fails
	// inside ("Cross-device link (os error 18)") and the CLI exits.
	b.WriteString("\n[features]\napi_key_model_discovery = false\nplugins = false\nremote_plugin = false\napps = false\ndaemon_auto_start = false\n")
	// Seconds, rounded up, plus a margin over the approval timeout.
	timeout := int64((in.ToolTimeout + time.Second - 1) / time.Second)
	if timeout <= 0 {
		timeout = 300
	}
	timeout += 60
	for _, m := range in.MCP {
		if !codexMCPName().MatchString(m.Name) {
			return nil, fmt.Errorf("codex: MCP server name %q: Codex accepts letters, digits, _ and - only", m.Name)
		}
		fmt.Fprintf(&b, "\n[mcp_servers.%s]\ncommand = %s\nargs = [", m.Name, tomlString(m.Command))
		for i, a := range m.Args {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(tomlString(a))
		}
		fmt.Fprintf(&b, "]\nstartup_timeout_sec = %d\ntool_timeout_sec = %d\n", 60, timeout)
	}
	return []byte(b.String()), nil
}

// tomlString quotes s as a TOML basic string (JSON's escapes are TOML's).
func tomlString(s string) string {
	var b strings.Builder
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	e.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

// codexExecValueFlags are `codex exec` options that take a value in the
// next argument (0.169).
var codexExecValueFlags = map[string]bool{
	"-c": true, "--config": true, "--enable": true, "--disable": true,
	"-i": true, "--image": true, "-m": true, "--model": true,
	"--local-provider": true, "-p": true, "--profile": true,
	"-s": true, "--sandbox": true, "-C": true, "--cd": true,
	"--add-dir": true, "--thread-source": true, "--cyber-access-program": true,
	"--output-schema": true, "--color": true, "-o": true, "--output-last-message": true,
}

// codexSubcommands are the top-level commands a user's arguments may
// start with (anything else is the interactive CLI's options or prompt).
var codexSubcommands = map[string]bool{
	"exec": true, "e": true, "review": true, "login": true, "logout": true,
	"mcp": true, "plugin": true, "app-server": true, "remote-control": true,
	"completion": true, "update": true, "doctor": true, "sandbox": true,
	"debug": true, "apply": true, "a": true, "resume": true, "queue": true,
	"archive": true, "delete": true, "migrate-rollouts": true, "migrate-nfs-db": true,
	"unarchive": true, "fork": true, "cloud": true, "exec-server": true,
	"features": true, "help": true, "agents": true,
}

// codexArgv places the user's arguments and a resume:
//
//	exec [FLAGS] PROMPT       → codex exec --skip-git-repo-check [FLAGS] resume ID PROMPT
//	[FLAGS] [PROMPT] (the TUI) → codex resume ID [FLAGS] [PROMPT]
//
// Arguments that already name a subcommand other than exec (or exec's own
// resume, fork, review) are left as they are.
func codexArgv(args []string, resume string) []string {
	argv := []string{"codex"}
	if len(args) > 0 && (args[0] == "exec" || args[0] == "e") {
		argv = append(argv, args[0], "--skip-git-repo-check")
		rest := args[1:]
		i := 0
		for i < len(rest) {
			a := rest[i]
			if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
				break
			}
			if codexExecValueFlags[a] {
				i++
			}
			i++
		}
		if resume == "" || i < len(rest) && (rest[i] == "resume" || rest[i] == "fork" || rest[i] == "review" || rest[i] == "help") {
			return append(argv, rest...)
		}
		argv = append(argv, rest[:min(i, len(rest))]...)
		argv = append(argv, "resume", resume)
		return append(argv, rest[min(i, len(rest)):]...)
	}
	if resume != "" && (len(args) == 0 || !codexSubcommands[args[0]]) {
		argv = append(argv, "resume", resume)
	}
	return append(argv, args...)
}

// codexFindSession finds the newest rollout Codex wrote under
// CODEX_HOME/sessions (YYYY/MM/DD/rollout-TIME-ID.jsonl) since t and
// returns its id (from its session_meta line, else from its name). The
// walk goes at most codexMaxDepth directories down, through no link.
func codexFindSession(home string, since time.Time) (string, error) {
	var newest string
	var newestT time.Time
	budget := 4 * maxHomeEntries // entries looked at in all: a home stuffed with them ends the walk
	var walk func(rel string, depth int) error
	walk = func(rel string, depth int) error {
		if budget <= 0 {
			return nil
		}
		entries, err := readHomeDir(home, rel)
		budget -= len(entries)
		if err != nil {
			if depth == 0 && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		for _, e := range entries {
			p := homeRel(rel, e.Name)
			if e.Mode.IsDir() {
				if depth < codexMaxDepth {
					if err := walk(p, depth+1); err != nil && !errors.Is(err, fs.ErrNotExist) {
						return err
					}
				}
				continue
			}
			if !e.Mode.IsRegular() || !strings.HasPrefix(e.Name, "rollout-") || !strings.HasSuffix(e.Name, ".jsonl") {
				continue
			}
			if mt := e.ModTime; !mt.Before(since) && mt.After(newestT) {
				newest, newestT = p, mt
			}
		}
		return nil
	}
	if err := walk(homeRel(codexHome, "sessions"), 0); err != nil || newest == "" {
		return "", err
	}
	if id := codexRolloutID(home, newest); id != "" {
		return id, nil
	}
	// rollout-2026-11-23T20-21-30-<uuid>.jsonl
	name := strings.TrimSuffix(path.Base(newest), ".jsonl")
	if len(name) >= 36 {
		return name[len(name)-36:], nil
	}
	return "", nil
}

// codexMaxDepth is how deep below sessions/ rollouts are looked for
// (YYYY/MM/DD, with room to spare).
const codexMaxDepth = 5

// codexRolloutID reads the session id from a rollout's first line (rel,
// beneath home).
func codexRolloutID(home, rel string) string {
	f, err := openHomeFile(home, rel)
	if err != nil {
		return ""
	}
	defer f.Close()
	r := bufio.NewReaderSize(io.LimitReader(f, 4<<20+64<<10), 64<<10)
	line, err := r.ReadSlice('\n')
	if err != nil && len(line) == 0 {
		return ""
	}
	var meta struct {
		Type    string `json:"type"`
		Payload struct {
			ID string `json:"id"`
		} `json:"payload"`
	}
	// The first line holds the base instructions too: a long line is
	// read whole, up to a bound.
	if err == bufio.ErrBufferFull {
		rest, _ := readBounded(r, 4<<20)
		line = append(append([]byte(nil), line...), rest...)
	}
	if json.Unmarshal(line, &meta) != nil || meta.Type != "session_meta" {
		return ""
	}
	return meta.Payload.ID
}

// readBounded reads up to the next newline or n bytes.
func readBounded(r *bufio.Reader, n int) ([]byte, error) {
	var out []byte
	for len(out) < n {
		chunk, err := r.ReadSlice('\n')
		out = append(out, chunk...)
		if err != bufio.ErrBufferFull {
			return out, err
		}
	}
	return out, nil
}
