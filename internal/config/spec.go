// Package config holds a sandbox's neutral spec: what every source (built-in
// defaults, the global and project config files, a trusted .airlock.yaml,
// command-line flags, the JSON-RPC create call, agent profiles) produces,
// validated and merged here, and what the engine and every backend consume.
// It does no I/O beyond reading config files and the paths they name.
package config

import (
	"time"

	"github.com/airlock-dev/airlock/internal/secrets"
)

// Backends.
const (
	BackendNative = "native"
	BackendDocker = "docker"
	BackendVM     = "vm"
	// BackendKubernetes runs the sandbox as a Pod of a cluster (see
	// internal/backend/kubernetes).
	BackendKubernetes = "kubernetes"
)

// DefaultImage is the docker backend's image when none is named.
const DefaultImage = "airlock/minimal:latest"

// Network modes.
const (
	ModeAuto        = "auto"
	ModeTransparent = "transparent" // a network interface into the gateway's netstack: every packet
	ModeProxy       = "proxy"       // the explicit front door, relayed in, with proxy variables
)

// Kubernetes names the cluster, namespace and shape of a kubernetes
// sandbox's Pod; the kubeconfig is read as kubectl reads it.
type Kubernetes struct {
	Context      string   `json:"context,omitempty"`       // the kubeconfig's context (default: its current one)
	Namespace    string   `json:"namespace,omitempty"`     // default: the context's, else "default"
	RuntimeClass string   `json:"runtime_class,omitempty"` // default: gVisor or Kata when the cluster offers one
	Image        string   `json:"image,omitempty"`         // the image holding airlock's binary (the init container's)
	NodeSelector []string `json:"node_selector,omitempty"` // KEY=VALUE
	Labels       []string `json:"labels,omitempty"`        // KEY=VALUE, added to the Pod's
	// ReadyTimeout bounds the wait for the Pod to run (default 90s).
	ReadyTimeout time.Duration `json:"ready_timeout,omitempty"`
}

// Workspace modes.
const (
	WorkspaceBind    = "bind"
	WorkspaceOverlay = "overlay"
	WorkspaceCopy    = "copy"
)

// Spec is one sandbox's shape. Paths are absolute with symlinks resolved;
// sizes are bytes. It is JSON so a detached sandbox's supervisor can read it
// back from the state dir; nothing in it is a secret's value.
type Spec struct {
	Backend string `json:"backend,omitempty"` // BackendNative ("" too), BackendDocker or BackendVM
	Image   string `json:"image,omitempty"`   // docker, kubernetes: the image (default DefaultImage)

	// Kubernetes is the cluster a kubernetes sandbox runs in.
	Kubernetes Kubernetes `json:"kubernetes,omitzero"`

	Workspace  Workspace  `json:"workspace"`
	Filesystem Filesystem `json:"filesystem,omitzero"`
	Home       string     `json:"home,omitempty"` // host dir kept as the sandbox's home; "" = a private tmpfs
	RO         []string   `json:"ro,omitempty"`   // extra paths shown read-only
	RW         []string   `json:"rw,omitempty"`   // extra paths made writable
	Limits     Limits     `json:"limits"`
	Network    Network    `json:"network,omitempty"`
	// Ports are published ports (-p), in ParsePublished's forms: ways in
	// from the host, checked by the engine's Validate.
	Ports []string `json:"ports,omitempty"`
	// Env are --env entries: NAME takes the host's value, NAME=VALUE sets one.
	Env   []string `json:"env,omitempty"`
	Audit Audit    `json:"audit,omitempty"`

	// Approvals: what happens to a connection no rule covers.
	Approvals Approvals `json:"approvals,omitzero"`

	// HostExec says which commands the sandbox may have run on the host.
	HostExec HostExec `json:"hostexec,omitzero"`

	// Budget bounds what the sandbox may spend on LLM APIs, as the gateway
	// counts it.
	Budget Budget `json:"budget,omitzero"`

	// Terminal: the keys airlock itself reads from a -t command's terminal.
	Terminal Terminal `json:"terminal,omitzero"`

	// MCPServers is parsed from config files and passed through to the MCP
	// proxy, which reads it (decoded YAML: maps, lists, strings, numbers, bools).
	MCPServers any `json:"mcp_servers,omitempty"`

	// Agents are the agents section: settings per agent for airlock agent
	// run, and which agent runs when none is named.
	Agents Agents `json:"agents,omitzero"`
}

