// Package mcpproxy puts airlock's policy between an agent and its MCP
// servers: each server runs in its own sandbox (or is remote), and the agent
// sees one Streamable HTTP endpoint per server, /mcp/NAME on airlock.internal,
// mirroring the server's tools, resources and prompts. Every tools/call,
// resources/read and prompts/get passes the guard (breaker and rate), then
// the server's policy: allowed calls are forwarded (with a timeout and a
// result-size cap), denied ones get an error result, escalated ones wait for
// a human in the approval queue while the client gets progress
// notifications. Each call is audited once.
package mcpproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/internal/approval"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/mcppolicy"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Env is what the engine passes for one sandbox.
type Env struct {
	Sandbox   string   // the agent's sandbox id (audit)
	LogDir    string   // each stdio server's stderr is appended to LogDir/mcp-NAME.log
	Protected []string // paths always denied (airlock's config, decisions, audit log)
	// Ask puts an escalated call in the approval queue and blocks until it is
	// decided or times out; nil means nobody can answer: escalations are denied.
	Ask   func(context.Context, approval.Request) approval.Decision
	Audit func(audit.Record) // nil: not audited
	Exe   string             // the airlock binary that starts server sandboxes; default os.Executable

	// Optional; zero values mean the defaults.
	Launch        Launch                 // default SandboxLaunch; DirectLaunch in tests
	MaxResult     int                    // result-size cap in bytes (default 1 MiB)
	Guard         *mcppolicy.GuardConfig // default: 20 identical calls a minute, 20 calls/s (burst 100)
	ProgressEvery time.Duration          // progress while an approval waits (default 5 s)
}

// Defaults.
const (
	DefaultTimeout   = 60 * time.Second
	DefaultMaxResult = 1 << 20
	maxDetail        = 4 << 10 // arguments kept in the audit log (an approval shows them whole, or is not asked)
)

// Proxy serves every configured server to one sandbox.
type Proxy struct {
	env    Env
	exe    string
	launch Launch
	guard  *mcppolicy.Guard

	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	servers map[string]*upstream

	seq    atomic.Uint64
	tokMu  sync.Mutex
	tokens map[string]progressRoute // upstream progress token → the agent's
}

type progressRoute struct {
	ss    *mcp.ServerSession
	token any
}

// New checks every server's policy and starts the servers in the background;
// calls wait (within their timeout) for a server still starting.
func New(servers []ServerConfig, env Env) (*Proxy, error) {
	p := &Proxy{env: env, exe: env.Exe, launch: env.Launch, servers: map[string]*upstream{}, tokens: map[string]progressRoute{}}
	if p.launch == nil {
		p.launch = SandboxLaunch
	}
	if p.exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("mcpproxy: find the airlock binary: %w", err)
		}
		p.exe = exe
	}
	if p.env.MaxResult <= 0 {
		p.env.MaxResult = DefaultMaxResult
	}
	if p.env.ProgressEvery <= 0 {
		p.env.ProgressEvery = 5 * time.Second
	}
	gc := mcppolicy.GuardConfig{Identical: 20, Window: time.Minute, Rate: 20, Burst: 100}
	if env.Guard != nil {
		gc = *env.Guard
	}
	p.guard = mcppolicy.NewGuard(gc)
	for _, s := range servers {
		if _, dup := p.servers[s.Name]; dup {
			return nil, fmt.Errorf("mcpproxy: server %s: configured twice", s.Name)
		}
		if s.Timeout <= 0 {
			s.Timeout = DefaultTimeout
		}
		pol, err := mcppolicy.New(mcppolicy.Config{Rules: s.Rules, Roots: s.Roots, Protected: env.Protected, Unknown: mcppolicy.Deny})
		if err != nil {
			return nil, fmt.Errorf("mcpproxy: server %s: policy: %w", s.Name, err)
		}
		if len(s.Command) > 0 {
			if err := rootsHoldNoProtected(s, env.Protected); err != nil {
				return nil, err
			}
		}
		s.Hide = hidden(s, env.Protected)
		u := &upstream{p: p, cfg: s, pol: pol, changed: make(chan struct{})}
		u.srv = mcp.NewServer(&mcp.Implementation{Name: "airlock/" + s.Name, Version: "1"}, &mcp.ServerOptions{
			Capabilities: allCaps(),
		})
		u.srv.AddReceivingMiddleware(u.middleware)
		u.http = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return u.srv }, &mcp.StreamableHTTPOptions{
			// Only the sandbox reaches the broker, and it names it
			// airlock.internal whatever address the door listens on.
			DisableLocalhostProtection: true,
		})
		p.servers[s.Name] = u
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	for _, u := range p.servers {
		p.wg.Add(1)
		go func() { defer p.wg.Done(); u.run() }()
	}
	return p, nil
}

