package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/internal/approval"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/backend/guestclient"
	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/engine"
	"github.com/airlock-dev/airlock/internal/proto"
	"github.com/airlock-dev/airlock/internal/secrets"
	"github.com/airlock-dev/airlock/internal/state"
	"github.com/airlock-dev/airlock/internal/workspace"
)

// DefaultWorkspace is where the workspace is when the config names none.
const DefaultWorkspace = "/workspace"

// eventBuffer is how many events Events holds for a slow reader before it
// misses some (Dropped counts them): a sandbox never waits for its client.
const eventBuffer = 1024

// GuestBinary is the program run as each sandbox's PID 1: an airlock
// binary, or "" for this program, whose main must then call Init first
// (a native sandbox runs the lean guest instead where this build embeds
// one: see internal/guestbin).
var GuestBinary string

// Init runs this program as a sandbox's guest agent when it was started as
// one, and never returns then; otherwise it returns at once. Call it first
// in main when GuestBinary is "" (the sandbox re-executes this program).
func Init() {
	if len(os.Args) > 1 && os.Args[1] == "guest" {
		guestMain()
	}
}

// Sandbox is one sandbox running in this process, made by the same engine
// as `airlock run` and registered in the same state dir: `airlock ls`,
// `get`, `audit`, `kill` and workspace review work on it. Its methods are
// safe for concurrent use.
type Sandbox struct {
	id        string
	env       []string
	result    CreateResult
	timeout   time.Duration // default per-command limit
	workspace string
	h         *state.Handle
	sb        *engine.Sandbox
	onEvent   func(Event)

	evMu     sync.Mutex
	events   chan Event
	evClosed bool
	dropped  atomic.Uint64

	stopCtx   func() bool
	closeOnce sync.Once
	closed    chan struct{}
	wg        sync.WaitGroup // event pump
}

// Create starts a sandbox shaped by c. It ends when Close is called or ctx
// is done, whichever is first; everything it made goes with it, except
// overlay changes not yet reviewed (airlock diff ID, apply, discard).
func Create(ctx context.Context, c *Config) (_ *Sandbox, err error) {
	if c == nil {
		c = &Config{}
	}
	p, err := plan(c)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, &Error{Kind: KindCanceled, Message: err.Error()}
	}
	s := &Sandbox{timeout: p.timeout, workspace: p.workspace, onEvent: c.OnEvent,
		events: make(chan Event, eventBuffer), closed: make(chan struct{})}
	fail := func(kind string, err error) (*Sandbox, error) {
		s.Close()
		var e *Error
		if errors.As(err, &e) {
			return nil, e
		}
		return nil, &Error{Kind: kind, Message: err.Error()}
	}
	// Empty cgroups of guests whose owner was killed outright.
	sweepStaleCgroups()
	root, err := state.Root()
	if err != nil {
		return fail(KindStart, err)
	}
	store, err := state.Open(root)
	if err != nil {
		return fail(KindStart, err)
	}
	if s.h, err = store.Create(""); err != nil {
		return fail(KindStart, err)
	}
	s.id = s.h.ID()
	if err := p.materialize(s.h.Dir()); err != nil {
		s.h.Remove()
		return fail(KindStart, err)
	}
	hostHome, _ := os.UserHomeDir()
	env, _, err := config.SandboxEnv(nil, backend.SandboxHome(hostHome), s.id, nil)
	if err != nil {
		s.h.Remove()
		return fail(KindStart, err)
	}
	placeholders := map[string]string{}
	for _, sec := range p.secrets {
		placeholders[sec.Name] = sec.Placeholder
	}
	var user []string
	for _, k := range sortedKeys(c.Env) {
		v := os.Expand(c.Env[k], func(name string) string {
			if ph, ok := placeholders[name]; ok {
				return ph
			}
			return "${" + name + "}"
		})
		user = append(user, k+"="+v)
	}
	p.spec.Env = config.MergeEnv(env, user)
	p.spec.Origin = c.Origin
	if p.spec.Origin == "" {
		p.spec.Origin = engine.OriginAPI
	}
	s.sb, err = engine.Start(ctx, s.h, p.spec, engine.Options{
		GuestExe: GuestBinary, Secrets: p.secrets, Hooks: p.hooks,
		OnStop: func(string) { go s.Close() },
	})
	if err != nil { // the engine removed the state dir
		return fail(KindStart, err)
	}
	// Events are the audit stream's records: the same as airlock audit -f.
	recs, cancel := s.sb.Audit().Subscribe(eventBuffer)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel()
		for r := range recs {
			if e, ok := eventOf(r); ok {
				s.emit(e)
			}
		}
	}()
	s.env = s.sb.Env()
	s.result.ID, s.result.Workspace, s.result.Network = s.id, s.workspace, s.sb.NetworkMode()
	s.result.Env = map[string]string{}
	for _, kv := range s.env {
		k, v, _ := strings.Cut(kv, "=")
		s.result.Env[k] = v
	}
	s.result.Warnings = append(s.result.Warnings, s.sb.Warnings()...)
	if c.Approver != nil && s.sb.Approvals() != nil {
		s.answer(c.Approver)
	}
	s.stopCtx = context.AfterFunc(ctx, func() { s.Close() })
	go func() {
		select {
		case <-s.sb.Done(): // the guest died: nothing more can run
			s.Close()
		case <-s.closed:
		}
	}()
	return s, nil
}

