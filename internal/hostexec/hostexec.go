// Package hostexec runs a command for a sandbox that asks for it through its
// broker (POST http://airlock.internal/hostexec/run), when the rules or a
// human allow: without a shell, in a sandbox of its own over the workspace's
// host directory, with what its rule grants, a time limit and an output
// cap, its output streamed back as it comes.
//
// Wire format. The request is JSON, at most 64 KiB:
//
//	{"argv": ["git", "push"], "dir": "sub/dir"}
//
// dir (optional, slash-separated) is relative to the workspace and may not
// leave it, lexically or through a symlink. A refusal is a non-200 status
// with a JSON body {"error": "...", "reason": "..."} (Refusal). Otherwise the
// status is 200 and the body is newline-delimited JSON frames (Frame), one
// flushed per chunk of output:
//
//	{"stream":"stdout","data":"<base64>"}
//	{"stream":"stderr","data":"<base64>"}
//	{"exit":0,"reason":"exited"}
//
// The last frame always carries exit; a body that ends without it was cut.
//
// A command never runs with the host's authority: the directory it runs in
// was written by the sandbox, and git, make, npm, cargo and most build tools
// run what that directory tells them to (hooks, config, Makefiles). So each
// command runs in a sandbox of its own, started by this airlock binary
// (airlock run --no-config-files), with the workspace's host directory as
// its workspace and exactly what its Rule grants besides: network hosts,
// secrets as placeholders (the values stay in that sandbox's gateway),
// read-only or writable host paths. No host variable reaches it, and the
// request cannot set any. The worst a hostile hook or config can do is what
// the rule grants. dir is resolved beneath the workspace with openat2
// (RESOLVE_BENEATH) to an fd, and the directory that fd names is the
// command's working directory inside: a swap raced in after that moves it
// only within the command's own walls. The whole child sandbox is killed
// when the command ends, times out, passes the output cap or its client
// goes away.
package hostexec

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/internal/approval"
	"github.com/airlock-dev/airlock/internal/audit"
)

// Defaults and bounds.
const (
	DefaultTimeout    = 60 * time.Second
	DefaultMaxOutput  = 16 << 20
	DefaultMaxRunning = 4 // commands of one sandbox at once: each is a sandbox of its own

	MaxBody = 64 << 10 // a request's JSON
	MaxArgs = 256      // argv entries
	MaxArg  = 8 << 10  // bytes of one argument

	maxSubject = 1024 // of the canonical string in an audit record (the request record has the whole argv)
	// MaxShown bounds what an approval request shows a human: the command
	// and what it may reach, whole. A request longer than this is denied
	// without asking rather than shown in part.
	MaxShown = MaxBody
)

// Path is where the service answers; Pattern is what the broker mounts.
const (
	Pattern = "/hostexec/"
	Path    = "/hostexec/run"
)

// Config is the policy from config (global and project lists merged by the
// caller).
type Config struct {
	// Rules are entries with grants; the plain lists are regexes over the
	// Canonical command string whose commands get nothing but the
	// workspace. See Policy.Decide.
	Rules                      []Rule
	AutoApprove, Ask, AutoDeny []string
	Timeout                    time.Duration // a run's limit; 0: DefaultTimeout
	MaxOutput                  int64         // bytes of stdout+stderr; 0: DefaultMaxOutput
	MaxRunning                 int           // commands running at once; 0: DefaultMaxRunning
	// AllowCopyMode lets commands run (confined all the same) although the
	// workspace is an overlay or a copy, whose host directory does not hold
	// the sandbox's edits.
	AllowCopyMode bool
}

// Env is the one sandbox a handler serves.
type Env struct {
	Sandbox       string
	Dir           string // the workspace's host directory: commands run there
	WorkspaceMode string // bind, overlay, copy
	// Ask queues a request for a human and blocks until decided (or its
	// context ends); nil means nobody to ask, which denies.
	Ask   func(context.Context, approval.Request) approval.Decision
	Audit func(audit.Record) // nil: not recorded
	// Exe is the airlock binary that starts each command's sandbox; ""
	// is this program.
	Exe string
	// Protected are directories holding airlock's own config and state:
	// no rule may mount them (or a directory holding them) into a
	// command's sandbox.
	Protected []string
}

// Request is the body of POST Path.
type Request struct {
	Argv []string `json:"argv"`
	Dir  string   `json:"dir,omitempty"`
}

// Frame is one line of a run's response: output (Stream and Data) or, last,
// the end (Exit and Reason).
type Frame struct {
	Stream  string `json:"stream,omitempty"` // "stdout" or "stderr"
	Data    []byte `json:"data,omitempty"`   // base64 in JSON
	Exit    *int   `json:"exit,omitempty"`   // the exit code; 128+n for a signal n
	Reason  string `json:"reason,omitempty"` // one of the End reasons
	Message string `json:"message,omitempty"`
}

// End reasons, in the last frame.
const (
	EndExited      = "exited"
	EndSignaled    = "signaled"     // killed by a signal not airlock's
	EndTimeout     = "timeout"      // Config.Timeout passed: its process group was killed
	EndOutputLimit = "output_limit" // Config.MaxOutput reached: killed, output cut there
	EndCanceled    = "canceled"     // the client went away: killed
)