// Handler serves /mcp/NAME (mount it at "/mcp/").
func (p *Proxy) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.Trim(strings.TrimPrefix(r.URL.Path, "/mcp/"), "/")
		u := p.servers[name]
		if u == nil {
			http.Error(w, fmt.Sprintf("airlock: no MCP server %q is configured for this sandbox", name), http.StatusNotFound)
			return
		}
		if rebound(r) {
			http.Error(w, fmt.Sprintf("Forbidden: invalid Host header %q", r.Host), http.StatusForbidden)
			return
		}
		u.http.ServeHTTP(w, r)
	})
}

// rebound is the SDK's DNS-rebinding check (a request that came in on a
// loopback address must name a loopback host), which also accepts
// airlock.internal: the name the sandbox reaches the broker by, whatever
// address the door listens on.
func rebound(r *http.Request) bool {
	la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || la == nil || !loopback(la.String()) {
		return false
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return !strings.EqualFold(host, "airlock.internal") && !loopback(host)
}

func loopback(hostport string) bool {
	h := hostport
	if x, _, err := net.SplitHostPort(hostport); err == nil {
		h = x
	}
	h = strings.Trim(h, "[]")
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(h)
	return err == nil && ip.IsLoopback()
}

// Close stops every server (killing its sandbox) and ends the sessions.
func (p *Proxy) Close() error {
	p.cancel()
	for _, u := range p.servers {
		for ss := range u.srv.Sessions() {
			ss.Close() // ends the agent's open streams, so the broker can stop
		}
		u.mu.Lock()
		cs := u.cs
		u.mu.Unlock()
		if cs != nil {
			cs.Close()
		}
	}
	p.wg.Wait()
	return nil
}

func allCaps() *mcp.ServerCapabilities {
	return &mcp.ServerCapabilities{
		Tools:     &mcp.ToolCapabilities{ListChanged: true},
		Resources: &mcp.ResourceCapabilities{ListChanged: true},
		Prompts:   &mcp.PromptCapabilities{ListChanged: true},
	}
}

// caps mirrors the server's capabilities; list changes are always
// announced (the proxy forwards them), logging and subscriptions are not
// offered (not forwarded).
func (u *upstream) caps(ctx context.Context) (*mcp.ServerCapabilities, *mcp.InitializeResult) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cs, err := u.session(ctx)
	if err != nil {
		return allCaps(), nil
	}
	ir := cs.InitializeResult()
	c := &mcp.ServerCapabilities{}
	if ir.Capabilities != nil {
		if ir.Capabilities.Tools != nil {
			c.Tools = &mcp.ToolCapabilities{ListChanged: true}
		}
		if ir.Capabilities.Resources != nil {
			c.Resources = &mcp.ResourceCapabilities{ListChanged: true}
		}
		if ir.Capabilities.Prompts != nil {
			c.Prompts = &mcp.PromptCapabilities{ListChanged: true}
		}
		c.Completions = ir.Capabilities.Completions
		c.Logging = ir.Capabilities.Logging
	}
	return c, ir
}

// notify tells every agent session that the server's list of kind changed.
// The SDK sends list_changed only when its own lists change, so a
// placeholder is added and removed; the proxy's lists come from upstream.
func (p *Proxy) notify(u *upstream, kind string) {
	const ph = "airlock-list-changed"
	switch kind {
	case "tools":
		u.srv.AddTool(&mcp.Tool{Name: ph, InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return nil, nil })
		u.srv.RemoveTools(ph)
	case "prompts":
		u.srv.AddPrompt(&mcp.Prompt{Name: ph}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) { return nil, nil })
		u.srv.RemovePrompts(ph)
	case "resources":
		u.srv.AddResource(&mcp.Resource{Name: ph, URI: "airlock:" + ph}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) { return nil, nil })
		u.srv.RemoveResources("airlock:" + ph)
	}
}

