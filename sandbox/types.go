// Package sandbox is airlock's programmatic API in Go: the types of the
// JSON-RPC protocol (`airlock rpc`) and an embedded implementation that runs
// sandboxes in this process, with no subprocess, plus Go-function hooks.
// Package sandbox/client drives `airlock rpc` with the same types.
//
// The shapes follow ADR-0001 "Programmatic API": Config as the create
// method's params, ExecResult, Event and FileInfo as its results.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
)

// API is what both the embedded Sandbox and package client's Sandbox do:
// code written against it runs in-process or through `airlock rpc`.
type API interface {
	ID() string
	Info() CreateResult
	Exec(command string) (*ExecResult, error)
	ExecContext(ctx context.Context, req ExecRequest) (*ExecResult, error)
	ExecStream(ctx context.Context, req ExecRequest, output func(stream int, data []byte)) (*ExecResult, error)
	WriteFile(path string, content []byte) error
	WriteFileContext(ctx context.Context, path string, content []byte, mode fs.FileMode) error
	ReadFile(path string) ([]byte, error)
	ReadFileContext(ctx context.Context, path string) ([]byte, error)
	ListFiles(path string) ([]FileInfo, error)
	ListFilesContext(ctx context.Context, path string) ([]FileInfo, error)
	Events() <-chan Event
	// Decide answers an approval request (see ApprovalEvent).
	Decide(id string, d ApprovalDecision) error
	Close() error
}

var _ API = (*Sandbox)(nil)

// KubernetesConfig is where a kubernetes sandbox's Pod runs.
type KubernetesConfig struct {
	Context      string `json:"context,omitempty"`
	Namespace    string `json:"namespace,omitempty"`
	RuntimeClass string `json:"runtime_class,omitempty"`
	Image        string `json:"image,omitempty"` // the image holding airlock's binary
}

// Config is the create method's params: what the sandbox is and may reach.
type Config struct {
	// Backend is where the sandbox runs: "native" (the default: namespaces
	// on this kernel), "docker" (a hardened container; see airlock images)
	// or "kubernetes" (a Pod of the kubeconfig's cluster).
	Backend string `json:"backend,omitempty"`
	// Kubernetes names the cluster of a "kubernetes" sandbox (default: the
	// kubeconfig's current context and its namespace).
	Kubernetes *KubernetesConfig `json:"kubernetes,omitempty"`
	// Image names the root filesystem. The native backend shows the host's
	// root read-only, so only "", "standard", "minimal" and "host" are
	// accepted (they all mean that). The docker backend runs the image
	// named ("minimal" and "standard" are airlock's own, "" is minimal).
	Image     string         `json:"image,omitempty"`
	Resources *Resources     `json:"resources,omitempty"`
	Network   *NetworkConfig `json:"network,omitempty"`
	VFS       *VFSConfig     `json:"vfs,omitempty"`
	// Env is set in every command's environment; "${NAME}" stands for the
	// placeholder of secret NAME.
	Env map[string]string `json:"env,omitempty"`

	// OnEvent, embedded only, is called for every event, in order, on the
	// goroutine that observed it: keep it quick.
	OnEvent func(Event) `json:"-"`
	// Approvals: {"mode": "ask"} makes a connection to a host no rule
	// covers wait for a decision (Approve/Deny, the approval event, airlock
	// approvals, airlock ui) instead of failing.
	Approvals *ApprovalsConfig `json:"approvals,omitempty"`
	// Approver, if set, decides each request as it comes (embedded API).
	Approver func(ApprovalEvent) ApprovalDecision `json:"-"`
	// Origin is what made the sandbox, shown by `airlock ls`: "api" (the
	// default) or "rpc".
	Origin string `json:"-"`
}

// Resources bound the sandbox. Zero means the default: no CPU limit, half
// the machine's memory, and no command timeout.
type Resources struct {
	CPUs     float64 `json:"cpus,omitempty"`
	MemoryMB int64   `json:"memory_mb,omitempty"`
	// TimeoutSeconds is each command's default time limit (exec's
	// timeout_ms overrides it); the command is killed when it passes.
	TimeoutSeconds int64 `json:"timeout_seconds,omitempty"`
}