// Refusal is the body of a non-200 answer. Reason is one of the Refused
// reasons.
type Refusal struct {
	Error  string `json:"error"`
	Reason string `json:"reason"`
}

// Refusal reasons (and their statuses).
const (
	RefusedBadRequest = "bad_request"    // 400
	RefusedDenied     = "denied"         // 403
	RefusedNotFound   = "not_found"      // 404: no such command on the host
	RefusedWorkspace  = "workspace_mode" // 409
	RefusedFailed     = "failed"         // 500: it could not be started
	RefusedBusy       = "busy"           // 429: MaxRunning commands are running already
)

// New builds the handler for one sandbox, to be mounted at Pattern on that
// sandbox's broker, so the sandbox is the one whose door the request came
// through.
func New(c Config, env Env) (http.Handler, error) {
	pol, err := NewRules(c.Rules, c.AutoApprove, c.Ask, c.AutoDeny)
	if err != nil {
		return nil, err
	}
	for _, r := range c.Rules {
		if err := checkGrants(r, env.Protected); err != nil {
			return nil, err
		}
	}
	if env.Exe == "" {
		if env.Exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("hostexec: the airlock binary: %w", err)
		}
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxOutput <= 0 {
		c.MaxOutput = DefaultMaxOutput
	}
	if c.MaxRunning <= 0 {
		c.MaxRunning = DefaultMaxRunning
	}
	if env.Dir == "" {
		return nil, errors.New("hostexec: no workspace directory")
	}
	root, err := filepath.EvalSymlinks(env.Dir)
	if err != nil {
		return nil, fmt.Errorf("hostexec: workspace: %w", err)
	}
	if root, err = filepath.Abs(root); err != nil {
		return nil, fmt.Errorf("hostexec: workspace: %w", err)
	}
	h := &handler{cfg: c, env: env, pol: pol, root: root, remembered: map[string]approval.Decision{}, running: make(chan struct{}, c.MaxRunning)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+Path, h.run)
	return mux, nil
}

type handler struct {
	cfg  Config
	env  Env
	pol  *Policy
	root string // env.Dir, symlinks resolved

	seq     atomic.Uint64 // names each command's sandbox
	running chan struct{} // one token per command running

	mu         sync.Mutex
	remembered map[string]approval.Decision // canonical → a human's decision whose scope outlives one request
}

func (h *handler) audit(r audit.Record) {
	if h.env.Audit == nil {
		return
	}
	r.Time, r.Sandbox, r.Kind = time.Now().UTC(), h.env.Sandbox, audit.KindHostExec
	h.env.Audit(r)
}

// workspaceRefusal says why commands cannot run in this workspace mode, or "".
func (h *handler) workspaceRefusal() string {
	switch h.env.WorkspaceMode {
	case "overlay", "copy":
		if !h.cfg.AllowCopyMode {
			return fmt.Sprintf("the workspace is in %s mode: its host directory does not hold the sandbox's edits, so host commands are refused (config hostexec allow_copy_mode allows them)", h.env.WorkspaceMode)
		}
	}
	return ""
}

// workdir resolves rel (slash-separated, relative to the workspace) to a
// host directory inside it: openat2 with RESOLVE_BENEATH (no component,
// symlink or .. may leave the workspace; no magic links) to an fd, and the
// directory that fd names.
func (h *handler) workdir(rel string) (string, error) {
	if rel == "" {
		return h.root, nil
	}
	p := filepath.FromSlash(rel)
	if !filepath.IsLocal(p) {
		return "", fmt.Errorf("dir %q is not inside the workspace", rel)
	}
	return h.workdirBeneath(rel, p)
}

// workdirByPath is workdir where openat2 is missing: symlinks resolved, the
// result checked. A swap after the check moves the command only within
// its own sandbox's walls.
func (h *handler) workdirByPath(rel, p string) (string, error) {
	real, err := filepath.EvalSymlinks(filepath.Join(h.root, p))
	if err != nil {
		return "", fmt.Errorf("dir %q: %w", rel, errors.Unwrap(err))
	}
	if r, err := filepath.Rel(h.root, real); err != nil || !filepath.IsLocal(r) {
		return "", fmt.Errorf("dir %q leads out of the workspace", rel)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("dir %q: %w", rel, errors.Unwrap(err))
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("dir %q is not a directory", rel)
	}
	return real, nil
}

// binary resolves argv0 the way the host would run it: a name with a slash
// relative to dir, any other through the host's PATH.
func binary(argv0, dir string) (string, error) {
	if filepath.Base(argv0) != argv0 || argv0 == "." || argv0 == ".." {
		p := argv0
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		fi, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("%s: not found", argv0)
		}
		if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s: not an executable file", argv0)
		}
		return p, nil
	}
	p, err := lookPath(argv0)
	if err != nil {
		return "", fmt.Errorf("%s: command not found in the host's PATH", argv0)
	}
	return p, nil
}