// notifyAll follows a (re)start: the lists may differ from the last run's.
func (p *Proxy) notifyAll(u *upstream, _ bool) {
	for _, k := range []string{"tools", "prompts", "resources"} {
		p.notify(u, k)
	}
}

// progress routes an upstream progress notification to the agent's session
// under the token the agent chose.
func (p *Proxy) progress(ctx context.Context, pp *mcp.ProgressNotificationParams) {
	key := fmt.Sprint(pp.ProgressToken)
	p.tokMu.Lock()
	r, ok := p.tokens[key]
	p.tokMu.Unlock()
	if !ok {
		return
	}
	q := *pp
	q.ProgressToken = r.token
	r.ss.NotifyProgress(ctx, &q)
}

// log passes an upstream log message on to the agent: on the stream of the
// latest call still in flight (log messages carry no request id; a server
// logs mostly while it works), else to every session of the server. Each
// session filters by the level it set.
func (p *Proxy) log(ctx context.Context, u *upstream, lp *mcp.LoggingMessageParams) {
	u.mu.Lock()
	var fc *flight
	for f := range u.flights {
		if fc == nil || f.seq > fc.seq {
			fc = f
		}
	}
	u.mu.Unlock()
	if fc != nil {
		fc.ss.Log(fc.ctx, lp)
		return
	}
	for ss := range u.srv.Sessions() {
		ss.Log(ctx, lp)
	}
}

// flight is a call forwarded and not yet answered.
type flight struct {
	seq uint64
	ctx context.Context
	ss  *mcp.ServerSession
}

func (u *upstream) fly(ctx context.Context, ss *mcp.ServerSession) func() {
	f := &flight{seq: u.p.seq.Add(1), ctx: ctx, ss: ss}
	u.mu.Lock()
	if u.flights == nil {
		u.flights = map[*flight]bool{}
	}
	u.flights[f] = true
	u.mu.Unlock()
	return func() { u.mu.Lock(); delete(u.flights, f); u.mu.Unlock() }
}

func (p *Proxy) lifecycle(server, op string, err error) {
	if p.env.Audit == nil {
		return
	}
	r := audit.Record{Time: time.Now(), Sandbox: p.env.Sandbox, Kind: audit.KindMCP, Subject: server, Op: op, Decision: audit.Error}
	if err != nil {
		r.Reason = err.Error()
	}
	p.env.Audit(r)
}

// middleware answers the methods that reach the server's features from
// upstream, through policy; the SDK handles the rest (initialize, ping...).
func (u *upstream) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "initialize":
			res, err := next(ctx, method, req)
			if ir, ok := res.(*mcp.InitializeResult); ok && err == nil {
				c, up := u.caps(ctx)
				ir.Capabilities = c
				if up != nil {
					ir.Instructions = up.Instructions
				}
			}
			return res, err
		case "server/discover":
			res, err := next(ctx, method, req)
			if dr, ok := res.(*mcp.DiscoverResult); ok && err == nil {
				dr.Capabilities, _ = u.caps(ctx)
			}
			return res, err
		case "logging/setLevel":
			if cs, err := u.session(ctx); err == nil {
				if lp, ok := req.GetParams().(*mcp.SetLoggingLevelParams); ok {
					cs.SetLoggingLevel(ctx, lp)
				}
			}
			return next(ctx, method, req)
		case "tools/list":
			return u.listTools(ctx, req.(*mcp.ListToolsRequest))
		case "tools/call":
			return u.callTool(ctx, req.(*mcp.CallToolRequest))
		case "resources/list":
			return forward(ctx, u, func(ctx context.Context, cs *mcp.ClientSession) (*mcp.ListResourcesResult, error) {
				return cs.ListResources(ctx, req.(*mcp.ListResourcesRequest).Params)
			})
		case "resources/templates/list":
			return forward(ctx, u, func(ctx context.Context, cs *mcp.ClientSession) (*mcp.ListResourceTemplatesResult, error) {
				return cs.ListResourceTemplates(ctx, req.(*mcp.ListResourceTemplatesRequest).Params)
			})
		case "prompts/list":
			return forward(ctx, u, func(ctx context.Context, cs *mcp.ClientSession) (*mcp.ListPromptsResult, error) {
				return cs.ListPrompts(ctx, req.(*mcp.ListPromptsRequest).Params)
			})
		case "completion/complete":
			return forward(ctx, u, func(ctx context.Context, cs *mcp.ClientSession) (*mcp.CompleteResult, error) {
				return cs.Complete(ctx, req.(*mcp.CompleteRequest).Params)
			})
		case "resources/read":
			return u.readResource(ctx, req.(*mcp.ReadResourceRequest))
		case "prompts/get":
			return u.getPrompt(ctx, req.(*mcp.GetPromptRequest))
		case "resources/subscribe", "resources/unsubscribe":
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "airlock's MCP proxy does not forward resource subscriptions"}
		}
		return next(ctx, method, req)
	}
}