// NetworkConfig is the gateway's policy. With no allowed host and no
// secret the sandbox has loopback only.
type NetworkConfig struct {
	AllowedHosts []string `json:"allowed_hosts,omitempty"`
	// TunnelHosts (airlock's) are reached through a blind TLS tunnel, not
	// intercepted, as config's network.tunnel_hosts: example.com (port 443),
	// *.example.com or host:port; the TLS server name must be the host. No
	// secret may go to one.
	TunnelHosts []string `json:"tunnel_hosts,omitempty"`
	DeniedHosts []string `json:"denied_hosts,omitempty"`
	// BlockPrivateIPs is always in force (private, loopback, link-local and
	// metadata addresses are refused unless an allowed host names them
	// explicitly); over JSON-RPC an explicit false is refused, not ignored.
	BlockPrivateIPs bool              `json:"block_private_ips,omitempty"`
	Secrets         map[string]Secret `json:"secrets,omitempty"`
	// PolicyScript is the absolute host path of a Starlark policy script
	// (is_host_allowed, on_request, on_response), as network.policy_script
	// in a config file; never one inside the workspace or a writable mount.
	PolicyScript string `json:"policy_script,omitempty"`
	// AddHosts (airlock's, beyond the ADR) resolve NAME:IP statically, which
	// also allows that private address, as --add-host does.
	AddHosts []string `json:"add_hosts,omitempty"`
	// UpstreamCA (airlock's) is a host PEM file also trusted for upstream
	// servers, as --upstream-ca.
	UpstreamCA string `json:"upstream_ca,omitempty"`

	// Hooks, embedded only, see and change intercepted HTTP.
	Hooks HTTPHooks `json:"-"`
}

// Secret is a credential the sandbox never sees: it gets a placeholder,
// which the gateway swaps for Value only in requests to Hosts.
type Secret struct {
	Value string   `json:"value"`
	Hosts []string `json:"hosts"`
	// Git, if set, is the user git sends with the placeholder (e.g.
	// x-access-token for GitHub): git over HTTPS to Hosts then uses the
	// secret through a credential helper in git's environment config, and
	// ssh remotes of Hosts are fetched over HTTPS.
	Git string `json:"git,omitempty"`
}

// HTTPHooks are Go functions the gateway calls on intercepted HTTP(S)
// traffic of an embedded sandbox. They must be safe for concurrent use.
type HTTPHooks struct {
	// OnRequest sees a request policy allowed, before secret placeholders
	// are swapped for real values. Return the request (changed or not) to
	// send it, or an error (ErrBlocked) to refuse it with 403.
	OnRequest func(*http.Request) (*http.Request, error)
	// OnResponse sees the upstream's response (real secret values already
	// redacted) and its request. An error answers 502.
	OnResponse func(*http.Response, *http.Request) (*http.Response, error)
}

// ErrBlocked is what an OnRequest hook returns to refuse a request.
var ErrBlocked = errors.New("blocked by hook")

// VFSConfig says what the sandbox sees besides the host's read-only root.
type VFSConfig struct {
	DirectMounts map[string]DirectMount `json:"direct_mounts,omitempty"`
	Mounts       map[string]Mount       `json:"mounts,omitempty"`
}

// DirectMount shows a host directory (or file) at a path inside.
type DirectMount struct {
	HostPath string `json:"host_path"`
	Readonly bool   `json:"readonly,omitempty"`
}

// Mount types.
const (
	MountMemory  = "memory"  // an empty directory that lives as long as the sandbox
	MountRealFS  = "real_fs" // a host directory
	MountOverlay = "overlay" // copy-on-write: upper memory over lower real_fs (the workspace only)
)

