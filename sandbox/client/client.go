// Package client drives a sandbox through `airlock rpc` (JSON-RPC 2.0 over
// the subprocess's stdin and stdout) with package sandbox's types, so code
// written for the embedded API runs here unchanged (both satisfy
// sandbox.API). Import it as sandbox to run ADR-0001's Go example as is:
//
//	import sandbox "github.com/airlock-dev/airlock/sandbox/client"
package client

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/sandbox"
)

// The protocol's types, shared with the embedded API.
type (
	Config           = sandbox.Config
	Resources        = sandbox.Resources
	NetworkConfig    = sandbox.NetworkConfig
	Secret           = sandbox.Secret
	VFSConfig        = sandbox.VFSConfig
	DirectMount      = sandbox.DirectMount
	Mount            = sandbox.Mount
	CreateResult     = sandbox.CreateResult
	ApprovalEvent    = sandbox.ApprovalEvent
	ApprovalDecision = sandbox.ApprovalDecision
	ExecRequest      = sandbox.ExecRequest
	ExecResult       = sandbox.ExecResult
	FileInfo         = sandbox.FileInfo
	Event            = sandbox.Event
	NetworkEvent     = sandbox.NetworkEvent
	FileEvent        = sandbox.FileEvent
	ExecEvent        = sandbox.ExecEvent
	Error            = sandbox.Error
)

// ErrClosed matches errors about a sandbox (or airlock rpc) that has ended.
var ErrClosed = sandbox.ErrClosed

// maxLine bounds one line from the server: the largest reply is a
// read_file of sandbox.MaxFile bytes, or exec's two capped streams, in base64.
const maxLine = 48 << 20

// closeTimeout bounds Close's wait for airlock rpc to tear down and exit.
const closeTimeout = 20 * time.Second

// Options say which airlock to run and how.
type Options struct {
	// Binary is the airlock executable; default $AIRLOCK_BIN, else
	// "airlock" on PATH.
	Binary string
	// Stderr receives airlock's diagnostics; default os.Stderr.
	Stderr io.Writer
	// Env is airlock's environment; nil means this process's.
	Env []string
}

// Sandbox is one sandbox behind one airlock rpc process. Its methods are
// safe for concurrent use.
type Sandbox struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	wmu    sync.Mutex
	nextID atomic.Uint64
	info   CreateResult

	mu      sync.Mutex
	pending map[uint64]*call
	readErr error
	gone    chan struct{} // the read loop has ended

	events  chan Event
	dropped atomic.Uint64

	closeOnce sync.Once
	closeErr  error
	stopCtx   func() bool
}

// call is one request waiting for its replies.
type call struct {
	ch   chan *message
	done chan struct{} // closed when the caller stops listening
}

type message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    *struct {
			Kind string `json:"kind"`
		} `json:"data"`
	} `json:"error"`
	Params json.RawMessage `json:"params"`
}

// Create starts `airlock rpc` and a sandbox in it, shaped by config.
func Create(config *Config) (*Sandbox, error) {
	return New(context.Background(), config, Options{})
}

// New starts `airlock rpc` and a sandbox in it. The sandbox is closed when
// ctx is done.
func New(ctx context.Context, config *Config, o Options) (_ *Sandbox, err error) {
	bin := o.Binary
	if bin == "" {
		bin = os.Getenv("AIRLOCK_BIN")
	}
	if bin == "" {
		bin = "airlock"
	}
	if config == nil {
		config = &Config{}
	}
	sb, err := start(bin, o)
	if err != nil {
		return nil, err
	}
	var res CreateResult
	if err := sb.call(ctx, "create", config, &res, nil); err != nil {
		sb.Close()
		return nil, err
	}
	sb.info = res
	sb.stopCtx = context.AfterFunc(ctx, func() { sb.Close() })
	return sb, nil
}

