// Package rpc serves airlock's programmatic API as JSON-RPC 2.0 over a pair
// of streams (stdin/stdout for `airlock rpc`), one message per line: one
// sandbox per server, made by create and ended by close, end of input, or
// the server's context.
//
// Ordering: requests are read and started in the order received and then
// run concurrently (a client that needs one to finish before the next waits
// for its response); a request read after create waits for the sandbox;
// close waits for every request read before it to finish and be answered,
// then ends the sandbox. Responses, exec_stream chunks and event
// notifications interleave on the output, each one line written whole.
package rpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/sandbox"
)

// MaxLine bounds one request line: room for write_file of sandbox.MaxFile
// bytes in base64, plus the envelope. A longer line is answered -32600 and
// skipped without being buffered.
const MaxLine = 24 << 20

// Bounds on what a client can make the server hold at once.
const (
	maxInFlight = 64 // requests being served; reading waits beyond
	maxBig      = 4  // of which larger than bigLine
	bigLine     = 1 << 20
	// drainTimeout bounds how long shutdown waits for handlers once the
	// sandbox is closed (they end at once: their calls fail).
	drainTimeout = 10 * time.Second
	// eofGrace is how long requests in flight at the end of input may run
	// on before the sandbox is torn down under them.
	eofGrace = 5 * time.Second
	// writeStall: a client that takes none of a pending line for this long
	// is taken as gone, and the session ends (its sandbox with it).
	writeStall = 60 * time.Second
)

// JSON-RPC error codes.
const (
	CodeParse          = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternal       = -32603
	CodeSandbox        = -32000
)

// Options adjust a server; the zero value is ready.
type Options struct {
	// Create makes the sandbox; default sandbox.Create.
	Create func(context.Context, *sandbox.Config) (*sandbox.Sandbox, error)
	// Defaults are filled in under every create's config (airlock rpc
	// --config, --image, --allow-host).
	Defaults *sandbox.Config
	// Manager serves list, get and kill (sandboxes in the state dir,
	// whatever made them); nil refuses them.
	Manager *Manager
	// MaxLine overrides MaxLine (tests).
	MaxLine int
	// WriteStall overrides writeStall (tests).
	WriteStall time.Duration
}

// Manager is what airlock ls, get and kill do, for the methods of the
// same names; they need no create.
type Manager struct {
	List func() (any, error)
	Get  func(ref string) (any, error)
	Kill func(ref string) error
}

// Server is one JSON-RPC session.
type Server struct {
	opts Options
	out  io.Writer
	// Lines go out through one writer goroutine, so that a client that
	// stops reading can stall requests (backpressure) but never shutdown.
	outq      chan outLine
	gaveUp    chan struct{} // closed at shutdown: later lines are dropped
	outDead   bool          // the writer failed: the client is gone
	stalled   chan struct{} // closed when the client took nothing for WriteStall
	stallOnce sync.Once

	mu       sync.Mutex
	sb       *sandbox.Sandbox
	creating chan struct{} // closed when a create in progress ends
	closing  bool
	pumped   chan struct{} // the event pump has finished

	ctx    context.Context
	cancel context.CancelFunc
}