// ID is the sandbox's id.
func (s *Sandbox) ID() string { return s.id }

// Info is what create returns: the env commands see, the network mode.
func (s *Sandbox) Info() CreateResult { return s.result }

// Env is the environment every command sees (secrets as placeholders).
func (s *Sandbox) Env() map[string]string { return s.result.Env }

// Events delivers every event until the sandbox is closed. A reader that
// falls more than a thousand events behind misses some (see Dropped).
func (s *Sandbox) Events() <-chan Event { return s.events }

// Dropped counts events Events missed because nobody read them in time.
func (s *Sandbox) Dropped() uint64 { return s.dropped.Load() }

func (s *Sandbox) emit(e Event) {
	if e.Timestamp == 0 {
		e.Timestamp = time.Now().Unix()
	}
	if s.onEvent != nil {
		s.onEvent(e)
	}
	s.evMu.Lock()
	defer s.evMu.Unlock()
	if s.evClosed {
		return
	}
	select {
	case s.events <- e:
	default:
		s.dropped.Add(1)
	}
}

// Exec runs command with /bin/sh -c in the workspace and returns its result.
func (s *Sandbox) Exec(command string) (*ExecResult, error) {
	return s.ExecContext(context.Background(), ExecRequest{Command: command})
}

// ExecContext runs req and collects its output (up to MaxOutput a stream).
// Canceling ctx kills the command.
func (s *Sandbox) ExecContext(ctx context.Context, req ExecRequest) (*ExecResult, error) {
	var out, errb capped
	res, err := s.ExecStream(ctx, req, func(stream int, b []byte) {
		if stream == Stderr {
			errb.write(b)
		} else {
			out.write(b)
		}
	})
	if err != nil {
		return nil, err
	}
	res.Stdout, res.Stderr = string(out.b), string(errb.b)
	res.Truncated = out.over || errb.over
	return res, nil
}

type capped struct {
	b    []byte
	over bool
}

func (c *capped) write(b []byte) {
	if n := MaxOutput - len(c.b); n < len(b) {
		b, c.over = b[:max(n, 0)], true
	}
	c.b = append(c.b, b...)
}

