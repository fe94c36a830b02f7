// Package engine is the one place a sandbox is assembled, in named steps:
// check spec → prepare backend → open record → prepare workspace → start
// egress → start backend → attach link (see Start); each step adds how to
// undo what it made to a cleanup stack, which undoes a failed start and is
// the sandbox's teardown (Close). The CLI's supervisor and the public
// sandbox API are thin hosts around it. Only the engine imports backends.
package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/internal/asker"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/backend/guestclient"
	"github.com/airlock-dev/airlock/internal/cleanup"
	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/control"
	"github.com/airlock-dev/airlock/internal/egress"
	"github.com/airlock-dev/airlock/internal/gateway"
	"github.com/airlock-dev/airlock/internal/llmusage"
	"github.com/airlock-dev/airlock/internal/otlp"
	"github.com/airlock-dev/airlock/internal/proto"
	"github.com/airlock-dev/airlock/internal/publish"
	"github.com/airlock-dev/airlock/internal/secrets"
	"github.com/airlock-dev/airlock/internal/state"
	"github.com/airlock-dev/airlock/internal/trace"
	"github.com/airlock-dev/airlock/internal/watch"
	"github.com/airlock-dev/airlock/internal/workspace"
)

// Where a sandbox was made: the state dir records it and `airlock ls` shows it.
const (
	OriginCLI = "cli"
	OriginRPC = "rpc"
	OriginAPI = "api"
)

// Spec is everything the engine needs to make a sandbox. It is JSON: a
// detached sandbox's background supervisor reads it back from the state dir.
type Spec struct {
	Config config.Spec `json:"config"`
	Origin string      `json:"origin,omitempty"`
	// Env is the sandbox's environment before the gateway's additions
	// (see config.SandboxEnv).
	Env     []string `json:"env"`
	Command []string `json:"command,omitempty"` // empty: an idle sandbox
	// Workdir is Command's working directory inside; "" is the workspace.
	Workdir  string `json:"workdir,omitempty"`
	TTY      bool   `json:"tty,omitempty"`
	Detached bool   `json:"detached,omitempty"`
	Quiet    bool   `json:"quiet,omitempty"`
	// Keep keeps a foreground sandbox's record and audit log after it ends
	// (airlock get, audit, rm); without it one with nothing left to review
	// leaves nothing behind.
	Keep bool `json:"keep,omitempty"`
	// Branch is --branch's: the workspace is airlock's git worktree of
	// it (recorded for ls, and for rm to remove the worktree).
	Branch string `json:"branch,omitempty"`

	// Inside is where the workspace appears in the sandbox; "" is its host
	// path (Config.Workspace.Path).
	Inside string `json:"inside,omitempty"`
	// Binds show host paths at other paths inside (the API's mounts).
	Binds []backend.Bind `json:"binds,omitempty"`
	// Scratch are empty writable directories inside that live as long as
	// the sandbox (the API's memory mounts).
	Scratch []string `json:"scratch,omitempty"`
	// Hide are more host paths never shown.
	Hide []string `json:"hide,omitempty"`
	// Watch records every file created, written or deleted in a writable
	// mount in the audit stream (kind file).
	Watch bool `json:"watch,omitempty"`
	// HostIDs: started by root, the sandbox keeps host root's identity
	// (see backend.Spec.HostIDs).
	HostIDs bool `json:"host_ids,omitempty"`
}

// Options are what a host gives the engine that cannot be stored.
type Options struct {
	// Stderr hears warnings and progress (nil: nowhere).
	Stderr io.Writer
	// Progress draws the workspace copy's progress, if set.
	Progress workspace.Progress
	// GuestExe is the airlock binary run as the guest; "" is this program.
	GuestExe string
	// Secrets given by value (the API makes them with secrets.New); never
	// written anywhere.
	Secrets []*secrets.Secret
	// Hooks are Go functions the gateway calls on intercepted HTTP.
	Hooks gateway.Hooks
	// OnStop is called when `airlock kill` asks the sandbox to stop.
	OnStop func(why string)
	// Console, if set, is the main command's terminal as airlock attach
	// reaches it (a detached -t sandbox's).
	Console control.Console
	// NobodyToAsk says no surface can answer approvals (a headless run
	// with a prepared decisions file): what it does not cover is denied.
	NobodyToAsk bool
	// Pending is a sandbox Prepared early (see Prepare) to overlap its start
	// with the host's own work; Start owns it.
	Pending backend.Pending
	// WhileSetup, if set, is called once the sandbox is registered, while
	// its guest sets up: time in which Start would only wait. It must not block.
	WhileSetup func()
	// First, if set, is the sandbox's first command (a run's main command):
	// it goes to the backend with the start, so it starts the moment the
	// sandbox is ready; Sandbox.First returns it. It is audited as Exec
	// audits, but before it can run (so its start record has no pid; its
	// exit record has).
	First *Command
}

// Command is a command to run in the sandbox: what ExecLabel takes. As
// Options.First, an empty Req.Env or Req.Dir is the sandbox's own.
type Command struct {
	Label  string // the audit stream's name for it; "" is Req.Argv joined
	Req    *proto.Exec
	Output func(stream uint8, data []byte)
	Files  []*os.File
	// Started, as Options.First only: see backend.Command.
	Started func()
}