// Serve reads requests from in and writes replies to out until close, the
// end of in, or ctx; the sandbox is closed before it returns.
func Serve(ctx context.Context, in io.Reader, out io.Writer, opts Options) error {
	if opts.Create == nil {
		opts.Create = sandbox.Create
	}
	if opts.MaxLine <= 0 {
		opts.MaxLine = MaxLine
	}
	if opts.WriteStall <= 0 {
		opts.WriteStall = writeStall
	}
	s := &Server{opts: opts, out: out, outq: make(chan outLine, 256), gaveUp: make(chan struct{}), stalled: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(ctx)
	defer s.cancel()
	go s.writer()
	// Whatever is still queued at the end gets a bounded chance to go out.
	defer func() {
		s.flush(drainTimeout)
		close(s.gaveUp)
	}()

	var wg sync.WaitGroup
	sem := make(chan struct{}, maxInFlight)
	big := make(chan struct{}, maxBig)
	lines := make(chan lineOrErr)
	go readLines(s.ctx, bufio.NewReaderSize(in, 64<<10), opts.MaxLine, lines)
	var readErr error
loop:
	for {
		var l lineOrErr
		select {
		case l = <-lines:
		case <-s.ctx.Done():
			break loop
		}
		if l.err != nil {
			if !errors.Is(l.err, io.EOF) {
				readErr = l.err
			}
			break
		}
		if l.tooLong {
			s.reply(nil, nil, &Error{Code: CodeInvalidRequest, Message: fmt.Sprintf("request line over %d bytes: refused", opts.MaxLine)})
			continue
		}
		req, rerr := DecodeRequest(l.line)
		if rerr != nil {
			s.reply(idOf(req), nil, rerr)
			continue
		}
		if req.Method == "close" {
			// What was sent before close finishes and is answered first (an
			// exec pipelined right before close gets its whole output),
			// unless the session ends meanwhile; then the sandbox goes.
			s.awaitInFlight(&wg, lines)
			s.closeSandbox()
			waitTimeout(&wg, drainTimeout)
			s.reply(req.ID, struct{}{}, nil)
			break
		}
		if req.Method == "create" {
			req.create, req.createErr = s.beginCreate()
		}
		select {
		case sem <- struct{}{}:
		case <-s.ctx.Done():
			break loop
		}
		isBig := len(l.line) > bigLine
		if isBig {
			select {
			case big <- struct{}{}:
			case <-s.ctx.Done():
				<-sem
				break loop
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				<-sem
				if isBig {
					<-big
				}
			}()
			s.handle(req)
		}()
	}
	// Input ended (or the context did): what is in flight gets a moment to
	// finish and answer, then the sandbox goes, and with it whatever is left.
	if s.ctx.Err() == nil {
		waitTimeout(&wg, eofGrace)
	}
	s.cancel()
	s.closeSandbox()
	waitTimeout(&wg, drainTimeout)
	return readErr
}

// awaitInFlight waits for the requests being served, until the context
// ends or, eofGrace after the input ends; requests read meanwhile (sent
// after close) are refused.
func (s *Server) awaitInFlight(wg *sync.WaitGroup, lines <-chan lineOrErr) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for {
		select {
		case <-done:
			return
		case <-s.ctx.Done():
			return
		case l := <-lines:
			if l.err != nil {
				// The input ended too: the usual grace, then teardown.
				select {
				case <-done:
				case <-s.ctx.Done():
				case <-time.After(eofGrace):
				}
				return
			}
			if req, rerr := DecodeRequest(l.line); rerr == nil && req.ID != nil {
				s.reply(req.ID, nil, &Error{Code: CodeSandbox, Message: "the session is closing: requests after close are not served", Data: &errorData{Kind: sandbox.KindClosed}})
			}
		}
	}
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

type lineOrErr struct {
	line    []byte
	tooLong bool
	err     error
}

// readLines reads newline-terminated lines of at most max bytes; a longer
// one is skipped (reported tooLong) without being held in memory.
func readLines(ctx context.Context, r *bufio.Reader, max int, out chan<- lineOrErr) {
	send := func(l lineOrErr) bool {
		select {
		case out <- l:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		var buf []byte
		tooLong := false
		for {
			chunk, err := r.ReadSlice('\n')
			if !tooLong {
				if len(buf)+len(chunk) > max+1 { // +1: the newline
					tooLong, buf = true, nil
				} else {
					buf = append(buf, chunk...)
				}
			}
			if err == bufio.ErrBufferFull {
				continue
			}
			if err != nil {
				if len(buf) > 0 && !tooLong && len(bytes.TrimSpace(buf)) > 0 {
					if !send(lineOrErr{line: buf}) {
						return
					}
				}
				send(lineOrErr{err: err})
				return
			}
			break
		}
		if tooLong {
			if !send(lineOrErr{tooLong: true}) {
				return
			}
			continue
		}
		if len(bytes.TrimSpace(buf)) == 0 {
			continue // blank lines are not requests
		}
		if !send(lineOrErr{line: buf}) {
			return
		}
	}
}

// Request is one decoded JSON-RPC request.
type Request struct {
	Method string
	Params json.RawMessage
	// ID is the raw id (number or string), nil for a notification.
	ID json.RawMessage

	create    chan struct{} // create's claim on the session, made in reading order
	createErr error
}

// Error is a JSON-RPC error object.
type Error struct {
	Code    int        `json:"code"`
	Message string     `json:"message"`
	Data    *errorData `json:"data,omitempty"`
}

type errorData struct {
	Kind string `json:"kind"`
}

func (e *Error) Error() string { return e.Message }

// DecodeRequest parses one line. On error the returned request, if not
// nil, carries the id to answer with.
func DecodeRequest(line []byte) (*Request, *Error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(line, &raw); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) || !json.Valid(line) {
			return nil, &Error{Code: CodeParse, Message: "parse error: " + err.Error()}
		}
		return nil, &Error{Code: CodeInvalidRequest, Message: "invalid request: expected one JSON object (batches are not supported)"}
	}
	req := &Request{}
	if id, ok := raw["id"]; ok {
		t := bytes.TrimSpace(id)
		switch {
		case len(t) == 0 || string(t) == "null":
			req.ID = json.RawMessage("null")
		case t[0] == '"' || t[0] == '-' || (t[0] >= '0' && t[0] <= '9'):
			req.ID = json.RawMessage(t)
		default:
			return nil, &Error{Code: CodeInvalidRequest, Message: "invalid request: id must be a number or a string"}
		}
	}
	var version string
	if v, ok := raw["jsonrpc"]; !ok || json.Unmarshal(v, &version) != nil || version != "2.0" {
		return req, &Error{Code: CodeInvalidRequest, Message: `invalid request: "jsonrpc" must be "2.0"`}
	}
	if m, ok := raw["method"]; !ok || json.Unmarshal(m, &req.Method) != nil || req.Method == "" {
		return req, &Error{Code: CodeInvalidRequest, Message: `invalid request: "method" must be a non-empty string`}
	}
	if p, ok := raw["params"]; ok {
		t := bytes.TrimSpace(p)
		if len(t) > 0 && t[0] != '{' && string(t) != "null" {
			return req, &Error{Code: CodeInvalidParams, Message: "invalid params: params must be an object"}
		}
		if string(t) != "null" {
			req.Params = p
		}
	}
	return req, nil
}

