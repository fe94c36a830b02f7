package agents

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Claude Code 2.1.330, as found by running it against a fake API inside a
// sandbox:
//
//   - With CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 it contacts only
//     api.anthropic.com: GET /api/claude_code/settings and
//     /api/claude_code/policy_limits (both carry the key), then POST
//     /v1/messages?beta=true (SSE). Without it, it adds /api/hello,
//     /api/eval/..., /api/claude_cli/bootstrap, /api/event_logging/v2/batch,
//     /api/claude_code/organizations/metrics_enabled and more, still all on
//     api.anthropic.com.
//   - As uid 0, --dangerously-skip-permissions is refused unless IS_SANDBOX=1.
//   - Interactively, a fresh home stops at the theme/onboarding screens and
//     an /api/hello check (hasCompletedOnboarding), then at "Detected a
//     custom API key ... use this API key?" (customApiKeyResponses.approved
//     holds the key's last 20 characters), then at the bypass-permissions
//     warning (skipDangerousModePermissionPrompt in ~/.claude/settings.json;
//     the older bypassPermissionsModeAccepted in ~/.claude.json is migrated
//     there). -p skips the trust dialog; interactive runs need the project's
//     hasTrustDialogAccepted.
//   - A key starting sk-ant-api03- is treated as a Console API key (other
//     shapes count as "non_sk_ant"); OAuth tokens start sk-ant-oat01-.
//   - NODE_EXTRA_CA_CERTS (set in every sandbox) is enough for its API calls.
//   - MCP servers given by --mcp-config take a per-server "timeout" (ms, the
//     tool-call limit, overriding MCP_TOOL_TIMEOUT); --strict-mcp-config
//     ignores every other source, the workspace's .mcp.json included.
//   - MCP timeouts (read from the bundle, then tried): a call may take
//     1e8 ms (~28 h) unless MCP_TOOL_TIMEOUT or the server's "timeout"
//     says otherwise, so an escalated call approved after 90 s came
//     through with nothing set; a stdio call silent for 30 min
//     (CLAUDE_CODE_MCP_TOOL_IDLE_TIMEOUT) is dropped; connecting may take
//     MCP_TIMEOUT (30 s by default; over 60 s is not honoured, #16837).
//   - Sessions are stored as ~/.claude/projects/<cwd with / as ->/<uuid>.jsonl;
//     --resume <uuid> appends to the same file.

// claudeHost is the one host Claude Code needs.
const claudeHost = "api.anthropic.com"

// Claude Code's own MCP limits (see above). A run raises them to its tool
// timeout when that is longer, never lowers them.
const (
	claudeToolTimeout = 100_000_000 * time.Millisecond
	claudeIdleTimeout = 30 * time.Minute
	// claudeConnectTimeout is given to MCP_TIMEOUT: a server airlock starts
	// in its own sandbox (npx may download it) can take longer than 30 s.
	claudeConnectTimeout = 60 * time.Second
)

func init() { register(claudeProfile()) }

func claudeProfile() *Profile {
	hosts := []string{claudeHost}
	p := &Profile{
		Name:    "claude",
		Display: "Claude Code",
		Package: "@anthropic-ai/claude-code",
		Version: "2.1.330",
		Binary:  "claude",
		Hosts:   hosts,
		// What it calls with nonessential traffic off, plus what a
		// subscription login uses (/api/oauth/...) and WebFetch's domain
		// check; telemetry and experiment endpoints stay closed even if
		// the variable is dropped.
		Endpoints: []string{
			claudeHost + " POST /v1/messages",
			claudeHost + " POST /v1/messages/count_tokens",
			claudeHost + " GET /api/claude_code/settings",
			claudeHost + " GET /api/claude_code/policy_limits",
			claudeHost + " * /api/hello",
			claudeHost + " * /api/oauth/*",
			claudeHost + " GET /api/web/domain_info",
		},
		Keys: []Key{
			{Env: "ANTHROPIC_API_KEY", Hosts: hosts, Prefix: "sk-ant-api03-"},
			{Env: "ANTHROPIC_AUTH_TOKEN", Hosts: hosts},
			{Env: "CLAUDE_CODE_OAUTH_TOKEN", Hosts: hosts, Prefix: "sk-ant-oat01-"},
		},
		Logins: []Login{{Path: ".claude/.credentials.json", Hosts: hosts}},
		Env: []string{
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
			"DISABLE_AUTOUPDATER=1",
			"DISABLE_TELEMETRY=1",
			"DISABLE_ERROR_REPORTING=1",
		},
		RootEnv: []string{"IS_SANDBOX=1"},
		// Its settings (hooks, env, permissions), instructions, commands,
		// agents and skills; .mcp.json is not here: --strict-mcp-config
		// ignores it.
		RepoSettings: []string{
			".claude/settings.json", ".claude/settings.local.json",
			"CLAUDE.md", "CLAUDE.local.md",
			".claude/commands", ".claude/agents", ".claude/skills",
		},
		FindSession: claudeFindSession,
	}
	p.Launch = func(in Inputs) (Launch, error) { return claudeLaunch(p, in) }
	return p
}

