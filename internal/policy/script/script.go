// Package script runs a network policy written in Starlark (policy_script): is_host_allowed, on_request and on_response, each call bounded in steps, time and allocation, with no I/O.
package script

import (
	"errors"
	"fmt"
	"net/http"
	"runtime/metrics"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"go.starlark.net/resolve"
	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
	"go.starlark.net/syntax"
)

// Bounds on what a script is shown and may return. A request outside them
// is refused (fail closed), not truncated: a script deciding on a cut view
// could be steered by what it was not shown.
const (
	MaxSource       = 1 << 20   // bytes of script
	MaxHeaders      = 100       // header names shown
	MaxHeaderValue  = 16 << 10  // bytes of one header's values, joined
	MaxTarget       = 16 << 10  // bytes of path plus query
	MaxMutations    = 32        // headers set or deleted by one on_request
	MaxSetValue     = 8 << 10   // bytes of one header value a script sets
	maxPrints       = 16        // print lines kept per call
	maxPrint        = 512       // bytes kept of one print line
	stepChunk       = 256       // steps between allocation checks
	DefaultSteps    = 1_000_000 // per call
	DefaultTime     = 250 * time.Millisecond
	DefaultAllocate = 64 << 20 // bytes allocated by the process during one call
)

// Limits bound one call into the script.
type Limits struct {
	Steps uint64        // Starlark execution steps
	Time  time.Duration // wall time, enforced by cancelling the thread
	// Alloc is the bytes the process may allocate while a call runs,
	// checked every stepChunk steps and once the call returns. The counter
	// is the process's (runtime/metrics), so it over-counts under load:
	// the bound errs toward refusing. One interpreter operation between
	// checks can still allocate up to Starlark's own ceiling (1 GiB for a
	// repetition), which the next check then refuses.
	Alloc uint64
}

// Options configure a script.
type Options struct {
	Limits Limits
	// Print receives print() lines (bounded) and is where they are
	// audited; nil drops them. Never standard output.
	Print func(fn, line string)
}

// Script is a loaded, frozen policy script; safe for concurrent use (each
// call gets its own thread).
type Script struct {
	file                     string
	host, onReq, onResp      *starlark.Function
	lim                      Limits
	print                    func(fn, line string)
	calls, denials, failures atomic.Uint64
}

// Error is a failure inside the script, located at its line.
type Error struct {
	File string
	Line int
	Func string // the hook, or "" for loading
	Msg  string
}

