package agents

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Gemini CLI 0.61.0, checked live against internal/fakellm:
//   - with an API key it talks to generativelanguage.googleapis.com only:
//     POST /v1beta/models/{model}:streamGenerateContent?alt=sse for turns
//     and :generateContent for its model router (JSON answers); with
//     usage statistics on (the default) it also posts to
//     play.googleapis.com/log, which privacy.usageStatisticsEnabled=false
//     stops. A Google login talks to cloudcode-pa.googleapis.com instead.
//   - the global ~/.gemini/GEMINI.md is read into its system prompt, so the
//     orientation goes there, in the private home.
//   - sessions are ~/.gemini/tmp/<project>/chats/session-*.jsonl, the first
//     line naming the sessionId; --resume takes that id (or "latest", or an
//     index) and only finds sessions of the same project directory.
//   - it repeats each functionResponse when it resumes a session.
var gemini = &Profile{
	Name:    "gemini",
	Display: "Gemini CLI",
	Package: "@google/gemini-cli",
	Version: "0.61.0",
	Binary:  "gemini",
	Hosts:   []string{geminiHost},
	Endpoints: []string{
		geminiHost + " POST /v1beta/models/*",
		geminiHost + " GET /v1beta/models/*",
		geminiHost + " GET /v1beta/models",
	},
	Keys: []Key{
		// AI Studio keys live in GEMINI_API_KEY or, for Google's SDKs,
		// GOOGLE_API_KEY; the CLI reads the first.
		{Env: "GEMINI_API_KEY", From: []string{"GEMINI_API_KEY", "GOOGLE_API_KEY"}, Hosts: []string{geminiHost}},
	},
	Logins: []Login{
		// At start the CLI checks the token at oauth2.googleapis.com/tokeninfo
		// (a failure there sends it to a browser login), then works against
		// cloudcode-pa.
		{Path: ".gemini/oauth_creds.json", Hosts: []string{"cloudcode-pa.googleapis.com", "oauth2.googleapis.com"}},
	},
	Env: []string{
		"GEMINI_CLI_TRUST_WORKSPACE=true", // else headless runs exit 55 in an untrusted folder
		"GEMINI_TELEMETRY_ENABLED=false",
	},
	RepoSettings: []string{
		".gemini/settings.json", ".gemini/.env", "GEMINI.md", ".gemini/system.md",
		".gemini/commands", ".gemini/skills", ".gemini/agents", ".gemini/hooks", ".gemini/policies", ".gemini/extensions",
	},
	Launch:      geminiLaunch,
	FindSession: geminiFindSession,
}

const geminiHost = "generativelanguage.googleapis.com"

func init() { register(gemini) }

// geminiLaunch runs `gemini --approval-mode yolo [--resume ID] ARGS...`
// with settings and orientation in the private ~/.gemini.
func geminiLaunch(in Inputs) (Launch, error) {
	settings, err := geminiSettings(in)
	if err != nil {
		return Launch{}, err
	}
	argv := []string{"gemini", "--approval-mode", "yolo"}
	if in.Resume != "" {
		argv = append(argv, "--resume", in.Resume)
	}
	argv = append(argv, in.Args...)
	files := map[string][]byte{".gemini/settings.json": settings}
	if in.Orientation != "" {
		files[".gemini/GEMINI.md"] = []byte("# airlock\n\n" + in.Orientation + "\n")
	}
	return Launch{Argv: argv, Files: files}, nil
}

// geminiSettings is ~/.gemini/settings.json: the auth type chosen (an API
// key when one was found, else the Google login) so nothing prompts;
// usage statistics, telemetry, auto-update and the repository's .env off; each MCP server as a
// stdio command, trusted (airlock polices its calls), with a timeout above
// the approval timeout.
func geminiSettings(in Inputs) ([]byte, error) {
	auth := "oauth-personal"
	if _, ok := in.Keys["GEMINI_API_KEY"]; ok {
		auth = "gemini-api-key"
	}
	timeout := in.ToolTimeout
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	servers := map[string]any{}
	for _, s := range in.MCP {
		if s.Name == "" || s.Command == "" {
			return nil, errors.New("gemini: an MCP server without a name or command")
		}
		servers[s.Name] = map[string]any{
			"command": s.Command,
			"args":    slices.Clone(s.Args),
			"timeout": timeout.Milliseconds() + 1000,
			"trust":   true,
		}
	}
	settings := map[string]any{
		"general": map[string]any{
			"enableAutoUpdate":             false,
			"enableAutoUpdateNotification": false,
		},
		// A repository's generic .env is not the agent's business (its
		// .gemini/.env still applies, and is named when present).
		"advanced":  map[string]any{"ignoreLocalEnv": true},
		"privacy":   map[string]any{"usageStatisticsEnabled": false},
		"telemetry": map[string]any{"enabled": false},
		"security":  map[string]any{"auth": map[string]any{"selectedType": auth}},
	}
	if len(servers) > 0 {
		settings["mcpServers"] = servers
	}
	return json.MarshalIndent(settings, "", "  ")
}

// Bounds on reading a session store the sandbox could write.
const (
	geminiMaxSessionFiles = 10000
	geminiMaxHeader       = 64 << 10
)

// geminiFindSession returns the sessionId of the session file under
// home/.gemini/tmp/*/chats changed last, at or after since.
func geminiFindSession(home string, since time.Time) (string, error) {
	tmp := homeRel(".gemini", "tmp")
	projects, err := readHomeDir(home, tmp)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var best string
	var bestTime time.Time
	seen := 0
	for _, p := range projects {
		if !p.Mode.IsDir() {
			continue
		}
		chats := homeRel(tmp, p.Name, "chats")
		entries, err := readHomeDir(home, chats)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if seen++; seen > geminiMaxSessionFiles {
				return best, nil
			}
			n := e.Name
			if !e.Mode.IsRegular() || !strings.HasPrefix(n, "session-") || !strings.HasSuffix(n, ".jsonl") {
				continue
			}
			if e.ModTime.Before(since) || !e.ModTime.After(bestTime) {
				continue
			}
			id, ok := geminiSessionID(home, homeRel(chats, n))
			if ok {
				best, bestTime = id, e.ModTime
			}
		}
	}
	return best, nil
}

// geminiSessionID reads the id from a session file's first line (rel,
// beneath home), for a main session (not a subagent's).
func geminiSessionID(home, rel string) (string, bool) {
	f, err := openHomeFile(home, rel)
	if err != nil {
		return "", false
	}
	defer f.Close()
	line, err := bufio.NewReaderSize(io.LimitReader(f, geminiMaxHeader), geminiMaxHeader).ReadSlice('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", false
	}
	var h struct {
		SessionID string `json:"sessionId"`
		Kind      string `json:"kind"`
	}
	if json.Unmarshal(line, &h) != nil || (h.Kind != "" && h.Kind != "main") || !geminiIDOK(h.SessionID) {
		return "", false
	}
	return h.SessionID, true
}

// geminiIDOK accepts what the CLI writes (a UUID) and nothing that could
// pass for a flag or a path.
func geminiIDOK(id string) bool {
	if id == "" || len(id) > 64 || id[0] == '-' {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == '-') {
			return false
		}
	}
	_, err := strconv.Atoi(id) // a bare number is an index to the CLI, not an id
	return err != nil
}