// Agents is the agents section of config.
type Agents struct {
	Default string            `json:"default,omitempty"` // the agent airlock agent run runs when none is named
	By      map[string]*Agent `json:"by,omitempty"`      // by agent name (claude, codex...)
}

// Agent is one agent's settings: what its runs add to the config, or
// replace in it (a flag on the command line still wins).
type Agent struct {
	// Keys are the profile's key variables given to the agent (each a
	// placeholder inside, swapped toward its provider); the others stay on
	// the host. Empty: all of them.
	Keys  []string `json:"keys,omitempty"`
	Hosts []string `json:"hosts,omitempty"` // added to network.allow_hosts for its runs
	Args  []string `json:"args,omitempty"`  // the agent's own arguments, before those after --
	// Limits, Budget, Backend and Image replace the top-level settings for
	// its runs where set.
	Limits  AgentLimits `json:"limits,omitzero"`
	Budget  AgentBudget `json:"budget,omitzero"`
	Backend string      `json:"backend,omitempty"`
	Image   string      `json:"image,omitempty"`
}

// AgentLimits are the limits an agent's settings may set (see Limits).
type AgentLimits struct {
	MemoryBytes int64         `json:"memory_bytes,omitempty"`
	CPUs        float64       `json:"cpus,omitempty"`
	Pids        int64         `json:"pids,omitempty"`
	Timeout     time.Duration `json:"timeout,omitempty"`
}

// AgentBudget is the budget an agent's settings may set (see Budget).
type AgentBudget struct {
	Tokens int64   `json:"tokens,omitempty"`
	USD    float64 `json:"usd,omitempty"`
}

// agent is a's settings for name, made when first asked for.
func (a *Agents) agent(name string) *Agent {
	if a.By == nil {
		a.By = map[string]*Agent{}
	}
	if a.By[name] == nil {
		a.By[name] = &Agent{}
	}
	return a.By[name]
}

// Terminal are the key sequences (term.ParseKeys) airlock reads on a -t
// command's terminal instead of passing them on.
type Terminal struct {
	DetachKeys string `json:"detach_keys,omitempty"` // leave airlock attach (default ctrl-p,ctrl-q)
	AskKeys    string `json:"ask_keys,omitempty"`    // open the approval prompt (default ctrl-p,ctrl-a)
}

// Budget bounds LLM usage seen at the gateway; zero means no bound. Once a
// bound is spent, further LLM requests are refused.
type Budget struct {
	Tokens int64   `json:"tokens,omitempty"` // input + output tokens (cache reads and writes included)
	USD    float64 `json:"usd,omitempty"`    // priced with Prices over the built-in table
	// Prices per million tokens by model (a glob such as "claude-sonnet-*");
	// they add to and override the built-in table.
	Prices map[string]Price `json:"prices,omitempty"`
}

// Price is USD per million tokens.
type Price struct {
	Input      float64 `json:"input,omitempty"`
	Output     float64 `json:"output,omitempty"`
	CacheRead  float64 `json:"cache_read,omitempty"`
	CacheWrite float64 `json:"cache_write,omitempty"`
}

// Workspace is the directory the sandbox may change and how it is shown.
// Filesystem is what the sandbox never sees of the host's files.
type Filesystem struct {
	// Hide are gitignore-style patterns relative to the workspace, or
	// absolute host paths (DefaultHide are built in).
	Hide []string `json:"hide,omitempty"`
	// HideDefaults keeps DefaultHide in Hide (--no-hide drops them).
	HideDefaults bool `json:"hide_defaults,omitempty"`
}

