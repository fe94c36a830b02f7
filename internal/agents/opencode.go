package agents

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
)

// OpenCode 1.18 (opencode-ai; a Bun binary in the platform package
// opencode-linux-x64 beside it). It reaches a provider through the AI SDK:
// the openai provider speaks the Responses API (POST /v1/responses, SSE),
// anthropic the Messages API, google streamGenerateContent.
//
// Checked against 1.18.33 in a sandbox:
//   - Keys come from the providers' usual variables; it does not check
//     their shape.
//   - It trusts NODE_EXTRA_CA_CERTS (every sandbox sets it).
//   - Left alone it fetches models.dev (OPENCODE_DISABLE_MODELS_FETCH),
//     checks for updates (OPENCODE_DISABLE_AUTOUPDATE) and installs its
//     default and configured plugins from registry.npmjs.org
//     (OPENCODE_DISABLE_DEFAULT_PLUGINS, OPENCODE_PURE). With those set
//     it reaches the provider's host, and looks registry.npmjs.org up
//     once in the background (it installs @opencode-ai/plugin into its
//     config dir at every start, with no switch to stop it); the refusal
//     is immediate and harmless.
//   - A project's opencode.json / .opencode can add MCP servers, providers
//     and permissions. They apply inside (RepoSettings names them): the
//     switch that ignores them, OPENCODE_DISABLE_PROJECT_CONFIG, also
//     ignores the repository's AGENTS.md, and nothing they add can widen
//     what the sandbox allows.
//   - Sessions live in a SQLite database (~/.local/share/opencode/
//     opencode.db); FindSession reads the session ids from its log
//     (~/.local/share/opencode/log), which names each session it creates
//     or runs, instead of linking a SQLite reader.
func init() {
	register(&Profile{
		Name:    "opencode",
		Display: "OpenCode",
		Package: "opencode-ai",
		Version: "1.18.33",
		Binary:  "opencode",
		Hosts:   []string{"api.openai.com", "api.anthropic.com", "generativelanguage.googleapis.com"},
		// What the AI SDK's providers call: OpenAI's Responses (and Chat
		// Completions for compatible models), Anthropic's Messages, Gemini's
		// generateContent.
		Endpoints: []string{
			"api.openai.com POST /v1/responses",
			"api.openai.com POST /v1/chat/completions",
			"api.anthropic.com POST /v1/messages",
			"generativelanguage.googleapis.com POST /v1beta/models/*",
		},
		Keys: []Key{
			{Env: "OPENAI_API_KEY", Hosts: []string{"api.openai.com"}, Prefix: "sk-"},
			{Env: "ANTHROPIC_API_KEY", Hosts: []string{"api.anthropic.com"}, Prefix: "sk-ant-api03-"},
			{Env: "GOOGLE_GENERATIVE_AI_API_KEY", From: []string{"GOOGLE_GENERATIVE_AI_API_KEY", "GEMINI_API_KEY"}, Hosts: []string{"generativelanguage.googleapis.com"}},
		},
		Env: []string{
			"OPENCODE_DISABLE_MODELS_FETCH=1",
			"OPENCODE_DISABLE_AUTOUPDATE=1",
			"OPENCODE_DISABLE_DEFAULT_PLUGINS=1",
			"OPENCODE_PURE=1", // no external plugins (installed from registry.npmjs.org)
			"OPENCODE_DISABLE_LSP_DOWNLOAD=1",
			"OPENCODE_DISABLE_SHARE=1",
		},
		RepoSettings: []string{"opencode.json", "opencode.jsonc", ".opencode", "AGENTS.md", "CLAUDE.md"},
		Launch:       opencodeLaunch,
		FindSession:  opencodeFindSession,
	})
}

// opencodeOrientation is the orientation file, relative to the home.
const opencodeOrientation = ".config/opencode/airlock-orientation.md"