// Manage starts `airlock rpc` with no sandbox of its own, for List, Get
// and Kill of every sandbox in the state dir; Close ends it.
func Manage(o Options) (*Sandbox, error) {
	bin := o.Binary
	if bin == "" {
		bin = cmp.Or(os.Getenv("AIRLOCK_BIN"), "airlock")
	}
	return start(bin, o)
}

// Entry is one sandbox as list and get give it: airlock ls --json's shape
// (id, name, origin, backend, status, state_dir, ...).
type Entry map[string]any

// List is every sandbox in the state dir, running or not, whatever made it.
func (sb *Sandbox) List(ctx context.Context) ([]Entry, error) {
	var r struct {
		Sandboxes []Entry `json:"sandboxes"`
	}
	if err := sb.call(ctx, "list", struct{}{}, &r, nil); err != nil {
		return nil, err
	}
	return r.Sandboxes, nil
}

// Get is one sandbox, by id or name.
func (sb *Sandbox) Get(ctx context.Context, ref string) (Entry, error) {
	var e Entry
	if err := sb.call(ctx, "get", map[string]string{"id": ref}, &e, nil); err != nil {
		return nil, err
	}
	return e, nil
}

// Kill stops a running sandbox, by id or name, as airlock kill does.
func (sb *Sandbox) Kill(ctx context.Context, ref string) error {
	return sb.call(ctx, "kill", map[string]string{"id": ref}, nil, nil)
}

func start(bin string, o Options) (*Sandbox, error) {
	cmd := exec.Command(bin, "rpc")
	cmd.Env = o.Env
	cmd.Stderr = o.Stderr
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, &Error{Kind: sandbox.KindStart, Message: fmt.Sprintf("start %s rpc: %v", bin, err)}
	}
	sb := &Sandbox{cmd: cmd, stdin: stdin, pending: map[uint64]*call{}, gone: make(chan struct{}), events: make(chan Event, 1024)}
	go sb.readLoop(stdout)
	return sb, nil
}

func (sb *Sandbox) readLoop(stdout io.Reader) {
	r := bufio.NewReaderSize(stdout, 64<<10)
	var err error
	for {
		var line []byte
		line, err = readLine(r, maxLine)
		if err != nil {
			break
		}
		var m message
		if json.Unmarshal(line, &m) != nil {
			continue // not ours to judge; the server writes only JSON
		}
		if len(m.ID) > 0 && string(m.ID) != "null" {
			id, perr := strconv.ParseUint(string(m.ID), 10, 64)
			sb.mu.Lock()
			c := sb.pending[id]
			sb.mu.Unlock()
			if perr == nil && c != nil {
				select {
				case c.ch <- &m:
				case <-c.done:
				}
			}
			continue
		}
		if m.Method == "event" {
			var e Event
			if json.Unmarshal(m.Params, &e) == nil {
				select {
				case sb.events <- e:
				default:
					sb.dropped.Add(1)
				}
			}
		}
	}
	sb.mu.Lock()
	sb.readErr = err
	sb.mu.Unlock()
	close(sb.gone)
	close(sb.events)
}

func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		buf = append(buf, chunk...)
		if len(buf) > max {
			return nil, fmt.Errorf("airlock rpc sent a line over %d bytes", max)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf, nil
	}
}

