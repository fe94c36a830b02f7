package rpc

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/sandbox"
)

// The methods: each decodes its params, calls the sandbox and shapes the
// result as the protocol says (bytes in base64).

func params[T any](req *Request, into *T) error {
	if len(req.Params) == 0 {
		return nil
	}
	if err := json.Unmarshal(req.Params, into); err != nil {
		return &Error{Code: CodeInvalidParams, Message: fmt.Sprintf("invalid params for %s: %v", req.Method, cleanJSONErr(err)), Data: &errorData{Kind: sandbox.KindInvalidParams}}
	}
	return nil
}

// strictParams is params refusing keys the type does not have, so that a
// misspelt setting fails instead of being ignored.
func strictParams[T any](req *Request, into *T) error {
	if len(req.Params) == 0 {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(req.Params))
	d.DisallowUnknownFields()
	if err := d.Decode(into); err != nil {
		msg := cleanJSONErr(err)
		if k, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			msg = "unknown key " + k + " (airlock rpc --help lists the methods; README: Programmatic API)"
		}
		return &Error{Code: CodeInvalidParams, Message: fmt.Sprintf("invalid params for %s: %s", req.Method, msg), Data: &errorData{Kind: sandbox.KindInvalidParams}}
	}
	return nil
}

func cleanJSONErr(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			return fmt.Sprintf("%s must be %s, not %s", te.Field, te.Type, te.Value)
		}
		return fmt.Sprintf("expected %s, not %s", te.Type, te.Value)
	}
	return err.Error()
}