// Sandbox is one running sandbox.
type Sandbox struct {
	h        *state.Handle
	spec     Spec
	o        Options
	bspec    *backend.Spec
	be       backend.Backend
	pending  backend.Pending // prepared, until the backend's start takes it
	inst     backend.Instance
	wsMode   string // the workspace mode the backend allows
	wsCfg    workspace.Config
	ws       *workspace.Session
	eg       *egress.Egress
	pub      *publish.Server // published ports; nil without
	ask      *asker.Asker    // its remembered decisions, and its queue if something may ask
	mcp      mcpServers      // the sandbox's MCP servers, policed; nil without
	guestExe string
	log      *audit.Log
	otlp     *otlp.Exporter // the audit also sent to a collector; nil without one
	redact   atomic.Pointer[secrets.Set]
	ctl      *net.UnixListener
	watch    *watch.Watcher
	env      []string
	mode     string // network mode, "" without network
	started  time.Time
	warnings []string

	// While Start runs: the steps' work that waits for the guest's setup
	// (see startBackend), the record not yet written, Start's error.
	whileSetup []setupWork
	unwritten  *state.Record
	startErr   error

	// From Start's end: the cleanup stack it released, and whether it ran.
	undo *cleanup.Stack
	ran  bool

	closeControl  func() // once: closeControlOnce
	closeServices func() // once: closeServicesOnce
	stopOnce      sync.Once
	stopping      atomic.Bool     // Stop has begun: it closes the backend
	oomKilled     bool            // the memory limit killed a process (read by Stop)
	stopped       chan struct{}   // closed once the backend is closed, after Stop
	gone          <-chan struct{} // closed once every process is gone, after Stop
	closeMu       sync.Mutex
	closed, keep  bool  // Close has run, and with what
	dropErr       error // the state dir's removal's, if Close removed it

	first *Command     // Options.First, until Sandbox.First takes it
	caps  backend.Caps // the backend's, as Start found them
}

// Prepare starts preparing a sandbox of spec's backend and limits early (a
// native guest's namespaces come up meanwhile); pass the result to Start
// in Options.Pending, or Close it.
func Prepare(spec *Spec, exe string) (backend.Pending, error) {
	be, err := backendFor(spec.Config.BackendName(), exe, &spec.Config)
	if err != nil {
		return nil, err
	}
	c := *spec
	c.Complete()
	return be.Prepare(context.Background(), &backend.Spec{Limits: limitsOf(&c.Config), HostIDs: spec.HostIDs})
}