// call sends one request and decodes its final result into out; for
// exec_stream, partial results go to partial.
func (sb *Sandbox) call(ctx context.Context, method string, params, out any, partial func(json.RawMessage)) error {
	id := sb.nextID.Add(1)
	c := &call{ch: make(chan *message, 64), done: make(chan struct{})}
	sb.mu.Lock()
	sb.pending[id] = c
	sb.mu.Unlock()
	defer func() {
		sb.mu.Lock()
		delete(sb.pending, id)
		sb.mu.Unlock()
		close(c.done)
	}()
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method, "params": params, "id": id})
	if err != nil {
		return &Error{Kind: sandbox.KindInvalidParams, Message: fmt.Sprintf("%s: encode params: %v", method, err)}
	}
	sb.wmu.Lock()
	_, err = sb.stdin.Write(append(b, '\n'))
	sb.wmu.Unlock()
	if err != nil {
		return &Error{Kind: sandbox.KindClosed, Message: "airlock rpc has exited"}
	}
	// handle reports whether m ended the call, and how.
	handle := func(m *message) (bool, error) {
		if m.Error != nil {
			return true, wireError(m.Error.Code, m.Error.Message, m.Error.Data)
		}
		if method == "exec_stream" && partial != nil && !isFinal(m.Result) {
			partial(m.Result)
			return false, nil
		}
		if out != nil && len(m.Result) > 0 {
			if err := json.Unmarshal(m.Result, out); err != nil {
				return true, &Error{Kind: "protocol", Message: fmt.Sprintf("%s: decode result: %v", method, err)}
			}
		}
		return true, nil
	}
	for {
		select {
		case m := <-c.ch:
			if done, err := handle(m); done {
				return err
			}
		case <-sb.gone:
			for { // replies read before the end may still be queued
				select {
				case m := <-c.ch:
					if done, err := handle(m); done {
						return err
					}
				default:
					return &Error{Kind: sandbox.KindClosed, Message: "airlock rpc has exited"}
				}
			}
		case <-ctx.Done():
			return &Error{Kind: sandbox.KindCanceled, Message: ctx.Err().Error()}
		}
	}
}

func isFinal(result json.RawMessage) bool {
	var f struct {
		ExitCode *int `json:"exit_code"`
	}
	json.Unmarshal(result, &f)
	return f.ExitCode != nil
}

func wireError(code int, msg string, data *struct {
	Kind string `json:"kind"`
}) error {
	kind := ""
	if data != nil {
		kind = data.Kind
	}
	if kind == "" {
		switch code {
		case -32602:
			kind = sandbox.KindInvalidParams
		case -32601:
			kind = "method_not_found"
		default:
			kind = "protocol"
		}
	}
	return &Error{Kind: kind, Message: msg, Code: code}
}

// ID is the sandbox's id.
func (sb *Sandbox) ID() string { return sb.info.ID }

// Info is create's result: the env commands see, the network mode.
func (sb *Sandbox) Info() CreateResult { return sb.info }

// Events delivers notifications until airlock rpc exits; a reader that
// falls far behind misses some (Dropped counts them).
func (sb *Sandbox) Events() <-chan Event { return sb.events }

// Dropped counts events nobody read in time.
func (sb *Sandbox) Dropped() uint64 { return sb.dropped.Load() }

type wireResult struct {
	ExitCode   int    `json:"exit_code"`
	Stdout     []byte `json:"stdout"`
	Stderr     []byte `json:"stderr"`
	DurationMS int64  `json:"duration_ms"`
	Truncated  bool   `json:"truncated"`
	Reason     string `json:"reason"`
}

// Exec runs command with /bin/sh -c in the workspace.
func (sb *Sandbox) Exec(command string) (*ExecResult, error) {
	return sb.ExecContext(context.Background(), ExecRequest{Command: command})
}

// ExecContext runs req and returns its result with its output.
func (sb *Sandbox) ExecContext(ctx context.Context, req ExecRequest) (*ExecResult, error) {
	var w wireResult
	if err := sb.call(ctx, "exec", req, &w, nil); err != nil {
		return nil, err
	}
	return &ExecResult{ExitCode: w.ExitCode, Stdout: string(w.Stdout), Stderr: string(w.Stderr), DurationMS: w.DurationMS, Truncated: w.Truncated, Reason: w.Reason}, nil
}