// claudeMCPServer is one entry of --mcp-config's mcpServers.
type claudeMCPServer struct {
	Type    string   `json:"type"`
	Command string   `json:"command"`
	Args    []string `json:"args"`
	// Timeout is the tool-call limit in ms for this server.
	Timeout int64 `json:"timeout,omitempty"`
	// AlwaysLoad keeps the server's tools in the prompt rather than
	// behind tool search, so the model sees them from the first turn.
	AlwaysLoad bool `json:"alwaysLoad"`
}

func claudeLaunch(p *Profile, in Inputs) (Launch, error) {
	if in.Workspace == "" {
		return Launch{}, fmt.Errorf("claude: no workspace")
	}
	var callTimeout int64 // ms; 0: Claude's own
	if in.ToolTimeout > claudeToolTimeout {
		callTimeout = in.ToolTimeout.Milliseconds()
	}

	servers := map[string]claudeMCPServer{}
	for _, s := range in.MCP {
		if _, dup := servers[s.Name]; dup {
			return Launch{}, fmt.Errorf("claude: MCP server %q named twice", s.Name)
		}
		servers[s.Name] = claudeMCPServer{Type: "stdio", Command: s.Command, Args: s.Args, Timeout: callTimeout, AlwaysLoad: true}
	}
	mcp, err := json.Marshal(map[string]any{"mcpServers": servers})
	if err != nil {
		return Launch{}, fmt.Errorf("claude: MCP config: %w", err)
	}

	argv := []string{p.Binary, "--dangerously-skip-permissions"}
	if in.Orientation != "" {
		argv = append(argv, "--append-system-prompt", in.Orientation)
	}
	// --mcp-config takes several values: --strict-mcp-config right after
	// it ends the list. Strict always, so a .mcp.json in the workspace
	// (which the sandbox can write) never starts a server.
	argv = append(argv, "--mcp-config", string(mcp), "--strict-mcp-config")
	if in.Resume != "" {
		argv = append(argv, "--resume", in.Resume)
	}
	argv = append(argv, in.Args...)

	// Env and RootEnv are the profile's; the run adds only what depends on
	// its inputs.
	var env []string
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	if len(in.MCP) > 0 {
		env = append(env, "MCP_TIMEOUT="+ms(claudeConnectTimeout))
		if callTimeout > 0 {
			env = append(env, "MCP_TOOL_TIMEOUT="+strconv.FormatInt(callTimeout, 10))
		}
		if in.ToolTimeout > claudeIdleTimeout {
			// The proxy's progress notifications may not count as activity.
			env = append(env, "CLAUDE_CODE_MCP_TOOL_IDLE_TIMEOUT="+ms(in.ToolTimeout))
		}
	}

	files, err := claudeFiles(in, p.Version)
	if err != nil {
		return Launch{}, err
	}
	return Launch{Argv: argv, Env: env, Files: files}, nil
}

// claudeFiles are ~/.claude.json and ~/.claude/settings.json with every
// first-run question answered. They are rewritten on each run, which also
// undoes anything the agent put there last time (hooks, MCP servers).
func claudeFiles(in Inputs, version string) (map[string][]byte, error) {
	approved := []string{}
	if ph := strings.TrimSpace(in.Keys["ANTHROPIC_API_KEY"]); ph != "" {
		// The placeholder, which is all the sandbox sees; Claude Code
		// keeps the last 20 characters of keys it was told to use.
		approved = append(approved, ph[max(0, len(ph)-20):])
	}
	state := map[string]any{
		"hasCompletedOnboarding": true,
		"lastOnboardingVersion":  version,
		"customApiKeyResponses":  map[string]any{"approved": approved, "rejected": []string{}},
		"projects": map[string]any{
			in.Workspace: map[string]any{
				"hasTrustDialogAccepted":        true,
				"hasCompletedProjectOnboarding": true,
				"allowedTools":                  []string{},
			},
		},
	}
	settings := map[string]any{"skipDangerousModePermissionPrompt": true}
	files := map[string][]byte{}
	for name, v := range map[string]any{".claude.json": state, ".claude/settings.json": settings} {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("claude: %s: %w", name, err)
		}
		files[name] = append(b, '\n')
	}
	return files, nil
}

// claudeSessionName is a session file's name: the session's UUID.
var claudeSessionName = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.jsonl$`)
})

// claudeFindSession returns the session written last at or after since
// in home/.claude/projects/*/<uuid>.jsonl (a resumed session keeps its
// id and file, so it counts too).
func claudeFindSession(home string, since time.Time) (string, error) {
	root := homeRel(".claude", "projects")
	projects, err := readHomeDir(home, root)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("claude: sessions: %w", err)
	}
	var best string
	var bestTime time.Time
	seen := 0
	for _, p := range projects {
		if !p.Mode.IsDir() {
			continue
		}
		if seen > maxHomeEntries {
			break // a home stuffed with entries: look no further
		}
		entries, err := readHomeDir(home, homeRel(root, p.Name))
		seen += len(entries)
		if err != nil {
			return "", fmt.Errorf("claude: sessions: %w", err)
		}
		for _, e := range entries {
			if !e.Mode.IsRegular() || !claudeSessionName().MatchString(e.Name) {
				continue
			}
			t := e.ModTime
			if t.Before(since) || (best != "" && !t.After(bestTime)) {
				continue
			}
			best, bestTime = strings.TrimSuffix(e.Name, ".jsonl"), t
		}
	}
	return best, nil
}