// Prune removes what every backend left behind for sandboxes under
// stateRoot that running says are gone.
func Prune(ctx context.Context, stateRoot string, running func(id string) bool, docker bool) ([]string, error) {
	names := []string{config.BackendNative, config.BackendVM}
	if docker {
		names = append(names, config.BackendDocker, config.BackendKubernetes)
	}
	var removed []string
	var errs []error
	for _, n := range names {
		be, err := backendFor(n, "", nil)
		if err != nil {
			return removed, err
		}
		// One backend's engine or cluster out of reach keeps none of the
		// others from being pruned.
		r, err := be.Prune(ctx, stateRoot, running)
		removed = append(removed, r...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return removed, errors.Join(errs...)
}

// Start makes the sandbox spec describes, registered in h, and returns once
// it runs. Its steps run in order, each adding to a cleanup stack how to
// undo what it made; on error the stack runs last-first and nothing is
// left: not in the state dir, not a process. On success the stack is the
// Sandbox's teardown (Close).
func Start(ctx context.Context, h *state.Handle, spec Spec, o Options) (*Sandbox, error) {
	return start(ctx, h, spec, o, nil)
}

// start is Start with be, if not nil, as the backend (the unit tests' fake).
func start(ctx context.Context, h *state.Handle, spec Spec, o Options, be backend.Backend) (*Sandbox, error) {
	spec.Complete()
	s := &Sandbox{h: h, spec: spec, o: o, be: be, pending: o.Pending, stopped: make(chan struct{}), started: time.Now(), guestExe: o.GuestExe}
	s.closeControl, s.closeServices = sync.OnceFunc(s.closeControlOnce), sync.OnceFunc(s.closeServicesOnce)
	var cu cleanup.Stack
	defer cu.Clean()
	// Start owns the state dir entry until it returns: an undone start
	// removes it, reserved or made.
	cu.Add(s.dropEntry)
	for _, st := range s.steps() {
		if err := st.run(ctx, &cu); err != nil {
			s.startErr = fmt.Errorf("engine: %s: %w", st.name, err)
			return nil, s.startErr
		}
	}
	s.undo = cu.Release()
	s.running()
	return s, nil
}

// startStep is one named step of Start.
type startStep struct {
	name string
	run  func(context.Context, *cleanup.Stack) error
}

// steps are Start's steps in their order; each one's error is named.
func (s *Sandbox) steps() []startStep {
	return []startStep{
		{"check spec", s.checkSpec},
		{"prepare backend", s.prepareBackend},
		{"open record", s.openRecord},
		{"prepare workspace", s.prepareWorkspace},
		{"start egress", s.startEgress},
		{"publish ports", s.publishPorts},
		{"start backend", s.startBackend},
		{"attach link", s.attachLink},
	}
}

// checkSpec checks the spec and decides what the backend's capabilities
// allow: the backend, the network mode, the workspace mode and the
// backend's spec. It makes nothing.
func (s *Sandbox) checkSpec(context.Context, *cleanup.Stack) (err error) {
	spec := &s.spec
	if err := spec.Validate(nil); err != nil {
		return err
	}
	if s.be == nil {
		if s.be, err = backendFor(spec.Config.BackendName(), s.guestExe, &spec.Config); err != nil {
			return err
		}
	}
	s.caps = s.be.Caps()
	services := spec.Config.HostExec.Enabled() || spec.Config.MCPServers != nil
	// Saved decisions hold in every sandbox: a saved allow gives it a
	// network for its host, a saved deny wins over any allow.
	if s.ask, err = asker.Open(spec.Config.Workspace.Path, s.record); err != nil {
		return fmt.Errorf("approvals: %w", err)
	}
	if spec.Config.Network.Enabled() || len(s.o.Secrets) > 0 || spec.Config.Approvals.Ask() || services || s.ask.Admits() {
		if s.mode, err = networkMode(spec.Config.Network.Mode, s.caps); err != nil {
			return err
		}
	}
	if err := s.checkPorts(); err != nil {
		return err
	}
	s.wsMode = spec.Config.WorkspaceMode()
	if s.wsMode == config.WorkspaceOverlay && s.caps.NoOverlay != "" {
		s.wsMode = config.WorkspaceCopy
		if !spec.Quiet && s.o.Stderr != nil {
			fmt.Fprintf(s.o.Stderr, "airlock: --workspace-mode overlay: %s\n", s.caps.NoOverlay)
		}
	}
	if s.bspec, err = s.backendSpec(); err != nil {
		return err
	}
	if err := ownDirsOutOfReach(s.bspec, s.wsMode); err != nil {
		return err
	}
	trace.Mark("engine: spec checked")
	return nil
}

// prepareBackend starts preparing the sandbox (a native guest's
// namespaces come up meanwhile), unless the host did (Options.Pending).
func (s *Sandbox) prepareBackend(ctx context.Context, cu *cleanup.Stack) (err error) {
	// Until the backend's start takes it, the prepared sandbox is ours to
	// close (the host's too: Start owns Options.Pending).
	cu.Add(func() {
		if s.pending != nil {
			s.pending.Close()
		}
	})
	if s.pending == nil {
		s.pending, err = s.be.Prepare(ctx, s.bspec)
	}
	return err
}

// recordWaits says whether the state dir entry, the audit stream and a
// bind workspace's session can wait for the guest's setup (see
// openRecord): when nothing before the backend's start audits anything
// (no network) or writes in the entry (no scratch dirs, no run dir, and a
// bind workspace, whose plan needs only its read-only paths).
func (s *Sandbox) recordWaits() bool {
	return s.mode == "" && s.wsMode == config.WorkspaceBind && len(s.spec.Scratch) == 0 && !s.caps.UsesRunDir
}

// openRecord makes the sandbox's state dir entry, if the host only
// reserved it, and opens its audit stream. Where they can wait
// (recordWaits), they are made while the guest sets up instead, not before
// its plan is sent, and the entry is made with its full record: written
// once. Nothing can be audited before Start returns (commands and the
// control socket come after), nor can anyone find the sandbox before its
// entry exists.
func (s *Sandbox) openRecord(_ context.Context, cu *cleanup.Stack) error {
	open := func(rec *state.Record) error {
		if made, err := s.publish(rec); err != nil {
			return err
		} else if made {
			s.unwritten = nil
		}
		cu.Add(s.closeAudit)
		return s.openAudit()
	}
	if s.recordWaits() {
		s.whileSetup = append(s.whileSetup, setupWork{"open record", func() error { return open(s.unwritten) }})
		return nil
	}
	return open(nil)
}

// prepareWorkspace makes the scratch dirs, guards the repository
// (--protect-git) and takes the workspace session's manifest (and the
// copy, or the overlay's layers) before the sandbox starts, shaping the
// backend spec to match. A bind session waits for the guest's setup
// when the record does (its session lives in the entry).
func (s *Sandbox) prepareWorkspace(_ context.Context, cu *cleanup.Stack) (err error) {
	if err := s.makeScratch(); err != nil {
		return err
	}
	if s.wsCfg, err = s.workspaceConfig(s.wsMode); err != nil {
		return err
	}
	s.guardGit()
	prepare := func(progress workspace.Progress) error {
		// An overlay that was mounted leaves a mode-0 dir, which the
		// entry's removal could not remove.
		cu.Add(func() {
			if !s.ran {
				workspace.Release(WorkspaceDir(s.h.Dir()))
			}
		})
		ws, err := s.session(progress)
		if err != nil {
			return err
		}
		s.ws = ws
		trace.Mark("engine: workspace prepared")
		return nil
	}
	if s.recordWaits() {
		s.whileSetup = append(s.whileSetup, setupWork{"prepare workspace", func() error { return prepare(nil) }})
		return nil
	}
	return prepare(s.o.Progress)
}

// guardGit shows --protect-git's guarded paths: the git dir's redirections
// read-only, the git dir and what a commit writes bound onto themselves
// (mountpoints, which cannot be renamed or replaced).
func (s *Sandbox) guardGit() {
	ro, pin := workspace.GitGuard(s.wsCfg)
	if s.bspec.NoDelete {
		// Landlock already stops every rename and removal there; a pin,
		// a writable place of its own, would give them back.
		pin = nil
	}
	src := s.bspec.WorkspaceSource
	if src == "" || src == s.bspec.Workspace {
		s.bspec.RO = append(s.bspec.RO, ro...)
		s.bspec.RW = append(s.bspec.RW, pin...)
		return
	}
	// The workspace is shown at another path: so are its guarded paths
	// (docker takes no binds at other paths: there the exit review alone
	// restores and defuses).
	if s.be.Name() == config.BackendDocker {
		ro, pin = nil, nil
	}
	at := func(p string) string { return s.bspec.Workspace + strings.TrimPrefix(p, src) }
	for _, p := range pin {
		s.bspec.Binds = append(s.bspec.Binds, backend.Bind{Source: p, Target: at(p)})
	}
	for _, p := range ro {
		s.bspec.Binds = append(s.bspec.Binds, backend.Bind{Source: p, Target: at(p), ReadOnly: true})
	}
}

// startEgress starts the gateway pipeline and its door, with what serves
// the sandbox from this process (approvals, host commands, MCP servers),
// and settles the environment every command gets.
func (s *Sandbox) startEgress(_ context.Context, cu *cleanup.Stack) (err error) {
	spec := &s.spec
	s.env = spec.Env
	if s.mode == "" {
		trace.Mark("engine: egress ready")
		return nil
	}
	warn := func(w string) { s.warn(w) }
	set, stop, err := egress.LoadSecrets(spec.Config.Network, s.o.Secrets, warn)
	if err != nil {
		return err
	}
	cu.Add(stop)
	s.redact.Store(set)
	// What serves the sandbox through the gateway closes in its own order
	// (closeServices), whichever of it was made.
	cu.Add(s.closeServices)
	// The queue exists when something may ask: unknown hosts (approvals
	// ask) or a service's escalations (host commands on an ask list).
	var approver gateway.Approver
	if spec.Config.Approvals.Ask() || spec.Config.HostExec.Asks() || spec.Config.MCPServers != nil {
		q := asker.Queue{Sandbox: s.h.ID(), Approvals: spec.Config.Approvals, Nobody: s.o.NobodyToAsk, Writable: s.writable()}
		if err := s.ask.StartQueue(q); err != nil {
			return fmt.Errorf("approvals: %w", err)
		}
		if spec.Config.Approvals.Ask() {
			approver = s.ask
		}
	}
	handlers, err := s.services(s.wsMode)
	if err != nil {
		return fmt.Errorf("services: %w", err)
	}
	h := s.h
	s.eg, err = egress.Start(egress.Config{
		Network: spec.Config.Network, Mode: s.mode, ID: h.ID(), Dir: h.Dir(), BundleDir: filepath.Join(stateRoot(h), BundleDir),
		ProxySocket: gatewaySocket(h.SocketPath()), Secrets: set, Audit: s.log, Hooks: s.o.Hooks, Approver: approver,
		Services: handlers, Budget: spec.Config.Budget,
	})
	if err != nil {
		return err
	}
	// Remembered decisions (the session's file, saved ones) are in force
	// from the first packet, whether or not the sandbox asks.
	if err := s.ask.Enforce(s.eg); err != nil {
		return fmt.Errorf("approvals: %w", err)
	}
	s.bspec.Files = append(s.bspec.Files, s.eg.Files...)
	s.bspec.Relay, s.bspec.Net = s.eg.Relay, s.eg.Net
	s.env = config.MergeEnv(s.env, config.AppendOptions(s.env, s.eg.Env, "JAVA_TOOL_OPTIONS"))
	if len(handlers) > 0 {
		s.env = toolsInside(s.guestExe, s.bspec, s.env)
		s.env = config.MergeEnv(s.env, []string{"AIRLOCK_WORKSPACE=" + s.bspec.Workspace})
	}
	trace.Mark("engine: egress ready")
	return nil
}

// setupWork is a step's work that waits for the guest's setup (see
// startBackend), named as its step.
type setupWork struct {
	name string
	run  func() error
}

// startBackend starts the sandbox. The first command (Options.First) goes
// with the start: all it runs with is settled (the environment, the
// egress). The sandbox is registered while the guest sets up, and what
// must be in place before anything runs inside is readied meanwhile: the
// steps' work that waits for the setup, the control socket, the workspace
// session's readiness, the file watcher, the first command's audit record.
func (s *Sandbox) startBackend(ctx context.Context, cu *cleanup.Stack) error {
	var first *backend.Command
	if c := s.o.First; c != nil {
		if c.Req.Dir == "" {
			c.Req.Dir = s.bspec.Workspace
		}
		if c.Req.Env == nil {
			c.Req.Env = s.env
		}
		if c.Label == "" {
			c.Label = strings.Join(c.Req.Argv, " ")
		}
		s.first, first = c, &backend.Command{Req: c.Req, Output: c.Output, Files: c.Files, Started: c.Started}
	}
	pending := s.pending
	inst, err := pending.Start(ctx, s.bspec, func(cgroups []string) error { return s.register(cu, cgroups) }, first)
	s.pending = nil // Start closes it on its own errors
	if err != nil {
		return err
	}
	s.inst = inst
	cu.Add(s.closeInstance)
	s.warnings = append(s.warnings, inst.Warnings()...)
	trace.Mark("engine: backend started")
	return nil
}

// attachLink attaches the sandbox's network link to the gateway's netstack.
func (s *Sandbox) attachLink(context.Context, *cleanup.Stack) error {
	l := s.inst.Link()
	if l == nil {
		return nil
	}
	if s.eg == nil {
		l.File.Close()
		return nil
	}
	return s.eg.Attach(*l)
}

// running is the end of a start: the workspace's background work, the
// warnings, the control socket served, the start record.
func (s *Sandbox) running() {
	s.ran = true
	s.ws.Background()
	for _, w := range s.warnings {
		s.warn(w)
	}
	go control.Serve(s.ctl, (*controlTarget)(s), s.o.OnStop)
	s.servePorts()
	started := audit.Lifecycle(audit.OpStart, s.be.Name(), "")
	started.Duration = audit.Millis(time.Since(s.started))
	started.Extra = map[string]string{"network": s.mode, "workspace": s.wsMode}
	s.record(started)
	trace.Mark("engine: running")
}

func (s *Sandbox) warn(w string) {
	if !s.spec.Quiet && s.o.Stderr != nil {
		fmt.Fprintf(s.o.Stderr, "airlock: warning: %s\n", w)
	}
}

// networkMode decides which door a sandbox gets: transparent wherever the
// backend can hand back a link, else the proxy.
func networkMode(requested string, caps backend.Caps) (string, error) {
	switch requested {
	case "", config.ModeAuto:
		if caps.NoLink != "" {
			return config.ModeProxy, nil
		}
		return config.ModeTransparent, nil
	case config.ModeTransparent:
		if caps.NoLink != "" {
			return "", fmt.Errorf("--network-mode transparent: %s; use --network-mode proxy (or auto)", caps.NoLink)
		}
		return config.ModeTransparent, nil
	case config.ModeProxy:
		return config.ModeProxy, nil
	}
	return "", fmt.Errorf("--network-mode %q: use auto, transparent or proxy", requested)
}

// LLMUsage is the sandbox's LLM use as its gateway metered it (zero
// without a network). The same totals are in every llm audit record.
func (s *Sandbox) LLMUsage() llmusage.Totals {
	if s.eg == nil {
		return llmusage.Totals{}
	}
	return s.eg.Usage()
}

func limitsOf(c *config.Spec) backend.Limits {
	return backend.Limits{MemoryBytes: c.Limits.MemoryBytes, CPUs: c.Limits.CPUs, Pids: c.Limits.Pids}
}

// backendSpec translates the config into the neutral backend shape.
func (s *Sandbox) backendSpec() (*backend.Spec, error) {
	c := &s.spec.Config
	if c.Workspace.Path == "" || !filepath.IsAbs(c.Workspace.Path) || c.Workspace.Path == "/" {
		return nil, fmt.Errorf("the workspace must be an absolute directory other than /, got %q", c.Workspace.Path)
	}
	hostHome, _ := os.UserHomeDir()
	b := &backend.Spec{
		ID: s.h.ID(), Workspace: c.Workspace.Path, Home: c.Home, HostHome: hostHome,
		RO: c.RO, RW: c.RW, NoDelete: c.Workspace.NoDelete, TmpBytes: c.Limits.TmpBytes, Limits: limitsOf(c),
		Binds: append([]backend.Bind(nil), s.spec.Binds...), Image: c.Image, StateRoot: stateRoot(s.h), RunDir: runDir(s.h.SocketPath()),
		HostIDs: s.spec.HostIDs,
	}
	if s.spec.Inside != "" && s.spec.Inside != c.Workspace.Path {
		b.Workspace, b.WorkspaceSource = s.spec.Inside, c.Workspace.Path
	}
	// airlock's own state and config are never visible inside.
	b.Hide = append(append(b.Hide, s.spec.Hide...), b.StateRoot)
	if g := guestCache(s.guestExe); g != "" && !backend.Within(g, b.StateRoot) {
		b.Hide = append(b.Hide, g) // the guest every later sandbox runs
	}
	if cfg, err := os.UserConfigDir(); err == nil {
		b.Hide = append(b.Hide, filepath.Join(cfg, "airlock"))
	}
	if err := s.hideByPattern(b); err != nil {
		return nil, err
	}
	// A GitHub App's private key mints tokens for every repository the App
	// can reach: wherever it is, the sandbox never sees it; in the workspace
	// (which the sandbox can copy or move) it is refused.
	for _, f := range c.Network.Secrets {
		name, key, ok := secrets.AppKeyFile(f.String())
		if !ok {
			continue
		}
		paths := []string{key}
		if real, err := filepath.EvalSymlinks(key); err == nil {
			paths = append(paths, real)
		}
		for _, p := range paths {
			if backend.Within(p, c.Workspace.Path) {
				return nil, fmt.Errorf("secret %s: the GitHub App's key file %s is in the workspace, where the sandbox could read it; keep it outside (e.g. under ~/.config/airlock, which no sandbox sees)", name, key)
			}
			b.Hide = append(b.Hide, p)
		}
	}
	return b, nil
}

// hideByPattern adds to b.Hide what filesystem.hide matches now: absolute
// paths and globs on the host, and the workspace's matching files and
// directories (see workspace.FindHidden), at their paths inside. What
// matches later is the workspace session's to leave alone (Config.Hide).
func (s *Sandbox) hideByPattern(b *backend.Spec) error {
	c := &s.spec.Config
	rel, abs, err := hidePlan(c)
	if err != nil {
		return fmt.Errorf("filesystem.hide: %w", err)
	}
	for _, p := range abs {
		if !strings.ContainsAny(p, "*?[") {
			b.Hide = append(b.Hide, p)
			continue
		}
		m, _ := filepath.Glob(p) // checked by hidePlan
		if len(m) > workspace.MaxHidden {
			return fmt.Errorf("filesystem.hide: %q matches more than %d paths: hide the directories that hold them instead", p, workspace.MaxHidden)
		}
		b.Hide = append(b.Hide, m...)
	}
	h, err := workspace.NewHider(rel)
	if err != nil {
		return fmt.Errorf("filesystem.hide: %w", err)
	}
	cache := ""
	if b.StateRoot != "" && len(rel) > 0 {
		sum := sha256.Sum256([]byte(c.Workspace.Path))
		cache = filepath.Join(b.StateRoot, "cache", "hide-"+hex.EncodeToString(sum[:8]))
	}
	found, err := workspace.FindHidden(c.Workspace.Path, h, cache)
	if err != nil {
		return err
	}
	for _, p := range found {
		if b.WorkspaceSource != "" && backend.Within(p, c.Workspace.Path) {
			p = filepath.Join(b.Workspace, p[len(c.Workspace.Path):])
		}
		b.Hide = append(b.Hide, p)
	}
	trace.Mark("engine: hidden paths found")
	return nil
}

// makeScratch makes the scratch dirs under the sandbox's state dir.
func (s *Sandbox) makeScratch() error {
	for i, target := range s.spec.Scratch {
		host := filepath.Join(s.h.Dir(), fmt.Sprintf("scratch%d", i))
		if err := os.Mkdir(host, 0o755); err != nil {
			return fmt.Errorf("scratch %s: %w", target, err)
		}
		s.bspec.Binds = append(s.bspec.Binds, backend.Bind{Source: host, Target: target})
	}
	return nil
}

// workspaceDirName is the workspace session's directory in a sandbox's
// state dir (see WorkspaceDir).
const workspaceDirName = "workspace"

// WorkspaceDir is where a sandbox's workspace session lives in its state dir.
func WorkspaceDir(sandboxDir string) string { return filepath.Join(sandboxDir, workspaceDirName) }

// UndoDir is the undo store under a state root (workspace.UndoStore).
func UndoDir(stateRoot string) string { return filepath.Join(stateRoot, "undo") }

// workspaceConfig is the workspace session's config for mode.
func (s *Sandbox) workspaceConfig(mode string) (workspace.Config, error) {
	w := s.spec.Config.Workspace
	cfg := workspace.Config{
		Mode: workspace.Mode(mode), Root: w.Path, Exclude: w.Exclude, ProtectGit: w.ProtectGit && mode == config.WorkspaceBind,
	}
	hide, _, err := hidePlan(&s.spec.Config)
	if err != nil {
		return cfg, err
	}
	cfg.Hide = hide
	// What the sandbox never sees is neither hashed, copied nor applied.
	for _, p := range backend.Hidden(s.bspec, os.Getenv) {
		if p != cfg.Root && strings.HasPrefix(p, cfg.Root+"/") {
			cfg.Skip = append(cfg.Skip, p)
		}
	}
	if root := s.bspec.StateRoot; root != "" {
		sum := sha256.Sum256([]byte(cfg.Root))
		cfg.CacheFile = filepath.Join(root, "cache", "hashes-"+hex.EncodeToString(sum[:8]))
		if mode != config.WorkspaceBind && strings.HasPrefix(root+"/", cfg.Root+"/") {
			return cfg, fmt.Errorf("the state dir %s lies inside the workspace, which %s mode cannot layer over: set AIRLOCK_STATE_DIR to a directory outside it", root, mode)
		}
		if mode == config.WorkspaceBind {
			// What the run overwrites and deletes is kept for airlock undo.
			cfg.UndoDir, cfg.UndoMaxBytes, cfg.UndoID = UndoDir(root), w.UndoBytes, s.h.ID()
		}
	}
	return cfg, nil
}

// session takes the workspace session's manifest (and the copy, or the
// overlay's layers) and shapes the backend spec to match; a bind
// session's read-only paths are guardGit's (workspace.GitGuard).
func (s *Sandbox) session(progress workspace.Progress) (*workspace.Session, error) {
	cfg := s.wsCfg
	if cfg.Mode != workspace.Copy {
		progress = nil
	}
	ws, err := workspace.Prepare(WorkspaceDir(s.h.Dir()), cfg, progress)
	if err != nil {
		return nil, err
	}
	switch cfg.Mode {
	case workspace.Overlay:
		s.bspec.Overlay = &backend.Overlay{Upper: ws.UpperDir(), Work: ws.WorkDir()}
	case workspace.Copy:
		s.bspec.WorkspaceSource = ws.CopyDir()
	}
	return ws, nil
}

// registration is the sandbox's record in the state dir.
func (s *Sandbox) registration(cgroups []string) (state.Record, error) {
	config, err := json.Marshal(s.spec)
	if err != nil {
		return state.Record{}, err
	}
	c := &s.spec.Config
	return state.Record{
		ID: s.h.ID(), Name: s.h.Name(), CreatedAt: time.Now().UTC(), PID: os.Getpid(), Backend: c.BackendName(),
		Workspace: c.Workspace.Path, Command: s.spec.Command, Detached: s.spec.Detached, Config: config,
		Cgroups: cgroups, Origin: s.spec.Origin, Branch: s.spec.Branch, Ports: s.recordedPorts(),
	}, nil
}

// register is what the backend calls while the sandbox sets up: the
// steps' work that waits for the setup runs, the sandbox is recorded in
// the state dir as running, its control socket opens, and what must be
// ready before anything runs inside is readied.
func (s *Sandbox) register(cu *cleanup.Stack, cgroups []string) error {
	rec, err := s.registration(cgroups)
	if err != nil {
		return err
	}
	s.unwritten = &rec
	for _, w := range s.whileSetup {
		if err := w.run(); err != nil {
			return fmt.Errorf("%s: %w", w.name, err)
		}
	}
	if s.unwritten != nil {
		if err := s.h.WriteRecord(*s.unwritten); err != nil {
			return err
		}
	}
	sock := s.h.SocketPath()
	os.Remove(sock)
	cu.Add(s.closeControl)
	if s.ctl, err = net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"}); err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	// Running from here, not once the guest is ready: the write then costs
	// the start nothing. Until Serve, a client's connection waits in the
	// socket's backlog; a start that fails removes the directory.
	if err := s.h.SetStatus(state.Status{State: state.Running}); err != nil {
		return err
	}
	if s.o.WhileSetup != nil {
		s.o.WhileSetup()
	}
	if err := s.ws.Ready(); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	if s.spec.Watch {
		if s.watch, err = watch.New(s.watched(), s.recordFile); err != nil {
			s.warnings = append(s.warnings, "no file events: "+err.Error())
		}
		if s.watch != nil {
			cu.Add(s.watch.Close)
		}
	}
	if c := s.first; c != nil {
		r := audit.Exec(c.Req.Argv)
		r.Subject = c.Label
		s.record(r)
		// Its start record is written: an undone start says it did not.
		cu.Add(func() {
			if !s.ran {
				s.recordNotStarted(c, s.startErr)
			}
		})
	}
	return nil
}

// publish makes the sandbox's state dir entry, with rec for its record
// (nil: a first one), if the host only reserved it (state.Store.Reserve):
// before anything is written there, and before the sandbox runs anything,
// as a host that made it itself would have. It says whether it did.
func (s *Sandbox) publish(rec *state.Record) (bool, error) {
	if s.h.Published() {
		return false, nil
	}
	if err := s.h.Publish(rec); err != nil {
		return false, fmt.Errorf("state: %w", err)
	}
	trace.Mark("engine: state dir entry made")
	return true, nil
}

// openAudit opens the audit stream, every record of this sandbox, redacted
// with its secrets once they are known, and records the sandbox's creation.
func (s *Sandbox) openAudit() error {
	bounds := audit.Options{MaxBytes: s.spec.Config.Audit.MaxBytes, Keep: s.spec.Config.Audit.Keep}
	log, err := audit.OpenWith(filepath.Join(s.h.Dir(), "audit.jsonl"), s.h.ID(), s.redactString, bounds)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	s.log = log
	// The host's variables, read here on the host: never the sandbox's.
	if cfg, ok, err := otlp.Resolve(s.spec.Config.Audit.OTLP, os.Getenv); err != nil {
		s.warn(err.Error())
	} else if ok {
		cfg.SandboxID, cfg.Name = s.h.ID(), s.h.Name()
		exp, err := otlp.New(cfg, s.warn, s.record)
		if err != nil {
			s.warn(err.Error())
		} else {
			s.otlp = exp
			log.AddSink(exp)
		}
	}
	created := audit.Lifecycle(audit.OpCreate, s.be.Name(), "")
	created.Extra = map[string]string{"origin": s.spec.Origin}
	s.record(created)
	trace.Mark("engine: audit opened")
	return nil
}

func (s *Sandbox) redactString(v string) string {
	if set := s.redact.Load(); set != nil {
		return set.RedactString(v)
	}
	return v
}

func (s *Sandbox) record(r audit.Record) {
	if s.log != nil {
		s.log.Write(r)
	}
}

func (s *Sandbox) recordFile(op, path string, size int64) {
	r := audit.File(op, path)
	r.BytesOut = size
	s.record(r)
}

// watched are the writable mounts' host dirs and where they are inside.
func (s *Sandbox) watched() []watch.Mount {
	inside := s.bspec.Workspace
	host := s.spec.Config.Workspace.Path
	switch {
	case s.bspec.Overlay != nil:
		host = s.bspec.Overlay.Upper
	case s.bspec.WorkspaceSource != "":
		host = s.bspec.WorkspaceSource
	}
	out := []watch.Mount{{Host: host, Inside: inside}}
	for _, b := range s.bspec.Binds {
		if !b.ReadOnly && b.Source != "" {
			out = append(out, watch.Mount{Host: b.Source, Inside: b.Target})
		}
	}
	return out
}

// ID is the sandbox's id.
func (s *Sandbox) ID() string { return s.h.ID() }

// Dir is the sandbox's private state dir.
func (s *Sandbox) Dir() string { return s.h.Dir() }

// Env is the environment every command gets (secrets as placeholders).
func (s *Sandbox) Env() []string { return s.env }

// Workspace is where the workspace is inside.
func (s *Sandbox) Workspace() string { return s.bspec.Workspace }

// NetworkMode is the door the sandbox's traffic takes; "" without network.
func (s *Sandbox) NetworkMode() string { return s.mode }

// Limits are the sandbox's limits, defaults filled in.
func (s *Sandbox) Limits() backend.Limits { return s.bspec.Limits }

// Warnings are what is not enforced for this sandbox.
func (s *Sandbox) Warnings() []string { return s.warnings }

// Audit is the sandbox's audit stream; Subscribe for live records.
func (s *Sandbox) Audit() *audit.Log { return s.log }

// Workspace session, for review once the sandbox has stopped.
func (s *Sandbox) Session() *workspace.Session { return s.ws }

// GuestPID is the guest agent's pid on the host (0 if unknown).
func (s *Sandbox) GuestPID() int { return s.inst.GuestPID() }

// Done is closed when the guest is gone.
func (s *Sandbox) Done() <-chan struct{} { return s.inst.Done() }

// Process is a command running in the sandbox; its Wait records the exit.
type Process struct {
	*guestclient.Process
	s     *Sandbox
	argv  []string
	label string
	start time.Time
	once  sync.Once
}

// Wait waits for the command and records its exit in the audit stream.
func (p *Process) Wait() (*proto.Exit, error) {
	e, err := p.Process.Wait()
	p.once.Do(func() {
		var r audit.Record
		if err != nil {
			r = audit.Exec(p.argv)
			r.Decision, r.Reason, r.Duration = audit.Error, err.Error(), audit.Millis(time.Since(p.start))
		} else {
			r = audit.ExecExit(p.argv, e.Code, time.Since(p.start))
			r.Reason = e.Reason
		}
		r.Subject, r.Extra = p.label, map[string]string{"pid": fmt.Sprint(p.PID)}
		p.s.record(r)
	})
	return e, err
}

// Exec starts req in the sandbox (see guestclient.Client.Exec) and records
// it in the audit stream. An empty env or dir means the sandbox's own.
func (s *Sandbox) Exec(req *proto.Exec, output func(stream uint8, data []byte), files ...*os.File) (*Process, error) {
	return s.ExecLabel(strings.Join(req.Argv, " "), req, output, files...)
}

// ExecLabel is Exec with the command recorded as label (the shell command
// a caller gave, rather than /bin/sh -c and it).
func (s *Sandbox) ExecLabel(label string, req *proto.Exec, output func(stream uint8, data []byte), files ...*os.File) (*Process, error) {
	if req.Dir == "" {
		req.Dir = s.bspec.Workspace
	}
	// Only the host's own main command (Options.First) ends the sandbox:
	// not a control client's exec, which would end it under its supervisor.
	req.Last = false
	p, err := s.inst.Exec(req, output, files...)
	if err != nil {
		return nil, err
	}
	r := audit.Exec(req.Argv)
	r.Subject, r.Extra = label, map[string]string{"pid": fmt.Sprint(p.PID)}
	s.record(r)
	return &Process{Process: p, s: s, argv: req.Argv, label: label, start: time.Now()}, nil
}

// recordNotStarted closes the first command's start record, written before
// it could run, with why it did not.
func (s *Sandbox) recordNotStarted(c *Command, err error) {
	r := audit.Exec(c.Req.Argv)
	r.Subject, r.Decision, r.Reason = c.Label, audit.Error, err.Error()
	s.record(r)
}

// First waits for the first command (Options.First) to start and returns
// it as Exec would have; its Wait records its exit. Call it once.
func (s *Sandbox) First() (*Process, error) {
	c := s.first
	if c == nil {
		return nil, errors.New("engine: the sandbox was given no first command")
	}
	s.first = nil
	p, err := s.inst.First()
	if err != nil {
		s.recordNotStarted(c, err)
		return nil, err
	}
	return &Process{Process: p, s: s, argv: c.Req.Argv, label: c.Label, start: time.Now()}, nil
}

// Call sends one file request to the guest.
func (s *Sandbox) Call(ctx context.Context, m *proto.Msg) (*proto.Msg, error) {
	return s.inst.Call(ctx, m)
}

// Stop ends every process in the sandbox and returns once they are gone,
// so nothing can change the workspace while it is reviewed; whether the
// memory limit killed a process is reported. The rest (cgroups, container)
// is removed by Close, which may overlap the review. What serves the
// sandbox from this process (control socket, approvals, MCP servers, the
// gateway) needs no process gone: it closes while the kernel tears the
// sandbox down (a millisecond and more), instead of after.
//
// leaving says the host will Close(false) unless the memory limit killed a
// process or the review finds changes to keep: a bind sandbox's review
// writes nothing that stays, so it then leaves the state dir at once
// (nobody finds it any more) and its directory is deleted, but the
// workspace session, while the processes end, instead of after the
// review. Calls after the first only wait.
func (s *Sandbox) Stop(leaving bool) (oomKilled bool) {
	s.stopOnce.Do(func() {
		// The kill first: the kernel's teardown of the sandbox (a millisecond
		// and more) then overlaps all that follows, and nothing that follows
		// needs its processes. Whether the memory limit killed a process is
		// read after: a kill is no OOM kill.
		if k, ok := s.inst.(backend.Killer); ok {
			k.Kill()
		}
		s.oomKilled = s.inst.OOMKilled()
		s.stopping.Store(true)
		s.watch.Close()
		closed := make(chan struct{})
		go func() { s.inst.Close(); close(closed) }()
		go func() { s.closeControl(); s.closeServices() }()
		s.gone = closed
		if s.caps.ReapedWhenDone {
			s.gone = s.inst.Done()
		}
		go func() { <-closed; close(s.stopped) }()
		if leaving && !s.oomKilled && s.ws.Mode() == workspace.Bind {
			s.forget()
		}
	})
	<-s.gone
	return s.oomKilled
}

// forget takes the sandbox out of the state dir and deletes what its
// directory holds but the workspace session, which goes on where its
// directory now is (see Stop's leaving).
func (s *Sandbox) forget() error {
	return s.ws.Move(func() (string, error) {
		if err := s.h.Unlist(workspaceDirName); err != nil {
			return "", err
		}
		return WorkspaceDir(s.h.Dir()), nil
	})
}

// Close stops the sandbox (see Stop) and tears it down: Start's cleanup
// stack, last-first (the file watcher, the control socket, the services
// and the gateway, the audit stream), while the backend removes what is
// left of it (cgroups, container). keep keeps the state dir, for the host
// to record the end in and Release; without it the state dir goes too,
// while the backend still removes the cgroups, which it does not need (a
// crash between the two leaves groups that prune finds by their dead
// owner's pid). When Close returns, nothing of the sandbox runs. Calls
// after the first do nothing.
func (s *Sandbox) Close(keep bool) error {
	s.Stop(false)
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if !s.closed {
		s.closed, s.keep = true, keep
		s.undo.Clean()
		<-s.stopped
	}
	return s.dropErr
}

// dropEntry is the first undo of a start: an undone start leaves no state
// dir entry, reserved or made; a sandbox that ran leaves it to the host
// (Close(true)), or removes it (its workspace session's directory, made
// with MkdirAll, may stay, emptied, for the next sandbox: see
// state.Handle.Remove).
func (s *Sandbox) dropEntry() {
	switch {
	case !s.ran:
		s.h.Remove()
	case !s.keep:
		s.dropErr = s.h.Remove(workspaceDirName)
	}
}

// closeInstance closes the backend's sandbox where Stop did not.
func (s *Sandbox) closeInstance() {
	if !s.stopping.Load() {
		s.inst.Close()
	}
}

// closeServicesOnce closes, in this order, what serves the sandbox through
// the gateway: the MCP servers, the saved decisions' watch and the
// approval queue, whose waiting requests then end, and last the gateway,
// whose in-flight requests wait on them.
func (s *Sandbox) closeServicesOnce() {
	s.pub.Close() // first: its connections' records go to the audit stream the rest may close
	if s.mcp != nil {
		s.mcp.Close()
	}
	s.ask.Close()
	if s.eg != nil {
		s.eg.Close()
	}
}

// closeControlOnce closes the control socket: no new requests.
func (s *Sandbox) closeControlOnce() {
	if s.ctl != nil {
		s.ctl.Close()
		os.Remove(s.h.SocketPath())
	}
}

// writable are the host paths the sandbox can write.
func (s *Sandbox) writable() []string {
	c := s.spec.Config
	out := append([]string{c.Workspace.Path}, c.RW...)
	for _, b := range s.spec.Binds {
		if !b.ReadOnly && b.Source != "" {
			out = append(out, b.Source)
		}
	}
	return out
}

// Approvals is the sandbox's approval queue, or nil when it asks nobody.
func (s *Sandbox) Approvals() control.Approvals { return s.ask.Control() }

func (t *controlTarget) Approvals() control.Approvals { return (*Sandbox)(t).Approvals() }

func (t *controlTarget) Console() control.Console { return t.o.Console }

// closeAudit records the sandbox's end and closes the audit stream.
func (s *Sandbox) closeAudit() {
	if s.log != nil {
		stopped := audit.Lifecycle(audit.OpStop, s.be.Name(), "")
		stopped.Duration = audit.Millis(time.Since(s.started))
		s.record(stopped)
		if s.otlp != nil {
			s.otlp.Close() // bounded: a collector that is down or slow holds the end a few seconds at most
		}
		s.log.Close()
	}
}

// RecordCrash notes in the audit stream that the sandbox ended on its own.
func (s *Sandbox) RecordCrash(why string) {
	s.record(audit.Lifecycle(audit.OpCrash, s.be.Name(), why))
}

// RecordWorkspace notes a review's outcome in the audit stream.
func (s *Sandbox) RecordWorkspace(outcome string, n workspace.Counts) {
	r := audit.Workspace(audit.OpReview, outcome, n.Created, n.Modified, n.Deleted)
	r.Path = s.spec.Config.Workspace.Path
	s.record(r)
}

// gatewaySocket is where the gateway's front door listens: beside the
// control socket under a name no longer than its, so it fits sun_path
// (108 bytes) wherever the control socket does.
func gatewaySocket(ctl string) string {
	if dir, base := filepath.Split(ctl); base == "ctl.sock" {
		return dir + "gw.sock"
	}
	return strings.TrimSuffix(ctl, ".sock") + ".gw"
}

// BundleDir is where, under the state root, the CA bundles sandboxes share
// are (one file per CA and system roots; see ca.BundleFile).
const BundleDir = "ca-bundles"

// stateRoot is the store a sandbox's directory (ROOT/sandboxes/ID) is in.
func stateRoot(h *state.Handle) string { return filepath.Dir(filepath.Dir(h.Dir())) }

// runDir holds a container's control socket, beside the supervisor's own
// under a path no longer than it (so it fits sun_path wherever that does).
func runDir(ctl string) string {
	if dir, base := filepath.Split(ctl); base == "ctl.sock" {
		return dir + "g"
	}
	return strings.TrimSuffix(ctl, ".sock") + ".g"
}

// controlTarget is the sandbox as the control socket serves it.
type controlTarget Sandbox

func (t *controlTarget) Exec(req *proto.Exec, output func(uint8, []byte), files ...*os.File) (control.Process, error) {
	s := (*Sandbox)(t)
	req.Env = config.MergeEnv(s.env, req.Env)
	return s.Exec(req, output, files...)
}

func (t *controlTarget) Call(ctx context.Context, m *proto.Msg) (*proto.Msg, error) {
	return (*Sandbox)(t).Call(ctx, m)
}

// Started is the command's pid (0 if it never started) and its pty, if any.
func (p *Process) Started() (int, *os.File) { return p.PID, p.PTY }