// Mount is one programmable mount. The one at /workspace (else the first
// writable one) is the sandbox's workspace: commands start there.
type Mount struct {
	Type     string `json:"type"`
	HostPath string `json:"host_path,omitempty"`
	Readonly bool   `json:"readonly,omitempty"`
	Upper    *Mount `json:"upper,omitempty"`
	Lower    *Mount `json:"lower,omitempty"`
}

// CreateResult is the create method's result.
type CreateResult struct {
	ID  string            `json:"id"`
	Env map[string]string `json:"env"` // every variable a command sees
	// Network is how traffic reaches the gateway: "transparent", "proxy",
	// or "" for none.
	Network   string   `json:"network,omitempty"`
	Workspace string   `json:"workspace"`
	Warnings  []string `json:"warnings,omitempty"`
}

// ExecRequest is the exec and exec_stream methods' params.
type ExecRequest struct {
	Command    string            `json:"command"`        // run by /bin/sh -c
	Args       []string          `json:"args,omitempty"` // instead of Command: argv, no shell
	WorkingDir string            `json:"working_dir,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	Stdin      []byte            `json:"stdin,omitempty"` // base64 in JSON
	TimeoutMS  int64             `json:"timeout_ms,omitempty"`
}

// ExecResult is how a command ended and what it printed. Over JSON-RPC
// Stdout and Stderr are base64; the Go API gives them as strings.
type ExecResult struct {
	ExitCode   int    `json:"exit_code"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	DurationMS int64  `json:"duration_ms"`
	// Truncated says output beyond MaxOutput per stream was dropped.
	Truncated bool `json:"truncated,omitempty"`
	// Reason says why airlock ended the command (its timeout), if it did.
	Reason string `json:"reason,omitempty"`
}

// MaxOutput bounds what exec keeps of each stream; exec_stream has no bound.
const MaxOutput = 8 << 20

// MaxFile bounds one write_file or read_file (the guest protocol's frame).
const MaxFile = 16<<20 - 64<<10

// Streams of ExecStream's output callback.
const (
	Stdout = 1
	Stderr = 2
)

// FileInfo is one entry of list_files.
type FileInfo struct {
	Name    string `json:"name"`
	Size    int64  `json:"size"`
	Mode    uint32 `json:"mode"` // permission bits, e.g. 420 (0644)
	IsDir   bool   `json:"is_dir"`
	Link    string `json:"link,omitempty"`     // a symlink's target
	ModTime int64  `json:"mod_time,omitempty"` // Unix seconds
}

// Event is one notification: what the sandbox did.
type Event struct {
	// Type is network (http, dns and connections), file, exec, approval,
	// or the audit log's other kinds, carried in Record: mcp, hostexec,
	// llm, workspace, lifecycle, audit (the log about itself).
	Type      string         `json:"type"`
	Timestamp int64          `json:"timestamp"`
	Network   *NetworkEvent  `json:"network,omitempty"`
	File      *FileEvent     `json:"file,omitempty"`
	Exec      *ExecEvent     `json:"exec,omitempty"`
	Approval  *ApprovalEvent `json:"approval,omitempty"`
	Record    *RecordEvent   `json:"record,omitempty"`
}

// RecordEvent is an audit record of a kind with no event of its own (mcp,
// hostexec, llm, workspace, lifecycle, audit), as airlock audit --json
// shows it: the fields that kind uses (see airlock audit's docs).
type RecordEvent struct {
	Kind       string            `json:"kind"`
	Decision   string            `json:"decision,omitempty"`
	Subject    string            `json:"subject,omitempty"`
	Rule       string            `json:"rule,omitempty"`
	Reason     string            `json:"reason,omitempty"`
	Op         string            `json:"op,omitempty"`
	Host       string            `json:"host,omitempty"`
	Port       int               `json:"port,omitempty"`
	Method     string            `json:"method,omitempty"`
	Path       string            `json:"path,omitempty"`
	Status     int               `json:"status,omitempty"`
	Argv       []string          `json:"argv,omitempty"`
	ExitCode   *int              `json:"exit_code,omitempty"`
	DurationMS int64             `json:"duration_ms,omitempty"`
	Backend    string            `json:"backend,omitempty"`
	Added      int               `json:"added,omitempty"`
	Modified   int               `json:"modified,omitempty"`
	Deleted    int               `json:"deleted,omitempty"`
	Count      int               `json:"count,omitempty"`
	Extra      map[string]string `json:"extra,omitempty"`
}

