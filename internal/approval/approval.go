// Package approval is the one queue for everything beyond policy: a request
// (a connection to a host no rule covers, an MCP tool call that escalates, a
// host command) waits for a human's decision, which may be remembered for the
// session, the project or everywhere. The core (Queue, Rules) is pure; Store
// keeps project and global decisions in the user's config dir, apart from
// hand-written config, and tells every running sandbox when they change.
package approval

import (
	"context"
	"errors"
	"time"
)

// Kinds of request.
const (
	KindNetwork  = "network"
	KindMCP      = "mcp"      // a tool call an MCP policy escalated; Subject is server/tool
	KindHostExec = "hostexec" // a command to run on the host; Subject is its canonical argv
)

// Scope is how long a decision holds.
type Scope string

const (
	Once    Scope = "once"    // this request (and the connections waiting with it) only
	Session Scope = "session" // this sandbox, until it stops
	Project Scope = "project" // every sandbox of this project, saved
	Global  Scope = "global"  // every sandbox, saved
)

// Valid reports whether s is one of the scopes.
func (s Scope) Valid() bool {
	switch s {
	case Once, Session, Project, Global:
		return true
	}
	return false
}

// Saved reports whether decisions of scope s outlive the sandbox.
func (s Scope) Saved() bool { return s == Project || s == Global }

// Request is one thing waiting for a human. Its ID is unique across every
// sandbox of this user: the sandbox's id, "-", a counter.
type Request struct {
	ID      string `json:"id"`
	Sandbox string `json:"sandbox"`
	Kind    string `json:"kind"`    // KindNetwork
	Subject string `json:"subject"` // host (or host:port for another port than 80/443)
	Host    string `json:"host,omitempty"`
	Port    uint16 `json:"port,omitempty"`
	Method  string `json:"method,omitempty"` // plain HTTP through the proxy door
	Path    string `json:"path,omitempty"`
	Reason  string `json:"reason"` // why it was asked (no rule covers it)
	// Detail is what a human needs to judge a tool call or a host command:
	// its arguments or argv, working directory (capped by the asker).
	Detail  string    `json:"detail,omitempty"`
	Waiting int       `json:"waiting"` // connections waiting on it
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"` // denied as a timeout then
}

// Decision is a human's answer.
type Decision struct {
	Allow    bool   `json:"allow"`
	Scope    Scope  `json:"scope"`              // Once when empty
	Wildcard bool   `json:"wildcard,omitempty"` // *.parent of the host (one label plus the apex)
	By       string `json:"by"`                 // the surface: terminal, cli, ui, rpc, api, file, timeout
	// Expires, for saved decisions, is when the rule lapses (zero: never).
	Expires time.Time `json:"expires,omitzero"`
}

// Event is what surfaces watch: a request that starts waiting, or one that
// was resolved (by whom and how).
type Event struct {
	Type     string    `json:"type"` // "request" or "resolved"
	Request  Request   `json:"request"`
	Decision *Decision `json:"decision,omitempty"` // resolved: the decision (By "timeout" for one nobody answered)
}

// Rule is a remembered decision: an allow or deny for a host pattern, in
// the policy's own syntax (example.com, *.example.com, host:port).
type Rule struct {
	ID      string    `json:"id" yaml:"id"` // stable, for airlock revoke
	Host    string    `json:"host" yaml:"host"`
	Allow   bool      `json:"allow" yaml:"-"`
	Scope   Scope     `json:"scope" yaml:"scope"`
	Project string    `json:"project,omitempty" yaml:"project,omitempty"` // Project scope: the project's path
	Created time.Time `json:"created" yaml:"created"`
	Expires time.Time `json:"expires,omitzero" yaml:"expires,omitempty"`
	By      string    `json:"by,omitempty" yaml:"by,omitempty"`
}

// Errors a surface shows as one line.
var (
	ErrUnknown = errors.New("no such request (see airlock approvals)")
	ErrDecided = errors.New("the request was already decided")
	ErrExpired = errors.New("the request timed out and was denied")
)

// Hub is every running sandbox's approvals, as a surface (airlock
// approvals, the web page) sees them: found through the state dir and each
// sandbox's control socket, no daemon.
type Hub interface {
	// Pending lists what waits in every running sandbox, newest first.
	Pending(ctx context.Context) ([]Request, error)
	// Decide answers request id (ErrUnknown, ErrDecided, ErrExpired).
	Decide(ctx context.Context, id string, d Decision) error
	// Watch delivers events from every running sandbox (and sandboxes
	// that start later) until ctx ends.
	Watch(ctx context.Context) (<-chan Event, error)
	// Rules lists saved decisions; Revoke removes one by its ID.
	Rules(ctx context.Context) ([]Rule, error)
	Revoke(ctx context.Context, id string) (Rule, error)
}