func (s *Server) sandbox() (*sandbox.Sandbox, error) {
	s.mu.Lock()
	if c := s.creating; c != nil {
		// Requests pipelined behind create wait for it.
		s.mu.Unlock()
		select {
		case <-c:
		case <-s.ctx.Done():
		}
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	switch {
	case s.closing:
		return nil, &sandbox.Error{Kind: sandbox.KindClosed, Message: "the sandbox is closing"}
	case s.sb == nil:
		return nil, &sandbox.Error{Kind: sandbox.KindNotCreated, Message: "no sandbox yet: call create first"}
	}
	return s.sb, nil
}

// method is one protocol method. close is not here: the read loop answers
// it, after everything in flight.
type method struct {
	name string
	call func(s *Server, req *Request) (any, error)
	// answersItself: the call writes its own final response (exec_stream).
	answersItself bool
}

// methods is the protocol's one dispatch table.
var methods = []method{
	{name: "create", call: func(s *Server, req *Request) (any, error) {
		if req.create == nil {
			return nil, req.createErr
		}
		return s.create(req, req.create)
	}},
	{name: "exec", call: on(checkExec, func(s *Server, sb *sandbox.Sandbox, _ *Request, p *sandbox.ExecRequest) (any, error) {
		r, err := sb.ExecContext(s.ctx, *p)
		if err != nil {
			return nil, err
		}
		return wireExec(r), nil
	})},
	{name: "exec_stream", answersItself: true, call: on(checkExec, func(s *Server, sb *sandbox.Sandbox, req *Request, p *sandbox.ExecRequest) (any, error) {
		r, err := sb.ExecStream(s.ctx, *p, func(stream int, data []byte) {
			key := "stdout"
			if stream == sandbox.Stderr {
				key = "stderr"
			}
			s.reply(req.ID, map[string]string{key: base64.StdEncoding.EncodeToString(data)}, nil)
		})
		if err != nil {
			return nil, err
		}
		final := map[string]any{"exit_code": r.ExitCode, "duration_ms": r.DurationMS}
		if r.Reason != "" {
			final["reason"] = r.Reason
		}
		s.reply(req.ID, final, nil)
		return nil, nil
	})},
	{name: "write_file", call: on(checkWrite, func(s *Server, sb *sandbox.Sandbox, _ *Request, p *writeParams) (any, error) {
		if err := sb.WriteFileContext(s.ctx, p.Path, p.Content, fs.FileMode(p.Mode)); err != nil {
			return nil, err
		}
		return map[string]any{"size": len(p.Content)}, nil
	})},
	{name: "read_file", call: on(nil, func(s *Server, sb *sandbox.Sandbox, _ *Request, p *pathParams) (any, error) {
		b, err := sb.ReadFileContext(s.ctx, p.Path)
		if err != nil {
			return nil, err
		}
		return map[string]any{"content": base64.StdEncoding.EncodeToString(b), "size": len(b)}, nil
	})},
	{name: "list_files", call: on(nil, func(s *Server, sb *sandbox.Sandbox, _ *Request, p *pathParams) (any, error) {
		files, err := sb.ListFilesContext(s.ctx, p.Path)
		if err != nil {
			return nil, err
		}
		return map[string]any{"files": files}, nil
	})},
	{name: "approve", call: on(nil, decide)},
	{name: "deny", call: on(nil, decide)},
	// The manager's methods: every sandbox in the state dir, no create needed.
	{name: "list", call: func(s *Server, req *Request) (any, error) {
		m, err := s.manager(req, nil)
		if err != nil {
			return nil, err
		}
		l, err := m.List()
		if err != nil {
			return nil, err
		}
		return map[string]any{"sandboxes": l}, nil
	}},
	{name: "get", call: func(s *Server, req *Request) (any, error) {
		var p refParams
		m, err := s.manager(req, &p)
		if err != nil {
			return nil, err
		}
		return m.Get(p.ID)
	}},
	{name: "kill", call: func(s *Server, req *Request) (any, error) {
		var p refParams
		m, err := s.manager(req, &p)
		if err != nil {
			return nil, err
		}
		if err := m.Kill(p.ID); err != nil {
			return nil, err
		}
		return map[string]any{"id": p.ID}, nil
	}},
}

// refParams name a sandbox by id or name.
type refParams struct {
	ID string `json:"id"`
}

// manager checks req's params (into p, if any: an id is required) and
// returns the manager.
func (s *Server) manager(req *Request, p *refParams) (*Manager, error) {
	if p != nil {
		if err := strictParams(req, p); err != nil {
			return nil, err
		}
		if p.ID == "" {
			return nil, &Error{Code: CodeInvalidParams, Message: "invalid params for " + req.Method + ": id is required (a sandbox's id or name, as airlock ls shows)", Data: &errorData{Kind: sandbox.KindInvalidParams}}
		}
	}
	if s.opts.Manager == nil {
		return nil, &sandbox.Error{Kind: sandbox.KindInvalidParams, Message: req.Method + ": this server manages no sandboxes"}
	}
	return s.opts.Manager, nil
}

type pathParams struct {
	Path string `json:"path"`
}

type writeParams struct {
	Path    string `json:"path"`
	Content []byte `json:"content"`
	Mode    uint32 `json:"mode"`
}

type decisionParams struct {
	ID       string `json:"id"`
	Scope    string `json:"scope"`
	Wildcard bool   `json:"wildcard"`
}

// on makes a method of call: its params decoded into a P and checked
// (check may be nil), then the sandbox looked up, waiting for a create in
// flight, in that order, so a bad request is refused before anything waits.
func on[P any](check func(*Request, *P) error, call func(*Server, *sandbox.Sandbox, *Request, *P) (any, error)) func(*Server, *Request) (any, error) {
	return func(s *Server, req *Request) (any, error) {
		var p P
		if err := params(req, &p); err != nil {
			return nil, err
		}
		if check != nil {
			if err := check(req, &p); err != nil {
				return nil, err
			}
		}
		sb, err := s.sandbox()
		if err != nil {
			return nil, err
		}
		return call(s, sb, req, &p)
	}
}

func decide(_ *Server, sb *sandbox.Sandbox, req *Request, p *decisionParams) (any, error) {
	d := sandbox.ApprovalDecision{Allow: req.Method == "approve", Scope: p.Scope, Wildcard: p.Wildcard}
	if err := sb.DecideAs(p.ID, d, "rpc"); err != nil {
		return nil, err
	}
	return map[string]any{}, nil
}

func lookup(name string) *method {
	for i := range methods {
		if methods[i].name == name {
			return &methods[i]
		}
	}
	return nil
}

func (s *Server) dispatch(req *Request) (any, error) {
	if m := lookup(req.Method); m != nil {
		return m.call(s, req)
	}
	names := make([]string, 0, len(methods)+1)
	for _, m := range methods {
		names = append(names, m.name)
	}
	names = append(names, "close")
	return nil, &Error{Code: CodeMethodNotFound, Message: fmt.Sprintf("method %q not found: use %s or %s", req.Method, strings.Join(names[:len(names)-1], ", "), names[len(names)-1])}
}

func checkExec(req *Request, p *sandbox.ExecRequest) error {
	if p.Command == "" && len(p.Args) == 0 {
		return &Error{Code: CodeInvalidParams, Message: "invalid params for " + req.Method + ": command is required", Data: &errorData{Kind: sandbox.KindInvalidParams}}
	}
	if p.TimeoutMS < 0 {
		return &Error{Code: CodeInvalidParams, Message: "invalid params for " + req.Method + ": timeout_ms must not be negative", Data: &errorData{Kind: sandbox.KindInvalidParams}}
	}
	return nil
}

func checkWrite(_ *Request, p *writeParams) error {
	if p.Mode > 0o7777 {
		return &Error{Code: CodeInvalidParams, Message: "invalid params for write_file: mode is permission bits (0 to 4095, e.g. 420 for 0644)"}
	}
	return nil
}

// wireExec is exec's result: output in base64.
func wireExec(r *sandbox.ExecResult) map[string]any {
	m := map[string]any{
		"exit_code":   r.ExitCode,
		"stdout":      base64.StdEncoding.EncodeToString([]byte(r.Stdout)),
		"stderr":      base64.StdEncoding.EncodeToString([]byte(r.Stderr)),
		"duration_ms": r.DurationMS,
	}
	if r.Truncated {
		m["truncated"] = true
	}
	if r.Reason != "" {
		m["reason"] = r.Reason
	}
	return m
}

// beginCreate claims the session's one sandbox, in reading order, so that
// requests read after create wait for it.
func (s *Server) beginCreate() (chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sb != nil || s.creating != nil {
		return nil, &sandbox.Error{Kind: sandbox.KindExists, Message: "a sandbox exists already: one per session (start another airlock rpc for another)"}
	}
	if s.closing {
		return nil, &sandbox.Error{Kind: sandbox.KindClosed, Message: "the session is closing"}
	}
	s.creating = make(chan struct{})
	return s.creating, nil
}

func (s *Server) create(req *Request, done chan struct{}) (any, error) {
	s.mu.Lock()
	unclaim := func() {
		s.creating = nil
		close(done)
	}
	s.mu.Unlock()
	var c sandbox.Config
	if err := strictParams(req, &c); err != nil {
		s.mu.Lock()
		unclaim()
		s.mu.Unlock()
		err.(*Error).Data = &errorData{Kind: sandbox.KindInvalidConfig}
		return nil, err
	}
	var explicit struct {
		Network *struct {
			BlockPrivateIPs *bool `json:"block_private_ips"`
		} `json:"network"`
	}
	json.Unmarshal(req.Params, &explicit)
	if n := explicit.Network; n != nil && n.BlockPrivateIPs != nil && !*n.BlockPrivateIPs {
		s.mu.Lock()
		unclaim()
		s.mu.Unlock()
		return nil, &sandbox.Error{Kind: sandbox.KindInvalidConfig, Message: "network.block_private_ips: false is not supported: private addresses are reachable only when allowed_hosts names them (IP or host:port)"}
	}
	withDefaults(&c, s.opts.Defaults)
	c.Origin = "rpc"
	sb, err := s.opts.Create(s.ctx, &c)
	s.mu.Lock()
	unclaim()
	if err == nil && s.closing {
		s.mu.Unlock()
		sb.Close()
		return nil, &sandbox.Error{Kind: sandbox.KindClosed, Message: "the session closed while the sandbox started"}
	}
	if err != nil {
		s.mu.Unlock()
		var se *sandbox.Error
		if !errors.As(err, &se) {
			err = &sandbox.Error{Kind: sandbox.KindStart, Message: err.Error()}
		}
		return nil, err
	}
	s.sb = sb
	s.pumped = make(chan struct{})
	s.mu.Unlock()
	go func() {
		defer close(s.pumped)
		for e := range sb.Events() {
			s.write(notification{JSONRPC: "2.0", Method: "event", Params: e})
		}
	}()
	return sb.Info(), nil
}

// closeSandbox ends the sandbox (if any) and waits for its last events to
// be written. Requests after it fail with kind closed.
func (s *Server) closeSandbox() {
	s.mu.Lock()
	s.closing = true
	sb, pumped := s.sb, s.pumped
	s.mu.Unlock()
	if sb != nil {
		sb.Close()
		select { // its last events, unless the client stopped reading
		case <-pumped:
		case <-time.After(drainTimeout):
		}
	}
	// A create still starting sees closing and closes what it made; the
	// server's context ending stops its start.
}