// ApprovalsConfig says what happens to a connection no rule covers.
type ApprovalsConfig struct {
	Mode           string `json:"mode"`                      // "ask" or "deny" (the default)
	TimeoutSeconds int64  `json:"timeout_seconds,omitempty"` // unanswered: denied (default 60)
}

// ApprovalEvent is a request that starts waiting (phase "request") or was
// decided (phase "resolved").
type ApprovalEvent struct {
	Phase    string `json:"phase"`
	ID       string `json:"id"`
	Subject  string `json:"subject"`
	Host     string `json:"host,omitempty"`
	Port     int    `json:"port,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Decision string `json:"decision,omitempty"` // resolved: allow or deny
	Scope    string `json:"scope,omitempty"`
	By       string `json:"by,omitempty"` // who decided: api, rpc, cli, ui, timeout
}

// ApprovalDecision answers a request.
type ApprovalDecision struct {
	Allow    bool   `json:"allow"`
	Scope    string `json:"scope,omitempty"` // once (default), session, project, global
	Wildcard bool   `json:"wildcard,omitempty"`
}

// NetworkEvent is one gateway decision: an HTTP request it intercepted, or
// a connection or DNS name it allowed or refused.
type NetworkEvent struct {
	Kind          string `json:"kind"` // http, network (connection), dns
	Method        string `json:"method,omitempty"`
	URL           string `json:"url,omitempty"`
	Host          string `json:"host,omitempty"`
	Port          int    `json:"port,omitempty"`
	StatusCode    int    `json:"status_code"`
	RequestBytes  int64  `json:"request_bytes"`
	ResponseBytes int64  `json:"response_bytes"`
	DurationMS    int64  `json:"duration_ms"`
	Blocked       bool   `json:"blocked"`
	Decision      string `json:"decision,omitempty"`
	Reason        string `json:"reason,omitempty"`
}

// FileEvent is a change in a writable mount, whoever made it.
type FileEvent struct {
	Op   string `json:"op"` // create, write, delete
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// ExecEvent is a command starting or ending.
type ExecEvent struct {
	Phase      string `json:"phase"` // start, exit
	Command    string `json:"command"`
	PID        int    `json:"pid,omitempty"`
	ExitCode   int    `json:"exit_code"`
	DurationMS int64  `json:"duration_ms,omitempty"`
}

// Error kinds: what failed, as JSON-RPC's data.kind.
const (
	KindInvalidConfig = "invalid_config" // create's params: fix the config
	KindInvalidParams = "invalid_params" // another method's params
	KindStart         = "start_failed"   // the sandbox could not start
	KindNotCreated    = "not_created"    // no create yet
	KindExists        = "already_created"
	KindClosed        = "closed"      // the sandbox has ended
	KindNotFound      = "not_found"   // no such file
	KindPermission    = "permission"  // not writable or readable inside
	KindTooLarge      = "too_large"   // a payload over its bound
	KindExec          = "exec_failed" // the command could not start
	KindIO            = "io"          // another file error
	KindCanceled      = "canceled"    // the caller's context ended
)

// Error is a failure with a kind a program can act on.
type Error struct {
	Kind    string
	Message string
	// Code is the JSON-RPC error code when the error came over the wire.
	Code int
}

func (e *Error) Error() string { return e.Message }

// Is lets errors.Is(err, &Error{Kind: k}) match by kind.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Kind == e.Kind && (t.Message == "" || t.Message == e.Message)
}

// ErrClosed matches every error about a sandbox that has ended.
var ErrClosed = &Error{Kind: KindClosed}

func errorf(kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}