// ExecStream runs req and hands its output to output (stream Stdout or
// Stderr) as it arrives, from one goroutine; the result has no output.
func (s *Sandbox) ExecStream(ctx context.Context, req ExecRequest, output func(stream int, data []byte)) (*ExecResult, error) {
	argv := req.Args
	if len(argv) == 0 {
		if req.Command == "" {
			return nil, errorf(KindInvalidParams, "exec: command is empty")
		}
		argv = []string{"/bin/sh", "-c", req.Command}
	}
	env := s.env
	if len(req.Env) > 0 {
		var extra []string
		for _, k := range sortedKeys(req.Env) {
			if k == "" || strings.ContainsAny(k, "=\x00") || strings.Contains(req.Env[k], "\x00") {
				return nil, errorf(KindInvalidParams, "exec: env %q: a name without '=' and no NUL bytes", k)
			}
			extra = append(extra, k+"="+req.Env[k])
		}
		env = config.MergeEnv(env, extra)
	}
	for _, a := range argv {
		if strings.Contains(a, "\x00") {
			return nil, errorf(KindInvalidParams, "exec: the command contains a NUL byte")
		}
	}
	dir := req.WorkingDir
	if dir == "" {
		dir = s.workspace
	} else if !path.IsAbs(dir) {
		dir = path.Join(s.workspace, dir)
	}
	timeout := s.timeout
	if req.TimeoutMS > 0 {
		timeout = time.Duration(req.TimeoutMS) * time.Millisecond
	}
	label := req.Command
	if label == "" {
		label = strings.Join(argv, " ")
	}
	start := time.Now()
	p, err := s.sb.ExecLabel(label, &proto.Exec{Argv: argv, Env: env, Dir: dir, Stdio: proto.StdioStream, TimeoutMS: timeout.Milliseconds()},
		func(stream uint8, data []byte) {
			if output != nil {
				output(int(stream), data)
			}
		})
	if err != nil {
		return nil, s.guestErr(KindExec, err)
	}
	if p.PID != 0 {
		if len(req.Stdin) > 0 {
			go func() {
				p.Write(req.Stdin)
				p.CloseStdin()
			}()
		} else {
			p.CloseStdin()
		}
	}
	stop := context.AfterFunc(ctx, func() { p.Signal(syscall.SIGKILL) })
	defer stop()
	e, err := p.Wait()
	if err != nil {
		return nil, s.guestErr(KindExec, err)
	}
	res := &ExecResult{ExitCode: e.Code, DurationMS: time.Since(start).Milliseconds(), Reason: e.Reason}
	if ctx.Err() != nil && res.Reason == "" {
		res.Reason = "canceled: " + ctx.Err().Error()
	}
	return res, nil
}

// WriteFile writes content to path inside with mode 0644.
func (s *Sandbox) WriteFile(path string, content []byte) error {
	return s.WriteFileContext(context.Background(), path, content, 0)
}

// ReadFile returns the contents of path inside.
func (s *Sandbox) ReadFile(path string) ([]byte, error) {
	return s.ReadFileContext(context.Background(), path)
}

// ListFiles lists a directory inside.
func (s *Sandbox) ListFiles(path string) ([]FileInfo, error) {
	return s.ListFilesContext(context.Background(), path)
}

// WriteFileContext writes data to path inside (relative paths start at the
// workspace), creating missing parent directories. Mode 0 means 0644.
func (s *Sandbox) WriteFileContext(ctx context.Context, name string, data []byte, mode fs.FileMode) error {
	if len(data) > MaxFile {
		return errorf(KindTooLarge, "write_file %s: %d bytes, over the limit of %d", name, len(data), MaxFile)
	}
	p, err := s.path(name)
	if err != nil {
		return err
	}
	m := &proto.Msg{Op: proto.OpWriteFile, Path: p, Data: data, Mode: uint32(mode.Perm())}
	_, err = s.sb.Call(ctx, m)
	var pe *proto.Error
	if errors.As(err, &pe) && pe.Errno == int(syscall.ENOENT) {
		if _, merr := s.sb.Call(ctx, &proto.Msg{Op: proto.OpMkdir, Path: path.Dir(p), Mode: 0o755}); merr == nil {
			_, err = s.sb.Call(ctx, m)
		}
	}
	if err != nil {
		return s.fileErr("write_file", name, err)
	}
	return nil
}

