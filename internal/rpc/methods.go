package rpc

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
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

func (s *Server) dispatch(req *Request) (any, error) {
	switch req.Method {
	case "create":
		if req.create == nil {
			return nil, req.createErr
		}
		return s.create(req, req.create)
	case "exec":
		sb, p, err := s.execParams(req)
		if err != nil {
			return nil, err
		}
		r, err := sb.ExecContext(s.ctx, p)
		if err != nil {
			return nil, err
		}
		return wireExec(r), nil
	case "exec_stream":
		sb, p, err := s.execParams(req)
		if err != nil {
			return nil, err
		}
		r, err := sb.ExecStream(s.ctx, p, func(stream int, data []byte) {
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
	case "write_file":
		var p struct {
			Path    string `json:"path"`
			Content []byte `json:"content"`
			Mode    uint32 `json:"mode"`
		}
		if err := params(req, &p); err != nil {
			return nil, err
		}
		if p.Mode > 0o7777 {
			return nil, &Error{Code: CodeInvalidParams, Message: "invalid params for write_file: mode is permission bits (0 to 4095, e.g. 420 for 0644)"}
		}
		sb, err := s.sandbox()
		if err != nil {
			return nil, err
		}
		if err := sb.WriteFileContext(s.ctx, p.Path, p.Content, fs.FileMode(p.Mode)); err != nil {
			return nil, err
		}
		return map[string]any{"size": len(p.Content)}, nil
	case "read_file":
		var p struct {
			Path string `json:"path"`
		}
		if err := params(req, &p); err != nil {
			return nil, err
		}
		sb, err := s.sandbox()
		if err != nil {
			return nil, err
		}
		b, err := sb.ReadFileContext(s.ctx, p.Path)
		if err != nil {
			return nil, err
		}
		return map[string]any{"content": base64.StdEncoding.EncodeToString(b), "size": len(b)}, nil
	case "approve", "deny":
		var p struct {
			ID       string `json:"id"`
			Scope    string `json:"scope"`
			Wildcard bool   `json:"wildcard"`
		}
		if err := params(req, &p); err != nil {
			return nil, err
		}
		sb, err := s.sandbox()
		if err != nil {
			return nil, err
		}
		d := sandbox.ApprovalDecision{Allow: req.Method == "approve", Scope: p.Scope, Wildcard: p.Wildcard}
		if err := sb.DecideAs(p.ID, d, "rpc"); err != nil {
			return nil, err
		}
		return map[string]any{}, nil
	case "list_files":
		var p struct {
			Path string `json:"path"`
		}
		if err := params(req, &p); err != nil {
			return nil, err
		}
		sb, err := s.sandbox()
		if err != nil {
			return nil, err
		}
		files, err := sb.ListFilesContext(s.ctx, p.Path)
		if err != nil {
			return nil, err
		}
		return map[string]any{"files": files}, nil
	}
	return nil, &Error{Code: CodeMethodNotFound, Message: fmt.Sprintf("method %q not found: use create, exec, exec_stream, write_file, read_file, list_files, approve, deny or close", req.Method)}
}

func (s *Server) execParams(req *Request) (*sandbox.Sandbox, sandbox.ExecRequest, error) {
	var p sandbox.ExecRequest
	if err := params(req, &p); err != nil {
		return nil, p, err
	}
	if p.Command == "" && len(p.Args) == 0 {
		return nil, p, &Error{Code: CodeInvalidParams, Message: "invalid params for " + req.Method + ": command is required", Data: &errorData{Kind: sandbox.KindInvalidParams}}
	}
	if p.TimeoutMS < 0 {
		return nil, p, &Error{Code: CodeInvalidParams, Message: "invalid params for " + req.Method + ": timeout_ms must not be negative", Data: &errorData{Kind: sandbox.KindInvalidParams}}
	}
	sb, err := s.sandbox()
	return sb, p, err
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
	if err := params(req, &c); err != nil {
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
