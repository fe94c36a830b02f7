// Package agents knows the agent CLIs airlock runs (Claude Code, Codex,
// Gemini CLI, OpenCode, Goose) as data: which hosts and keys each needs,
// the flags and files that make it run unattended inside a sandbox, where
// its MCP servers and orientation go, and how its sessions are resumed.
// It does no I/O beyond reading an agent's own session store; the CLI
// turns a Launch into a sandbox.
package agents

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Profile is one agent CLI. The fields are data; Launch and FindSession
// are the parts that differ in shape from agent to agent (its config file
// formats, its session store).
type Profile struct {
	Name    string // what `airlock agent run NAME` takes
	Display string // "Claude Code"
	Package string // npm package ("" when not on npm)
	Version string // pinned default for `airlock agent install`
	Binary  string // the command's name on PATH and in node_modules/.bin
	// Install says how to get the CLI where npm cannot (Goose).
	Install string

	// Hosts the agent needs to work (its provider API); allowed.
	Hosts []string
	// Endpoints, if any, restrict requests to Hosts ("HOST METHOD /path/*").
	Endpoints []string
	// Keys are the credentials the agent reads from its environment. Each
	// one found on the host becomes a placeholder inside, swapped by the
	// gateway toward its Hosts only.
	Keys []Key
	// Logins are OAuth credential files in the user's real home that can
	// stand in for a key (see the credentials package).
	Logins []Login

	// CAEnv are variables this agent reads a CA bundle path from, beyond
	// the ones every sandbox gets (SSL_CERT_FILE, NODE_EXTRA_CA_CERTS, ...).
	CAEnv []string
	// Env is fixed: telemetry, auto-update and model-list fetches off,
	// trust pre-accepted.
	Env []string
	// RootEnv is added when the sandbox runs as uid 0.
	RootEnv []string

	// RepoSettings are files in a repository that steer this agent (hooks,
	// env, MCP servers): they apply inside, where they cannot widen what the
	// sandbox allows, and a run names the ones present.
	RepoSettings []string

	// Launch makes the command line, environment and home files of one run.
	Launch func(in Inputs) (Launch, error)
	// FindSession returns the id of the newest session the agent stored in
	// its home (the host path of the agent's private home) since t; "" if none.
	FindSession func(home string, since time.Time) (string, error)
}

// Key is one credential variable.
type Key struct {
	Env string // the variable the agent reads, inside the sandbox
	// From are host variables to take the value from, in order; empty
	// means Env itself.
	From  []string
	Hosts []string // where the value may go
	// Prefix starts the placeholder, for agents that check a key's shape
	// ("sk-ant-api03-"); see secrets' :prefix=.
	Prefix string
}

// Sources are the host variables a key is looked for in.
func (k Key) Sources() []string {
	if len(k.From) == 0 {
		return []string{k.Env}
	}
	return k.From
}

// Login is an OAuth credential file the agent's own login writes.
type Login struct {
	Path  string   // relative to the user's home, e.g. ".claude/.credentials.json"
	Hosts []string // where its access token may go
}

// MCPServer is one of the sandbox's MCP servers as the agent should see
// it: a stdio command inside the sandbox (airlock's bridge) that reaches
// airlock.internal/mcp/NAME.
type MCPServer struct {
	Name    string
	Command string   // "/run/airlock/bin/mcp-bridge"
	Args    []string // [NAME]
	URL     string   // the same server over Streamable HTTP, for agents that prefer it
}

// Inputs are what one run of an agent depends on.
type Inputs struct {
	Home      string // the agent's home as the sandbox sees it
	Workspace string // the workspace as the sandbox sees it
	Root      bool   // the command runs as uid 0 inside
	CABundle  string // the CA bundle's path inside ("" without a gateway)
	// Keys maps each Key.Env found on the host to the placeholder the
	// sandbox sees (the real value stays outside).
	Keys        map[string]string
	MCP         []MCPServer
	Orientation string // what the sandbox allows and how to ask; see Orientation
	// ToolTimeout is how long the agent's MCP client must wait for a call
	// (above the approval timeout, so an approval can arrive).
	ToolTimeout time.Duration
	Args        []string // the user's arguments after --
	Resume      string   // the agent's own session id to resume, "" for a new one
}

// Launch is one run: the command, what to add to its environment, and
// files to write in its private home before it starts (path relative to
// the home → content). Never a file in the workspace.
type Launch struct {
	Argv  []string
	Env   []string
	Files map[string][]byte
}

var registry = map[string]*Profile{}

// register adds p; a duplicate name is a programming error.
func register(p *Profile) {
	if _, dup := registry[p.Name]; dup {
		panic("agents: duplicate profile " + p.Name)
	}
	registry[p.Name] = p
}

// ErrUnknown is returned by Lookup for a name no profile has.
var ErrUnknown = errors.New("unknown agent")

// Lookup returns the profile called name.
func Lookup(name string) (*Profile, error) {
	if p, ok := registry[name]; ok {
		return p, nil
	}
	return nil, fmt.Errorf("%w %q: known agents are %s", ErrUnknown, name, strings.Join(Names(), ", "))
}

// Names lists the known agents, sorted.
func Names() []string {
	n := make([]string, 0, len(registry))
	for k := range registry {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// All returns every profile, sorted by name.
func All() []*Profile {
	var ps []*Profile
	for _, n := range Names() {
		ps = append(ps, registry[n])
	}
	return ps
}

// Facts are what the orientation tells the agent about its sandbox.
type Facts struct {
	Workspace   string
	AllowHosts  []string
	Ask         bool          // unknown hosts wait for a person
	AskTimeout  time.Duration // how long they wait
	HostExec    bool          // `hostexec CMD` is available
	MCP         []string      // MCP server names
	WorkspaceRO bool
}

// Orientation is the text every agent gets (by its own flag or a file in
// its private home): what the sandbox allows, that a denial is final, and
// how to ask for more.
func Orientation(f Facts) string {
	var b strings.Builder
	b.WriteString("You are running inside an airlock sandbox. ")
	fmt.Fprintf(&b, "You may change files under %s; the rest of the file system is read-only and your home is private. ", f.Workspace)
	if len(f.AllowHosts) > 0 {
		hs := slices.Clone(f.AllowHosts)
		sort.Strings(hs)
		fmt.Fprintf(&b, "The network reaches only: %s. ", strings.Join(hs, ", "))
	} else {
		b.WriteString("There is no network beyond your model's API. ")
	}
	if f.Ask {
		fmt.Fprintf(&b, "A connection to another host waits up to %s for a person to approve it; if it fails, it was denied. ", f.AskTimeout)
	}
	b.WriteString("A request refused with \"airlock:\" in its error was denied by policy: do not retry it or look for a way around it; say what you needed instead. ")
	b.WriteString("API keys you see in the environment are placeholders; they work only toward their own service. ")
	if f.HostExec {
		b.WriteString("To run an allowed command on the host (for example git push), run: hostexec CMD ARGS...; it may wait for approval. ")
	}
	if len(f.MCP) > 0 {
		fmt.Fprintf(&b, "MCP tools from %s go through a policy: a denied call is final, an escalated one waits for a person. ", strings.Join(f.MCP, ", "))
	}
	b.WriteString("Batch operations that need the network or approval instead of repeating them.")
	return b.String()
}