func idOf(r *Request) json.RawMessage {
	if r == nil || r.ID == nil {
		return json.RawMessage("null")
	}
	return r.ID
}

type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

type notification struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  any    `json:"params"`
}

// reply writes a response; id nil means the request was a notification
// and gets none (errors about unreadable requests are sent with id null).
func (s *Server) reply(id json.RawMessage, result any, rerr *Error) {
	if id == nil {
		if rerr == nil {
			return
		}
		id = json.RawMessage("null")
	}
	if rerr == nil && result == nil {
		result = struct{}{}
	}
	s.write(response{JSONRPC: "2.0", ID: id, Result: result, Error: rerr})
}

// outLine is one line to write, or (flushed != nil) a marker that is
// acknowledged once every line before it is written.
type outLine struct {
	b       []byte
	flushed chan struct{}
}

func (s *Server) writer() {
	for l := range s.outq {
		if l.flushed != nil {
			close(l.flushed)
			continue
		}
		if s.outDead {
			continue
		}
		watchdog := time.AfterFunc(s.opts.WriteStall, func() {
			s.stallOnce.Do(func() { close(s.stalled) })
			s.cancel()
		})
		_, err := s.out.Write(l.b)
		watchdog.Stop()
		if err != nil {
			// The client is gone: nothing more can reach it; end the session.
			s.outDead = true
			s.cancel()
		}
	}
}

func (s *Server) write(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(response{JSONRPC: "2.0", ID: json.RawMessage("null"), Error: &Error{Code: CodeInternal, Message: "encode reply: " + err.Error()}})
	}
	var timeout <-chan time.Time
	if s.ctx.Err() != nil || s.isClosing() {
		// Shutdown never waits long on a client that stopped reading.
		timeout = time.After(drainTimeout)
	}
	select {
	case s.outq <- outLine{b: append(b, '\n')}:
	case <-s.gaveUp:
	case <-s.stalled:
	case <-timeout:
	}
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// flush waits up to d for every line queued so far to be written.
func (s *Server) flush(d time.Duration) {
	done := make(chan struct{})
	select {
	case s.outq <- outLine{flushed: done}:
	case <-s.stalled:
		return
	case <-time.After(d):
		return
	}
	select {
	case <-done:
	case <-s.stalled:
	case <-time.After(d):
	}
}

func (s *Server) handle(req *Request) {
	result, err := s.dispatch(req)
	var rerr *Error
	if err != nil {
		rerr = toRPCError(err)
	}
	if m := lookup(req.Method); m != nil && m.answersItself && rerr == nil {
		return // the handler wrote its own final response
	}
	if req.ID == nil {
		return // a notification: never answered, not even with an error
	}
	s.reply(req.ID, result, rerr)
}

func toRPCError(err error) *Error {
	var re *Error
	if errors.As(err, &re) {
		return re
	}
	var se *sandbox.Error
	if errors.As(err, &se) {
		code := CodeSandbox
		if se.Kind == sandbox.KindInvalidConfig || se.Kind == sandbox.KindInvalidParams {
			code = CodeInvalidParams
		}
		return &Error{Code: code, Message: se.Message, Data: &errorData{Kind: se.Kind}}
	}
	return &Error{Code: CodeSandbox, Message: err.Error(), Data: &errorData{Kind: "internal"}}
}