// forward runs a call on the live upstream session within the server's
// timeout; transport failures become clear errors, the server's own errors
// pass through.
func forward[R any](ctx context.Context, u *upstream, f func(context.Context, *mcp.ClientSession) (R, error)) (R, error) {
	var zero R
	ctx, cancel := context.WithTimeout(ctx, u.cfg.Timeout)
	defer cancel()
	cs, err := u.session(ctx)
	if err != nil {
		return zero, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "airlock: " + err.Error()}
	}
	r, err := f(ctx, cs)
	if err != nil {
		if stopped(err) {
			u.forget(cs, err)
		}
		return zero, u.upstreamError(ctx, err)
	}
	return r, nil
}

// stopped reports whether err says the server's connection ended.
func stopped(err error) bool {
	return errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

func (u *upstream) upstreamError(ctx context.Context, err error) error {
	var we *jsonrpc.Error
	switch {
	case errors.As(err, &we):
		return we
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("airlock: MCP server %s did not answer within %s", u.cfg.Name, u.cfg.Timeout)}
	case stopped(err):
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("airlock: MCP server %s stopped during the call (airlock restarts it; the call may or may not have taken effect)", u.cfg.Name)}
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("airlock: MCP server %s: %v", u.cfg.Name, err)}
}

func (u *upstream) listTools(ctx context.Context, req *mcp.ListToolsRequest) (*mcp.ListToolsResult, error) {
	res, err := forward(ctx, u, func(ctx context.Context, cs *mcp.ClientSession) (*mcp.ListToolsResult, error) {
		return cs.ListTools(ctx, req.Params)
	})
	if err != nil || u.cfg.ShowDenied {
		return res, err
	}
	out := *res
	out.Tools = nil
	for _, t := range res.Tools {
		if u.mayAllow(t.Name) {
			out.Tools = append(out.Tools, t)
		}
	}
	if out.Tools == nil {
		out.Tools = []*mcp.Tool{}
	}
	return &out, nil
}

// mayAllow reports whether some rule could allow (or escalate) a call of
// tool: tools/list hides the others unless show_denied.
func (u *upstream) mayAllow(tool string) bool {
	can := false
	for _, r := range u.cfg.Rules {
		if ok, _ := path.Match(r.Tool, tool); !ok && r.Tool != tool {
			continue
		}
		if r.Verdict == mcppolicy.Deny && len(r.When) == 0 {
			return false
		}
		if r.Verdict != mcppolicy.Deny {
			can = true
		}
	}
	return can
}

// call is one policed call: what the audit record and the approval say.
type call struct {
	u       *upstream
	tool    string // as policy sees it: a tool name, "resources/read", "prompts/get"
	args    map[string]any
	raw     string // the arguments as sent, whole: what a human approves
	start   time.Time
	rec     audit.Record
	refusal string // set when refused: the text the agent gets
}