// ExecStream runs req and hands its output to output as it arrives.
func (sb *Sandbox) ExecStream(ctx context.Context, req ExecRequest, output func(stream int, data []byte)) (*ExecResult, error) {
	var w wireResult
	err := sb.call(ctx, "exec_stream", req, &w, func(raw json.RawMessage) {
		var chunk struct {
			Stdout []byte `json:"stdout"`
			Stderr []byte `json:"stderr"`
		}
		if json.Unmarshal(raw, &chunk) != nil || output == nil {
			return
		}
		if len(chunk.Stdout) > 0 {
			output(sandbox.Stdout, chunk.Stdout)
		}
		if len(chunk.Stderr) > 0 {
			output(sandbox.Stderr, chunk.Stderr)
		}
	})
	if err != nil {
		return nil, err
	}
	return &ExecResult{ExitCode: w.ExitCode, DurationMS: w.DurationMS, Reason: w.Reason}, nil
}

// WriteFile writes content to path inside with mode 0644.
func (sb *Sandbox) WriteFile(path string, content []byte) error {
	return sb.WriteFileContext(context.Background(), path, content, 0)
}

// WriteFileContext writes content to path inside with mode (0: 0644).
func (sb *Sandbox) WriteFileContext(ctx context.Context, path string, content []byte, mode fs.FileMode) error {
	return sb.call(ctx, "write_file", map[string]any{"path": path, "content": base64.StdEncoding.EncodeToString(content), "mode": uint32(mode.Perm())}, nil, nil)
}

// ReadFile returns the contents of path inside.
func (sb *Sandbox) ReadFile(path string) ([]byte, error) {
	return sb.ReadFileContext(context.Background(), path)
}

// ReadFileContext returns the contents of path inside.
func (sb *Sandbox) ReadFileContext(ctx context.Context, path string) ([]byte, error) {
	var r struct {
		Content []byte `json:"content"`
	}
	if err := sb.call(ctx, "read_file", map[string]string{"path": path}, &r, nil); err != nil {
		return nil, err
	}
	if r.Content == nil {
		r.Content = []byte{}
	}
	return r.Content, nil
}

// ListFiles lists a directory inside.
func (sb *Sandbox) ListFiles(path string) ([]FileInfo, error) {
	return sb.ListFilesContext(context.Background(), path)
}

// ListFilesContext lists a directory inside.
func (sb *Sandbox) ListFilesContext(ctx context.Context, path string) ([]FileInfo, error) {
	var r struct {
		Files []FileInfo `json:"files"`
	}
	if err := sb.call(ctx, "list_files", map[string]string{"path": path}, &r, nil); err != nil {
		return nil, err
	}
	return r.Files, nil
}

// Decide answers an approval request (the approve and deny methods).
func (sb *Sandbox) Decide(id string, d ApprovalDecision) error {
	method := "deny"
	if d.Allow {
		method = "approve"
	}
	return sb.call(context.Background(), method, map[string]any{"id": id, "scope": d.Scope, "wildcard": d.Wildcard}, nil, nil)
}

// Close ends the sandbox and waits for airlock rpc to exit (killing it if
// it does not within 20 s). It is safe to call more than once.
func (sb *Sandbox) Close() error {
	sb.closeOnce.Do(func() {
		if sb.stopCtx != nil {
			sb.stopCtx()
		}
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		err := sb.call(ctx, "close", struct{}{}, nil, nil)
		if errors.Is(err, ErrClosed) {
			err = nil // it had exited already
		}
		sb.stdin.Close()
		waited := make(chan error, 1)
		go func() { waited <- sb.cmd.Wait() }()
		select {
		case werr := <-waited:
			if err == nil && werr != nil {
				var ee *exec.ExitError
				if !errors.As(werr, &ee) || !bytes.Contains([]byte(ee.String()), []byte("killed")) {
					err = fmt.Errorf("airlock rpc: %w", werr)
				}
			}
		case <-ctx.Done():
			sb.cmd.Process.Kill()
			<-waited
			if err == nil {
				err = errors.New("airlock rpc did not exit in time: killed")
			}
		}
		sb.closeErr = err
	})
	return sb.closeErr
}

var _ sandbox.API = (*Sandbox)(nil)