func opencodeLaunch(in Inputs) (Launch, error) {
	timeout := in.ToolTimeout + time.Minute
	if in.ToolTimeout <= 0 {
		timeout = 6 * time.Minute
	}
	ms := timeout.Milliseconds()
	cfg := map[string]any{
		"$schema":    "https://opencode.ai/config.json",
		"autoupdate": false,
		"share":      "disabled",
		// The sandbox is the boundary; `opencode run` cannot ask.
		"permission":   "allow",
		"experimental": map[string]any{"mcp_timeout": ms},
	}
	files := map[string][]byte{}
	if in.Orientation != "" {
		files[opencodeOrientation] = []byte(in.Orientation + "\n")
		cfg["instructions"] = []string{filepath.Join(in.Home, opencodeOrientation)}
	}
	if len(in.MCP) > 0 {
		mcp := map[string]any{}
		for _, m := range in.MCP {
			mcp[m.Name] = map[string]any{
				"type":    "local",
				"command": append([]string{m.Command}, m.Args...),
				"enabled": true,
				"timeout": ms,
			}
		}
		cfg["mcp"] = mcp
	}
	content, err := json.Marshal(cfg)
	if err != nil {
		return Launch{}, err
	}
	return Launch{
		Argv:  opencodeArgv(in.Args, in.Resume),
		Env:   []string{"OPENCODE_CONFIG_CONTENT=" + string(content)},
		Files: files,
	}, nil
}

// opencodeArgv adds -s ID to `run` (or to the TUI) for a resume. Other
// subcommands (serve, session, mcp...) are left as they are.
func opencodeArgv(args []string, resume string) []string {
	argv := append([]string{"opencode"}, args...)
	if resume == "" {
		return argv
	}
	for _, a := range args {
		if a == "-s" || a == "--session" || strings.HasPrefix(a, "--session=") {
			return argv // the user chose one
		}
	}
	if len(args) > 0 && args[0] == "run" {
		return append([]string{"opencode", "run", "-s", resume}, args[1:]...)
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return append([]string{"opencode", "-s", resume}, args...)
	}
	// A project directory for the TUI, or a subcommand.
	if _, err := os.Stat(args[0]); err == nil || strings.Contains(args[0], "/") {
		return append([]string{"opencode", "-s", resume}, args...)
	}
	return argv
}

// opencodeLogLine matches the log lines naming a session: its creation
// (with parentID: undefined for a top-level session) and each loop.
var (
	opencodeTime    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^timestamp=(\S+)`) })
	opencodeCreated = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`message=created id=(ses_[A-Za-z0-9]+) .*?parentID=(\S+)`)
	})
	opencodeLoop = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`message=loop session\.id=(ses_[A-Za-z0-9]+)`) })
)

// opencodeLogTail is how much of each log file is read (its end).
const opencodeLogTail = 8 << 20

// opencodeFindSession returns the top-level session OpenCode last created
// or ran since t, from its logs.
func opencodeFindSession(home string, since time.Time) (string, error) {
	dir := homeRel(".local", "share", "opencode", "log")
	ents, err := readHomeDir(home, dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		return "", err
	}
	type logf struct {
		path string
		mod  time.Time
	}
	var logs []logf
	for _, e := range ents {
		if !e.Mode.IsRegular() || !strings.HasSuffix(e.Name, ".log") || e.ModTime.Before(since) {
			continue
		}
		logs = append(logs, logf{homeRel(dir, e.Name), e.ModTime})
	}
	sort.Slice(logs, func(i, j int) bool { return logs[i].mod.Before(logs[j].mod) })
	children := map[string]bool{}
	var last string
	var lastT time.Time
	for _, l := range logs {
		f, err := openHomeFile(home, l.path)
		if err != nil {
			continue
		}
		if fi, err := f.Stat(); err == nil && fi.Size() > opencodeLogTail {
			f.Seek(fi.Size()-opencodeLogTail, io.SeekStart)
		}
		sc := bufio.NewScanner(io.LimitReader(f, opencodeLogTail)) // another run may still append
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			if !bytes.Contains(line, []byte("ses_")) {
				continue
			}
			tm := opencodeTime().FindSubmatch(line)
			if tm == nil {
				continue
			}
			t, err := time.Parse(time.RFC3339Nano, string(tm[1]))
			if err != nil || t.Before(since) {
				continue
			}
			var id string
			if m := opencodeCreated().FindSubmatch(line); m != nil {
				id = string(m[1])
				if string(m[2]) != "undefined" {
					children[id] = true
				}
			} else if m := opencodeLoop().FindSubmatch(line); m != nil {
				id = string(m[1])
			}
			if id != "" && !children[id] && !t.Before(lastT) {
				last, lastT = id, t
			}
		}
		f.Close()
	}
	return last, nil
}