func (u *upstream) newCall(tool string, args map[string]any, raw []byte) *call {
	if raw == nil {
		raw, _ = json.Marshal(args)
	}
	c := &call{u: u, tool: tool, args: args, raw: string(raw), start: time.Now()}
	c.rec = audit.Record{Time: c.start, Sandbox: u.p.env.Sandbox, Kind: audit.KindMCP, Subject: u.cfg.Name + "/" + tool,
		Extra: map[string]string{"server": u.cfg.Name, "tool": tool, "arguments": capString(c.raw, maxDetail)}}
	return c
}

// decide runs guard and policy, asking a human when policy escalates; it
// reports whether to forward. progress, if set, is called while a human is
// being asked.
func (c *call) decide(ctx context.Context, progress func(n int)) bool {
	u := c.u
	subject := u.cfg.Name + "/" + c.tool
	if ok, why := u.p.guard.Allow(subject, c.args); !ok {
		c.refuse("guard", why)
		return false
	}
	d := u.pol.Decide(c.tool, c.args)
	c.rec.Rule = d.Rule
	c.rec.Reason = d.Reason
	switch d.Verdict {
	case mcppolicy.Allow:
		c.rec.Decision = audit.Allow
		return true
	case mcppolicy.Escalate:
		c.rec.Extra["escalated"] = "true"
		ad := u.p.ask(ctx, approval.Request{Kind: approval.KindMCP, Subject: subject, Detail: c.raw,
			Reason: fmt.Sprintf("rule %s: %s", d.Rule, d.Reason)}, progress)
		c.rec.Extra["approval_by"] = ad.By
		if ad.Allow {
			c.rec.Decision = audit.Allow
			return true
		}
		why := "a human denied it"
		switch {
		case strings.HasPrefix(ad.By, "nobody:"): // too long to be shown whole
			why = strings.TrimSpace(strings.TrimPrefix(ad.By, "nobody:"))
		case ad.By == "" || ad.By == "none" || ad.By == "nobody":
			why = "nobody can approve calls for this sandbox"
		case ad.By == "timeout":
			why = "nobody approved it in time"
		case ad.By == "canceled":
			why = "the call was cancelled while it waited for approval"
		case ad.By == "limit":
			why = "too many approval requests are waiting"
		}
		c.refuse(d.Rule, why)
		return false
	}
	c.refuse(d.Rule, d.Reason)
	return false
}

func (c *call) refuse(rule, reason string) {
	c.rec.Decision = audit.Deny
	c.rec.Rule = rule
	c.rec.Reason = reason
	c.refusal = fmt.Sprintf("airlock policy refused %s on MCP server %s (rule %s: %s). This is a policy decision, not an error: do not retry this call; ask the user if it is needed.", c.tool, c.u.cfg.Name, rule, reason)
}

func (c *call) done(isErr bool, errText string) {
	c.rec.Duration = audit.Millis(time.Since(c.start))
	if isErr {
		c.rec.Extra["error"] = "true"
		if errText != "" {
			c.rec.Extra["error_text"] = capString(errText, 512)
		}
		if c.rec.Decision == audit.Allow && errText != "" {
			c.rec.Decision = audit.Error
		}
	}
	if c.u.p.env.Audit != nil {
		c.u.p.env.Audit(c.rec)
	}
}

// ask waits for a human, calling progress every ProgressEvery meanwhile.
func (p *Proxy) ask(ctx context.Context, r approval.Request, progress func(n int)) approval.Decision {
	if p.env.Ask == nil {
		return approval.Decision{By: "none"}
	}
	ch := make(chan approval.Decision, 1)
	go func() { ch <- p.env.Ask(ctx, r) }()
	t := time.NewTicker(p.env.ProgressEvery)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case d := <-ch:
			return d
		case <-t.C:
			if progress != nil {
				progress(n)
			}
		}
	}
}