func (e *Error) Error() string {
	if e.Func == "" {
		return fmt.Sprintf("policy script %s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("policy script %s:%d: %s: %s", e.File, e.Line, e.Func, e.Msg)
}

// Rule is how audit records name the script's decision: script:FILE:LINE.
func (e *Error) Rule() string { return fmt.Sprintf("script:%s:%d", e.File, e.Line) }

// Denial is a script's refusal of a request or response.
type Denial struct {
	File, Func, Reason string
}

func (d *Denial) Error() string {
	return fmt.Sprintf("policy script %s: %s: %s", d.File, d.Func, d.Reason)
}

// Rule names the hook that refused: script:FILE:FUNC.
func (d *Denial) Rule() string { return fmt.Sprintf("script:%s:%s", d.File, d.Func) }

// hooks are the functions a script may define, with their parameter counts.
var hooks = map[string]int{"is_host_allowed": 2, "on_request": 1, "on_response": 1}

// New parses and runs src's top level (under the same limits as a call)
// and returns the script with its globals frozen. file names it in errors.
// A syntax error, a load statement, a hook with the wrong parameters or a
// script that defines no hook is an *Error with the line.
func New(file string, src []byte, o Options) (*Script, error) {
	if len(src) > MaxSource {
		return nil, &Error{File: file, Line: 1, Msg: fmt.Sprintf("the script is %d bytes, over the %d allowed", len(src), MaxSource)}
	}
	if o.Limits.Steps == 0 {
		o.Limits.Steps = DefaultSteps
	}
	if o.Limits.Time == 0 {
		o.Limits.Time = DefaultTime
	}
	if o.Limits.Alloc == 0 {
		o.Limits.Alloc = DefaultAllocate
	}
	s := &Script{file: file, lim: o.Limits, print: o.Print}
	opts := &syntax.FileOptions{}
	f, err := opts.Parse(file, src, 0)
	if err != nil {
		var se syntax.Error
		if errors.As(err, &se) {
			return nil, &Error{File: file, Line: int(se.Pos.Line), Msg: se.Msg}
		}
		return nil, &Error{File: file, Line: 1, Msg: err.Error()}
	}
	for _, st := range f.Stmts {
		if l, ok := st.(*syntax.LoadStmt); ok {
			p, _ := l.Span()
			return nil, &Error{File: file, Line: int(p.Line), Msg: "load is not available: a policy script is one file"}
		}
	}
	prog, err := starlark.FileProgram(f, starlark.StringDict{}.Has)
	if err != nil {
		var el resolve.ErrorList
		if errors.As(err, &el) && len(el) > 0 {
			return nil, &Error{File: file, Line: int(el[0].Pos.Line), Msg: el[0].Msg}
		}
		return nil, &Error{File: file, Line: 1, Msg: err.Error()}
	}
	var globals starlark.StringDict
	if err := s.run("", func(th *starlark.Thread) (err error) {
		globals, err = prog.Init(th, nil)
		return err
	}); err != nil {
		return nil, err
	}
	globals.Freeze()
	for name, n := range hooks {
		v, ok := globals[name]
		if !ok {
			continue
		}
		fn, ok := v.(*starlark.Function)
		if !ok {
			return nil, &Error{File: file, Line: 1, Msg: fmt.Sprintf("%s is a %s, not a function", name, v.Type())}
		}
		if fn.NumParams() != n || fn.HasVarargs() || fn.HasKwargs() {
			return nil, &Error{File: file, Line: int(fn.Position().Line), Msg: fmt.Sprintf("%s must take %d parameters", name, n)}
		}
		switch name {
		case "is_host_allowed":
			s.host = fn
		case "on_request":
			s.onReq = fn
		case "on_response":
			s.onResp = fn
		}
	}
	if s.host == nil && s.onReq == nil && s.onResp == nil {
		return nil, &Error{File: file, Line: 1, Msg: "defines none of is_host_allowed(host, port), on_request(req), on_response(resp)"}
	}
	return s, nil
}

// File is the script's name as given to New.
func (s *Script) File() string { return s.file }

// Has reports which hooks the script defines.
func (s *Script) Has() (host, request, response bool) {
	return s.host != nil, s.onReq != nil, s.onResp != nil
}

// Stats are the calls made, the requests the script refused and the calls
// that failed.
func (s *Script) Stats() (calls, denials, failures uint64) {
	return s.calls.Load(), s.denials.Load(), s.failures.Load()
}

func allocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// run gives f a fresh thread under the limits and turns what went wrong
// into an *Error at the script's line.
func (s *Script) run(fn string, f func(*starlark.Thread) error) error {
	prints := 0
	th := &starlark.Thread{Name: fn}
	th.Load = func(*starlark.Thread, string) (starlark.StringDict, error) {
		return nil, errors.New("load is not available")
	}
	th.Print = func(_ *starlark.Thread, msg string) {
		if prints++; prints > maxPrints || s.print == nil {
			return
		}
		if len(msg) > maxPrint {
			msg = msg[:maxPrint] + "…"
		}
		s.print(fn, msg)
	}
	start := allocated()
	why := ""
	th.SetMaxExecutionSteps(min(stepChunk, s.lim.Steps))
	th.OnMaxSteps = func(t *starlark.Thread) {
		switch {
		case t.ExecutionSteps() >= s.lim.Steps:
			why = fmt.Sprintf("over its limit of %d steps", s.lim.Steps)
		case allocated()-start > s.lim.Alloc:
			why = fmt.Sprintf("allocated over its limit of %d MiB", s.lim.Alloc>>20)
		default:
			t.SetMaxExecutionSteps(min(t.ExecutionSteps()+stepChunk, s.lim.Steps))
			return
		}
		t.Cancel(why)
	}
	timer := time.AfterFunc(s.lim.Time, func() { th.Cancel(fmt.Sprintf("over its time limit of %v", s.lim.Time)) })
	err := f(th)
	timer.Stop()
	if err == nil && allocated()-start > s.lim.Alloc {
		err = fmt.Errorf("allocated over its limit of %d MiB", s.lim.Alloc>>20)
	}
	if err == nil {
		return nil
	}
	return s.locate(fn, err)
}

// locate finds the script's innermost line in err's call stack.
func (s *Script) locate(fn string, err error) *Error {
	var ee *starlark.EvalError
	if !errors.As(err, &ee) {
		return &Error{File: s.file, Line: 1, Func: fn, Msg: err.Error()}
	}
	line := 0
	for i := len(ee.CallStack) - 1; i >= 0; i-- {
		if p := ee.CallStack[i].Pos; p.Filename() == s.file && p.Line > 0 {
			line = int(p.Line)
			break
		}
	}
	if line == 0 {
		line = 1
	}
	msg := ee.Msg
	msg = strings.Replace(msg, "Starlark computation cancelled: ", "stopped: ", 1)
	return &Error{File: s.file, Line: line, Func: fn, Msg: msg}
}

func (s *Script) call(name string, fn *starlark.Function, args ...starlark.Value) (starlark.Value, error) {
	s.calls.Add(1)
	var v starlark.Value
	err := s.run(name, func(th *starlark.Thread) (err error) {
		v, err = starlark.Call(th, fn, args, nil)
		return err
	})
	if err != nil {
		s.failures.Add(1)
		return nil, err
	}
	return v, nil
}

// IsHostAllowed asks is_host_allowed(host, port): opinion is false for
// None (or no such hook); err, a script failure, must be read as a deny.
func (s *Script) IsHostAllowed(host string, port uint16) (allowed, opinion bool, err error) {
	if s.host == nil {
		return false, false, nil
	}
	v, err := s.call("is_host_allowed", s.host, starlark.String(host), starlark.MakeInt(int(port)))
	if err != nil {
		return false, false, err
	}
	switch v := v.(type) {
	case starlark.NoneType:
		return false, false, nil
	case starlark.Bool:
		if !v {
			s.denials.Add(1)
		}
		return bool(v), true, nil
	}
	s.failures.Add(1)
	return false, false, &Error{File: s.file, Line: int(s.host.Position().Line), Func: "is_host_allowed", Msg: fmt.Sprintf("returned a %s; want True, False or None", v.Type())}
}

// OnRequest calls on_request with a snapshot of r (which it cannot change)
// and applies what it returns to r's headers: None or True passes, False
// or {"deny": "why"} refuses (a *Denial), {"set_headers": {...},
// "del_headers": [...]} edits. Any error refuses the request.
func (s *Script) OnRequest(r *http.Request) error {
	if s.onReq == nil {
		return nil
	}
	req, err := RequestValue(r)
	if err != nil {
		return &Denial{File: s.file, Func: "on_request", Reason: err.Error()}
	}
	v, err := s.call("on_request", s.onReq, req)
	if err != nil {
		return err
	}
	set, del, err := s.verdict("on_request", v, true)
	if err != nil {
		return err
	}
	for _, k := range del {
		r.Header.Del(k)
	}
	for _, kv := range set {
		r.Header.Set(kv[0], kv[1])
	}
	return nil
}

// OnResponse calls on_response with a snapshot of resp (status, headers and
// its request): None or True passes, False or {"deny": "why"} refuses.
func (s *Script) OnResponse(resp *http.Response) error {
	if s.onResp == nil {
		return nil
	}
	v, err := ResponseValue(resp)
	if err != nil {
		return &Denial{File: s.file, Func: "on_response", Reason: err.Error()}
	}
	out, err := s.call("on_response", s.onResp, v)
	if err != nil {
		return err
	}
	_, _, err = s.verdict("on_response", out, false)
	return err
}

// verdict reads a hook's answer.
func (s *Script) verdict(fn string, v starlark.Value, edits bool) (set [][2]string, del []string, err error) {
	bad := func(format string, a ...any) error {
		s.failures.Add(1)
		line := 1
		if fn == "on_request" {
			line = int(s.onReq.Position().Line)
		} else {
			line = int(s.onResp.Position().Line)
		}
		return &Error{File: s.file, Line: line, Func: fn, Msg: fmt.Sprintf(format, a...)}
	}
	switch v := v.(type) {
	case starlark.NoneType:
		return nil, nil, nil
	case starlark.Bool:
		if v {
			return nil, nil, nil
		}
		s.denials.Add(1)
		return nil, nil, &Denial{File: s.file, Func: fn, Reason: "returned False"}
	case *starlark.Dict:
		for _, it := range v.Items() {
			k, ok := starlark.AsString(it[0])
			if !ok {
				return nil, nil, bad("returned a dict with a %s key", it[0].Type())
			}
			switch {
			case k == "deny":
				why, ok := starlark.AsString(it[1])
				if !ok {
					return nil, nil, bad(`"deny" must be a string`)
				}
				s.denials.Add(1)
				return nil, nil, &Denial{File: s.file, Func: fn, Reason: clip(why, 512)}
			case k == "set_headers" && edits:
				d, ok := it[1].(*starlark.Dict)
				if !ok {
					return nil, nil, bad(`"set_headers" must be a dict of strings`)
				}
				for _, h := range d.Items() {
					name, ok1 := starlark.AsString(h[0])
					val, ok2 := starlark.AsString(h[1])
					if !ok1 || !ok2 {
						return nil, nil, bad(`"set_headers" must be a dict of strings`)
					}
					if err := settable(name, val); err != nil {
						return nil, nil, bad("set_headers: %v", err)
					}
					set = append(set, [2]string{name, val})
				}
			case k == "del_headers" && edits:
				it, ok := it[1].(starlark.Iterable)
				if !ok {
					return nil, nil, bad(`"del_headers" must be a list of strings`)
				}
				iter := it.Iterate()
				var x starlark.Value
				for iter.Next(&x) {
					name, ok := starlark.AsString(x)
					if !ok {
						iter.Done()
						return nil, nil, bad(`"del_headers" must be a list of strings`)
					}
					if err := settable(name, ""); err != nil {
						iter.Done()
						return nil, nil, bad("del_headers: %v", err)
					}
					del = append(del, name)
					if len(del) > MaxMutations {
						break
					}
				}
				iter.Done()
			default:
				keys := `"deny"`
				if edits {
					keys = `"deny", "set_headers" or "del_headers"`
				}
				return nil, nil, bad("returned a dict with key %q; want %s", clip(k, 64), keys)
			}
		}
		if len(set)+len(del) > MaxMutations {
			return nil, nil, bad("changes %d headers, over the limit of %d", len(set)+len(del), MaxMutations)
		}
		return set, del, nil
	}
	return nil, nil, bad("returned a %s; want None, True, False or a dict", v.Type())
}

// fixed are headers a script may not set or delete: routing and framing
// are the gateway's, and the proxy credential never reaches a script.
var fixed = map[string]bool{"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true,
	"Upgrade": true, "Te": true, "Trailer": true, "Keep-Alive": true, "Proxy-Authorization": true, "Proxy-Connection": true}

func settable(name, val string) error {
	if name == "" || len(name) > 256 || !token(name) {
		return fmt.Errorf("%q is not a header name", clip(name, 64))
	}
	if fixed[http.CanonicalHeaderKey(name)] {
		return fmt.Errorf("%s is the gateway's to set", http.CanonicalHeaderKey(name))
	}
	if len(val) > MaxSetValue {
		return fmt.Errorf("the value of %s is %d bytes, over %d", name, len(val), MaxSetValue)
	}
	for i := 0; i < len(val); i++ {
		if c := val[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return fmt.Errorf("the value of %s has a control character", name)
		}
	}
	return nil
}

func token(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// RequestValue is the frozen snapshot of r a script sees: method, scheme,
// host, port, path, query and headers (lowercase names, values joined with
// ", "). A request beyond the bounds is an error, never a cut view.
func RequestValue(r *http.Request) (starlark.Value, error) {
	scheme := "http"
	if r.TLS != nil || (r.URL != nil && r.URL.Scheme == "https") {
		scheme = "https"
	}
	host, port := r.Host, ""
	if r.URL != nil && r.URL.Host != "" && host == "" {
		host = r.URL.Host
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") {
		host, port = host[:i], host[i+1:]
	}
	host = strings.Trim(host, "[]")
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[scheme]
	}
	p := 0
	for _, c := range port {
		if c < '0' || c > '9' || p > 65535 {
			return nil, fmt.Errorf("request port %q is not a number", clip(port, 16))
		}
		p = p*10 + int(c-'0')
	}
	path, query := "", ""
	if r.URL != nil {
		path, query = r.URL.Path, r.URL.RawQuery
	}
	if len(path)+len(query) > MaxTarget {
		return nil, fmt.Errorf("the request target is %d bytes, over the %d a policy script is shown", len(path)+len(query), MaxTarget)
	}
	if len(host) > 255 || len(r.Method) > 64 {
		return nil, errors.New("the request's host or method is too long for a policy script")
	}
	h, err := headerDict(r.Header)
	if err != nil {
		return nil, err
	}
	return starlarkstruct.FromStringDict(starlarkstruct.Default, starlark.StringDict{
		"method":  starlark.String(r.Method),
		"scheme":  starlark.String(scheme),
		"host":    starlark.String(strings.ToLower(host)),
		"port":    starlark.MakeInt(p),
		"path":    starlark.String(path),
		"query":   starlark.String(query),
		"headers": h,
	}), nil
}

// ResponseValue is the frozen snapshot of resp: status, headers and
// request (as RequestValue, when known).
func ResponseValue(resp *http.Response) (starlark.Value, error) {
	h, err := headerDict(resp.Header)
	if err != nil {
		return nil, err
	}
	var req starlark.Value = starlark.None
	if resp.Request != nil {
		if req, err = RequestValue(resp.Request); err != nil {
			return nil, err
		}
	}
	return starlarkstruct.FromStringDict(starlarkstruct.Default, starlark.StringDict{
		"status":  starlark.MakeInt(resp.StatusCode),
		"headers": h,
		"request": req,
	}), nil
}

func headerDict(hs http.Header) (*starlark.Dict, error) {
	if len(hs) > MaxHeaders {
		return nil, fmt.Errorf("%d header names, over the %d a policy script is shown", len(hs), MaxHeaders)
	}
	names := make([]string, 0, len(hs))
	for k := range hs {
		names = append(names, k)
	}
	sort.Strings(names)
	d := starlark.NewDict(len(hs))
	for _, k := range names {
		n := 0
		for _, v := range hs[k] {
			n += len(v) + 2
		}
		if n > MaxHeaderValue || len(k) > 256 {
			return nil, fmt.Errorf("header %s is %d bytes, over the %d a policy script is shown", clip(k, 64), n, MaxHeaderValue)
		}
		key := starlark.String(strings.ToLower(k))
		val := strings.Join(hs[k], ", ")
		if old, found, _ := d.Get(key); found { // two spellings of one name
			val = string(old.(starlark.String)) + ", " + val
		}
		d.SetKey(key, starlark.String(val))
	}
	d.Freeze()
	return d, nil
}