// ReadFileContext returns the contents of path inside (up to MaxFile bytes).
func (s *Sandbox) ReadFileContext(ctx context.Context, name string) ([]byte, error) {
	p, err := s.path(name)
	if err != nil {
		return nil, err
	}
	r, err := s.sb.Call(ctx, &proto.Msg{Op: proto.OpReadFile, Path: p})
	if err != nil {
		return nil, s.fileErr("read_file", name, err)
	}
	if r.Data == nil {
		return []byte{}, nil
	}
	return r.Data, nil
}

// ListFilesContext lists a directory inside, sorted by name.
func (s *Sandbox) ListFilesContext(ctx context.Context, name string) ([]FileInfo, error) {
	p, err := s.path(name)
	if err != nil {
		return nil, err
	}
	r, err := s.sb.Call(ctx, &proto.Msg{Op: proto.OpListFiles, Path: p})
	if err != nil {
		return nil, s.fileErr("list_files", name, err)
	}
	out := make([]FileInfo, 0, len(r.Files))
	for _, f := range r.Files {
		m := fs.FileMode(f.Mode)
		out = append(out, FileInfo{Name: f.Name, Size: f.Size, Mode: uint32(m.Perm()), IsDir: m.IsDir(), Link: f.Link, ModTime: f.ModTime / 1e9})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (s *Sandbox) path(name string) (string, error) {
	if name == "" || strings.Contains(name, "\x00") {
		return "", errorf(KindInvalidParams, "path %q: give a path inside the sandbox", name)
	}
	if !path.IsAbs(name) {
		name = path.Join(s.workspace, name)
	}
	return path.Clean(name), nil
}

func (s *Sandbox) fileErr(op, name string, err error) error {
	var pe *proto.Error
	if errors.As(err, &pe) {
		kind := KindIO
		switch syscall.Errno(pe.Errno) {
		case syscall.ENOENT, syscall.ENOTDIR:
			kind = KindNotFound
		case syscall.EACCES, syscall.EPERM, syscall.EROFS:
			kind = KindPermission
		case syscall.EFBIG:
			kind = KindTooLarge
		}
		if strings.Contains(pe.Message, "larger than") {
			kind = KindTooLarge
		}
		return &Error{Kind: kind, Message: fmt.Sprintf("%s %s: %s", op, name, pe.Message)}
	}
	return s.guestErr(KindIO, fmt.Errorf("%s %s: %w", op, name, err))
}

func (s *Sandbox) guestErr(kind string, err error) error {
	switch {
	case errors.Is(err, guestclient.ErrClosed):
		return &Error{Kind: KindClosed, Message: "the sandbox has ended"}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &Error{Kind: KindCanceled, Message: err.Error()}
	case errors.Is(err, proto.ErrFrameTooLarge):
		return &Error{Kind: KindTooLarge, Message: err.Error()}
	}
	return &Error{Kind: kind, Message: err.Error()}
}

// Done is closed when the sandbox has ended.
func (s *Sandbox) Done() <-chan struct{} { return s.closed }

// Close ends every process in the sandbox, stops its gateway, removes what
// it made on the host and closes Events. Overlay changes not yet applied
// are kept for review (airlock diff ID). It is safe to call more than once.
func (s *Sandbox) Close() error {
	s.closeOnce.Do(func() {
		if s.stopCtx != nil {
			s.stopCtx()
		}
		keep := false
		if s.sb != nil {
			s.sb.Stop(false) // every process is gone: the workspace can be read
			keep = s.review()
			s.sb.Close(keep) // closes the audit stream (the pump ends); without keep, the state dir goes
		}
		s.wg.Wait()
		if s.h != nil && keep {
			now := time.Now().UTC()
			s.h.SetStatus(state.Status{State: state.Exited, FinishedAt: &now})
			s.h.Release()
		}
		s.evMu.Lock()
		s.evClosed = true
		close(s.events)
		s.evMu.Unlock()
		close(s.closed)
	})
	return nil
}

// review finishes the workspace session: an overlay's changes stay for
// airlock diff/apply/discard; it reports whether any do.
func (s *Sandbox) review() bool {
	ws := s.sb.Session()
	if ws == nil {
		return false
	}
	if _, err := ws.Finish(); err != nil {
		return ws.Mode() != workspace.Bind
	}
	left, err := ws.Changes()
	if err != nil || ws.Mode() == workspace.Bind {
		return false
	}
	n := workspace.Count(left)
	if n.Applicable() == 0 {
		return false
	}
	s.sb.RecordWorkspace("kept", n)
	return true
}

// eventOf maps an audit record to the API's event, if it is one.
func eventOf(r audit.Record) (Event, bool) {
	switch r.Kind {
	case audit.KindExec:
		e := &ExecEvent{Phase: "start", Command: r.Subject}
		e.PID, _ = strconv.Atoi(r.Extra["pid"])
		if r.ExitCode != nil || r.Decision == audit.Error {
			e.Phase, e.DurationMS = "exit", r.Duration.Duration().Milliseconds()
		}
		if r.ExitCode != nil {
			e.ExitCode = *r.ExitCode
		}
		return Event{Type: "exec", Timestamp: r.Time.Unix(), Exec: e}, true
	case audit.KindApproval:
		a := &ApprovalEvent{Phase: "request", ID: r.Extra["request"], Subject: r.Subject, Host: r.Host, Port: r.Port, Reason: r.Reason}
		if r.Decision != audit.Ask {
			a.Phase, a.Decision, a.Scope, a.By = "resolved", r.Decision, r.Rule, r.Extra["by"]
		}
		return Event{Type: "approval", Timestamp: r.Time.Unix(), Approval: a}, true
	case audit.KindFile:
		return Event{Type: "file", Timestamp: r.Time.Unix(), File: &FileEvent{Op: r.Op, Path: r.Path, Size: r.BytesOut}}, true
	}
	if e, ok := networkEvent(r); ok {
		return e, true
	}
	if r.Kind == "" {
		return Event{}, false
	}
	// Every other kind (mcp, hostexec, llm, workspace, lifecycle, audit)
	// as the log has it.
	return Event{Type: r.Kind, Timestamp: r.Time.Unix(), Record: &RecordEvent{
		Kind: r.Kind, Decision: r.Decision, Subject: r.Subject, Rule: r.Rule, Reason: r.Reason, Op: r.Op,
		Host: r.Host, Port: r.Port, Method: r.Method, Path: r.Path, Status: r.Status, Argv: r.Argv,
		ExitCode: r.ExitCode, DurationMS: r.Duration.Duration().Milliseconds(), Backend: r.Backend,
		Added: r.Added, Modified: r.Modified, Deleted: r.Deleted, Count: r.Count, Extra: r.Extra,
	}}, true
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// secretsOf makes the config's secrets, by value.
func secretsOf(n *NetworkConfig) ([]*secrets.Secret, error) {
	var out []*secrets.Secret
	for _, name := range sortedKeys(n.Secrets) {
		sec := n.Secrets[name]
		if len(sec.Hosts) == 0 {
			return nil, errorf(KindInvalidConfig, "network.secrets.%s: hosts is empty: name the hosts its value may go to", name)
		}
		s, err := secrets.New(name, []byte(sec.Value), sec.Hosts)
		if err != nil {
			return nil, errorf(KindInvalidConfig, "network.secrets: %v", err)
		}
		s.Git = sec.Git // checked with the rest by secrets.NewSet
		out = append(out, s)
	}
	return out, nil
}

// wrapHooks adapts the API's hooks to the gateway's.
func wrapHooks(h HTTPHooks) (on func(*http.Request) error, onResp func(*http.Response) error) {
	if h.OnRequest != nil {
		on = func(r *http.Request) error {
			nr, err := h.OnRequest(r)
			if err != nil {
				return err
			}
			if nr == nil {
				return ErrBlocked
			}
			if nr != r {
				*r = *nr.WithContext(r.Context())
			}
			return nil
		}
	}
	if h.OnResponse != nil {
		onResp = func(resp *http.Response) error {
			nr, err := h.OnResponse(resp, resp.Request)
			if err != nil {
				return err
			}
			if nr != nil && nr != resp {
				*resp = *nr
			}
			return nil
		}
	}
	return on, onResp
}

// networkEvent turns a gateway audit record into an event.
func networkEvent(r audit.Record) (Event, bool) {
	switch r.Kind {
	case "http", "network", "dns":
	default:
		return Event{}, false
	}
	n := &NetworkEvent{Kind: r.Kind, Method: r.Method, Host: r.Host, Port: r.Port, StatusCode: r.Status,
		RequestBytes: r.BytesOut, ResponseBytes: r.BytesIn, DurationMS: r.Duration.Duration().Milliseconds(),
		Decision: r.Decision, Reason: r.Reason}
	if n.Host == "" {
		n.Host = r.Subject
	}
	if n.Host == "" {
		n.Host = r.IP
	}
	n.Blocked = r.Decision != "" && r.Decision != "allow"
	if r.Kind == "http" {
		scheme, hostport := "https", r.Host
		switch r.Port {
		case 80:
			scheme = "http"
		case 443, 0:
		default:
			hostport += ":" + strconv.Itoa(r.Port)
		}
		n.URL = scheme + "://" + hostport + r.Path
	}
	return Event{Type: "network", Timestamp: r.Time.Unix(), Network: n}, true
}

// Decide answers approval request id (see ApprovalEvent).
func (s *Sandbox) Decide(id string, d ApprovalDecision) error {
	return s.DecideAs(id, d, "api")
}

// DecideAs is Decide recorded as made by the surface by (rpc for airlock rpc).
func (s *Sandbox) DecideAs(id string, d ApprovalDecision, by string) error {
	q := s.sb.Approvals()
	if q == nil {
		return errorf(KindInvalidParams, "this sandbox asks nobody: create it with approvals {\"mode\": \"ask\"}")
	}
	if d.Scope == "" {
		d.Scope = string(approval.Once)
	}
	if !approval.Scope(d.Scope).Valid() {
		return errorf(KindInvalidParams, "scope %q: use once, session, project or global", d.Scope)
	}
	err := q.Decide(id, approval.Decision{Allow: d.Allow, Scope: approval.Scope(d.Scope), Wildcard: d.Wildcard, By: by})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, approval.ErrUnknown), errors.Is(err, approval.ErrDecided), errors.Is(err, approval.ErrExpired):
		return &Error{Kind: KindNotFound, Message: fmt.Sprintf("approval %s: %v", id, err)}
	}
	return &Error{Kind: KindIO, Message: err.Error()}
}

// answer has fn decide each request as it comes, each on its own goroutine.
func (s *Sandbox) answer(fn func(ApprovalEvent) ApprovalDecision) {
	events, cancel := s.sb.Approvals().Subscribe(256)
	go func() { // ends with the sandbox (not awaited by Close: it only decides)
		defer cancel()
		for {
			select {
			case <-s.closed:
				return
			case e, ok := <-events:
				if !ok {
					return
				}
				if e.Type != "request" {
					continue
				}
				r := e.Request
				ev := ApprovalEvent{Phase: "request", ID: r.ID, Subject: r.Subject, Host: r.Host, Port: int(r.Port), Reason: r.Reason}
				go s.DecideAs(r.ID, fn(ev), "api")
			}
		}
	}()
}