func (u *upstream) callTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name := req.Params.Name
	// The server gets these very bytes, so policy decides on them as they
	// are: arguments a server could decode otherwise are refused.
	args, derr := mcppolicy.DecodeArgs(req.Params.Arguments)
	c := u.newCall(name, args, req.Params.Arguments)
	if derr != nil {
		c.refuse("arguments", derr.Error())
		c.done(true, "")
		return errorResult(c.refusal), nil
	}
	token := req.Params.GetProgressToken()
	progress := func(n int) {
		if token != nil {
			req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: float64(n),
				Message: fmt.Sprintf("waiting for a human to approve %s/%s (airlock approvals)", u.cfg.Name, name)})
		}
	}
	if !c.decide(ctx, progress) {
		c.done(true, "")
		return errorResult(c.refusal), nil
	}
	params := &mcp.CallToolParams{Name: name, Arguments: req.Params.Arguments}
	if token != nil {
		up := fmt.Sprintf("airlock-%d", u.p.seq.Add(1))
		u.p.tokMu.Lock()
		u.p.tokens[up] = progressRoute{ss: req.Session, token: token}
		u.p.tokMu.Unlock()
		defer func() { u.p.tokMu.Lock(); delete(u.p.tokens, up); u.p.tokMu.Unlock() }()
		params.SetProgressToken(up)
	}
	defer u.fly(ctx, req.Session)()
	res, err := forward(ctx, u, func(ctx context.Context, cs *mcp.ClientSession) (*mcp.CallToolResult, error) {
		return cs.CallTool(ctx, params)
	})
	if err != nil {
		var we *jsonrpc.Error
		if errors.As(err, &we) && we.Code != jsonrpc.CodeInternalError {
			c.done(true, we.Message)
			return nil, err // the server's own protocol error (unknown tool, bad params)
		}
		c.done(true, err.Error())
		return errorResult(err.Error()), nil
	}
	if n := jsonSize(res); n > u.p.env.MaxResult {
		msg := fmt.Sprintf("airlock: the result of %s on MCP server %s was %d bytes, over airlock's cap of %d; ask for less (a range, a page, a filter)", name, u.cfg.Name, n, u.p.env.MaxResult)
		c.done(true, msg)
		return errorResult(msg), nil
	}
	c.done(res.IsError, "")
	return res, nil
}

func (u *upstream) readResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	args := map[string]any{"uri": uri}
	if p, ok := filePath(uri); ok {
		args["path"] = p // so path_within rules apply to file: resources
	}
	c := u.newCall("resources/read", args, nil)
	if err := mcppolicy.CheckStrings(args); err != nil {
		c.refuse("arguments", err.Error())
	}
	if c.refusal != "" || !c.decide(ctx, nil) {
		c.done(true, "")
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: c.refusal}
	}
	res, err := forward(ctx, u, func(ctx context.Context, cs *mcp.ClientSession) (*mcp.ReadResourceResult, error) {
		return cs.ReadResource(ctx, req.Params)
	})
	if err == nil && jsonSize(res) > u.p.env.MaxResult {
		res, err = nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("airlock: resource %s is over airlock's cap of %d bytes", uri, u.p.env.MaxResult)}
	}
	c.done(err != nil, errText(err))
	return res, err
}

func (u *upstream) getPrompt(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	args := map[string]any{"name": req.Params.Name}
	for k, v := range req.Params.Arguments {
		if k != "name" {
			args[k] = v
		}
	}
	c := u.newCall("prompts/get", args, nil)
	if err := mcppolicy.CheckStrings(args); err != nil {
		c.refuse("arguments", err.Error())
	}
	if c.refusal != "" || !c.decide(ctx, nil) {
		c.done(true, "")
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: c.refusal}
	}
	res, err := forward(ctx, u, func(ctx context.Context, cs *mcp.ClientSession) (*mcp.GetPromptResult, error) {
		return cs.GetPrompt(ctx, req.Params)
	})
	if err == nil && jsonSize(res) > u.p.env.MaxResult {
		res, err = nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("airlock: prompt %s is over airlock's cap of %d bytes", req.Params.Name, u.p.env.MaxResult)}
	}
	c.done(err != nil, errText(err))
	return res, err
}

func errorResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func jsonSize(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return len(b)
}

func filePath(uri string) (string, bool) {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "file" {
		return "", false
	}
	return u.Path, true
}

func capString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + fmt.Sprintf("…[%d more bytes]", len(s)-n)
}