// DefaultHide is what every sandbox hides in its workspace unless told not
// to (--no-hide): where a project's secrets usually sit.
var DefaultHide = []string{".env", ".env.*", "*.pem", "*.key", "id_*"}

type Workspace struct {
	Path       string   `json:"path"`
	Mode       string   `json:"mode,omitempty"` // WorkspaceBind ("" too), WorkspaceOverlay, WorkspaceCopy
	Exclude    []string `json:"exclude,omitempty"`
	ProtectGit bool     `json:"protect_git,omitempty"`
	NoDelete   bool     `json:"no_delete,omitempty"`
	AutoApply  bool     `json:"auto_apply,omitempty"`
	ApplyRisky bool     `json:"apply_risky,omitempty"`
	// UndoBytes bounds the store of what bind runs overwrote and deleted
	// (airlock undo); 0 is the default, 1 GiB.
	UndoBytes int64 `json:"undo_size,omitempty"`
}

// Limits bound the sandbox's resources; zero means the default (memory:
// half of RAM; tmp: the memory limit) or none (CPUs, timeout).
type Limits struct {
	MemoryBytes int64         `json:"memory_bytes,omitempty"`
	CPUs        float64       `json:"cpus,omitempty"`
	Pids        int64         `json:"pids,omitempty"`
	TmpBytes    int64         `json:"tmp_bytes,omitempty"` // size of /tmp and the private home
	Timeout     time.Duration `json:"timeout,omitempty"`
	// IdleTimeout stops a sandbox nothing used for that long: no command
	// running (exec or an attached terminal) and no network activity.
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	// MaxSandboxes caps how many sandboxes this user runs at once: a start
	// beyond it is refused, listing them (0: no cap).
	MaxSandboxes int64 `json:"max_sandboxes,omitempty"`
}

// Network is what the sandbox may reach. Without allow rules (or secrets)
// there is no gateway at all and the sandbox has loopback only.
type Network struct {
	Mode       string   `json:"mode,omitempty"` // ModeAuto ("" too), ModeTransparent, ModeProxy
	AllowHosts []string `json:"allow_hosts,omitempty"`
	// TunnelHosts are reached through a blind TLS tunnel (intercept: false):
	// the ClientHello must name the host, then bytes pass unseen, so no
	// secret and no endpoint rule may apply to them (CheckTunnels).
	TunnelHosts []string `json:"tunnel_hosts,omitempty"`
	DenyHosts   []string `json:"deny_hosts,omitempty"`
	Endpoints   []string `json:"endpoints,omitempty"` // "HOST METHOD /path/*"
	// Secrets are parsed once, when the config is merged; stored (JSON)
	// in --secret's form. Values are read when the sandbox starts
	// (secrets.Spec.Open) and never stored; each secret's hosts are allowed.
	Secrets     []secrets.Spec `json:"secrets,omitempty"`
	AddHosts    []string       `json:"add_hosts,omitempty"` // NAME:IP
	UpstreamCA  string         `json:"upstream_ca,omitempty"`
	DNSUpstream string         `json:"dns_upstream,omitempty"` // IP:PORT; "" = the host's resolver
	// PolicyScript is a Starlark file on the host (internal/policy/script)
	// deciding hosts, requests and responses in code; never one the
	// sandbox can write (checkReadPaths).
	PolicyScript string `json:"policy_script,omitempty"`
}

// Enabled reports whether n lets anything out, so a gateway is needed.
func (n Network) Enabled() bool {
	return len(n.AllowHosts)+len(n.TunnelHosts)+len(n.Endpoints)+len(n.Secrets) > 0 || n.PolicyScript != ""
}

// Approval modes.
const (
	ApprovalsDeny = "deny" // refused at once (the default)
	ApprovalsAsk  = "ask"  // waits for a human's decision (or a prepared decisions file)
)

// Approvals says what happens to a connection no rule covers.
type Approvals struct {
	Mode    string        `json:"mode,omitempty"`    // ApprovalsDeny ("" too) or ApprovalsAsk
	Timeout time.Duration `json:"timeout,omitempty"` // unanswered for this long: denied (0: the default, 60 s)
	// Decisions is a prepared decisions file (the saved-decisions schema),
	// for runs with nobody to ask: its rules apply as the session's, and
	// whatever they do not cover is denied.
	Decisions string `json:"decisions,omitempty"`
}

// Ask reports whether a connection no rule covers waits for a decision.
func (a Approvals) Ask() bool { return a.Mode == ApprovalsAsk }

// HostExec lists, as regular expressions over a command's canonical line,
// the host commands run at once, asked about, or refused (a refusal wins;
// what no list matches is refused). Lists add up across config files. A
// command runs in a sandbox of its own, with what its entry in Commands
// grants (the plain lists grant nothing but the workspace).
type HostExec struct {
	Commands      []HostCommand `json:"commands,omitempty"`
	AutoApprove   []string      `json:"auto_approve,omitempty"`
	Ask           []string      `json:"ask,omitempty"`
	AutoDeny      []string      `json:"auto_deny,omitempty"`
	Timeout       time.Duration `json:"timeout,omitempty"`
	AllowCopyMode bool          `json:"allow_copy_mode,omitempty"` // run on the host dir even when the workspace is an overlay or a copy
}

// HostCommand is one hostexec.commands entry: the commands Match (a regular
// expression over the canonical line) selects, whether a human must approve
// each (Ask; else it runs at once), and what the command's sandbox may
// reach besides the workspace.
type HostCommand struct {
	Match      string         `json:"match" yaml:"match"`
	Ask        bool           `json:"ask,omitempty" yaml:"ask,omitempty"`
	AllowHosts []string       `json:"allow_hosts,omitempty" yaml:"allow_hosts,omitempty"`
	Secrets    []secrets.Spec `json:"secrets,omitempty" yaml:"secrets,omitempty"` // parsed once; JSON in --secret form
	RO         []string       `json:"ro,omitempty" yaml:"ro,omitempty"`           // absolute host paths
	RW         []string       `json:"rw,omitempty" yaml:"rw,omitempty"`           // absolute host paths
	SSHAgent   bool           `json:"ssh_agent,omitempty" yaml:"ssh_agent,omitempty"`
}

// Enabled reports whether any host command could run.
func (h HostExec) Enabled() bool { return len(h.AutoApprove)+len(h.Ask)+len(h.Commands) > 0 }

// Asks reports whether some host command waits for a human.
func (h HostExec) Asks() bool {
	if len(h.Ask) > 0 {
		return true
	}
	for _, c := range h.Commands {
		if c.Ask {
			return true
		}
	}
	return false
}

// Audit bounds the sandbox's audit log.
type Audit struct {
	MaxBytes int64 `json:"max_bytes,omitempty"` // rotate past this size (0: the default)
	Keep     int   `json:"keep,omitempty"`      // rotated files kept (0: the default)
	OTLP     OTLP  `json:"otlp,omitzero"`
}

// OTLP is where the audit records are also sent as OpenTelemetry logs and
// spans (see internal/otlp); the host's OTEL_EXPORTER_OTLP_* variables
// fill in what it leaves unset.
type OTLP struct {
	Endpoint string `json:"endpoint,omitempty"` // the collector's base URL
	// Headers are NAME=VALUE, and may hold tokens: never written with the
	// spec (the state record, a detached sandbox's record); a detached
	// supervisor gets them through its environment (supervisor.Detach).
	Headers  []string `json:"-"`
	Insecure bool     `json:"insecure,omitempty"` // plain http to the collector
}

// BackendName is s's backend, with the default filled in.
func (s *Spec) BackendName() string {
	if s.Backend == "" {
		return BackendNative
	}
	return s.Backend
}

// WorkspaceMode is s's workspace mode, with the default filled in.
func (s *Spec) WorkspaceMode() string {
	if s.Workspace.Mode == "" {
		return WorkspaceBind
	}
	return s.Workspace.Mode
}
