package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/llmusage"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/secrets"
)

// upstream serves the requests of one intercepted connection: endpoint
// rules, secret placeholders swapped toward their own hosts, real values
// redacted from responses, streamed both ways, one audit record each.
type upstream struct {
	g         *Gateway
	t         target
	scheme    string
	proxy     *httputil.ReverseProxy
	transport *http.Transport
}

// close drops the upstream connections kept alive for this sandbox
// connection once it is over (a WebSocket taken over is not idle: it stays).
// An HTTP/2 connection whose last stream is still finishing becomes idle a
// moment later and would stay open until IdleConnTimeout, so look again.
func (u *upstream) close() {
	u.transport.CloseIdleConnections()
	time.AfterFunc(time.Second, u.transport.CloseIdleConnections)
}

// newUpstream serves one sandbox connection. h2 says the sandbox speaks
// HTTP/2: only then is HTTP/2 offered upstream (gRPC needs it end to end);
// HTTP/1.1 on both sides streams a body with a plain copy.
func newUpstream(g *Gateway, t target, scheme string, h2 bool) *upstream {
	u := &upstream{g: g, t: t, scheme: scheme}
	transport := &http.Transport{
		// Always the address policy checked, whatever the URL says.
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return g.dial(ctx, t.dialAddr())
		},
		TLSClientConfig:       &tls.Config{RootCAs: g.cfg.Upstream, ServerName: t.host, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:     h2,
		TLSHandshakeTimeout:   dialTimeout,
		ExpectContinueTimeout: time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   8,
	}
	u.transport = transport
	u.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = scheme
			pr.Out.URL.Host = net.JoinHostPort(t.host, strconv.Itoa(int(t.port)))
			pr.Out.Host = pr.In.Host
		},
		Transport:      transport,
		FlushInterval:  0, // sized bodies stream through the server's buffers; SSE and unsized (chunked) bodies are flushed at once (ReverseProxy does that for them)
		BufferPool:     copyBuffers,
		ModifyResponse: u.modifyResponse,
		ErrorHandler:   u.fail,
		ErrorLog:       discardLogger,
	}
	return u
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := audit.Record{Kind: "http", Host: u.t.host, IP: u.t.addr.String(), Port: int(u.t.port), Method: r.Method, Path: r.URL.Path, Rule: u.t.rule}
	var st *reqState // only for requests whose response is looked into beyond redaction
	deny := func(status int, decision, reason string) {
		http.Error(w, "airlock: "+reason, status)
		rec.Status, rec.Decision, rec.Reason = status, decision, reason
		rec.Duration = audit.Millis(time.Since(start))
		u.g.record(rec)
	}
	// The Host header must name the host that was allowed and is dialled:
	// otherwise a shared front (a CDN) could route the request elsewhere.
	if h, _, err := splitHostPort(r.Host, u.t.port); err != nil || !sameHost(h, u.t.host) {
		deny(http.StatusForbidden, "deny", fmt.Sprintf("Host header %q does not match the connection's host %s", r.Host, u.t.host))
		return
	}
	if d := u.g.policy().Endpoint(u.t.host, r.Method, r.URL.Path); d.Verdict != policy.Allow {
		rec.Rule = d.Rule
		deny(http.StatusForbidden, "deny", d.Reason)
		return
	}
	if h := u.g.cfg.Hooks.OnRequest; h != nil {
		if err := h(r); err != nil {
			if rr, ok := err.(interface{ Rule() string }); ok { // a policy script names its line or hook
				rec.Rule = rr.Rule()
			}
			deny(http.StatusForbidden, "deny", "request hook: "+err.Error())
			return
		}
	}
	if m := u.g.cfg.Meter; m != nil {
		if api := llmusage.Match(r.Method, r.URL.Path); api != "" && (r.Method != http.MethodGet || isWebSocket(r.Header)) {
			if why := m.Spent(); why != "" {
				u.refuseLLM(w, r, api, why)
				return
			}
			st = &reqState{api: api}
			// The tap reads plain bytes: let the transport negotiate (and
			// undo) compression, and withdraw a WebSocket's compression offer.
			r.Header.Del("Accept-Encoding")
			r.Header.Del("Sec-WebSocket-Extensions")
		}
	}
	if s := u.g.cfg.Secrets; s != nil {
		names, err := swapRequest(s, u.t.host, r)
		var leak *secrets.LeakError
		if errors.As(err, &leak) {
			deny(http.StatusForbidden, "secret_blocked", leak.Error())
			return
		}
		if err != nil {
			deny(http.StatusBadRequest, "deny", err.Error())
			return
		}
		if len(names) > 0 {
			rec.Extra = map[string]string{"secrets": strings.Join(names, ",")}
		}
		// Redaction matches plain bytes: let the transport negotiate (and
		// undo) compression itself, so an echoed value is never gzipped past it.
		r.Header.Del("Accept-Encoding")
		if isWebSocket(r.Header) {
			// The same for WebSocket frames: permessage-deflate (the usual
			// offer) would compress payloads past the scrubber, so the offer
			// is withdrawn and the server answers uncompressed.
			r.Header.Del("Sec-WebSocket-Extensions")
			if st == nil {
				st = &reqState{}
			}
		}
	}
	if st != nil {
		r = r.WithContext(context.WithValue(r.Context(), reqStateKey{}, st))
	}
	cw := &countingWriter{ResponseWriter: w}
	body := &countingReader{r: r.Body}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = body
	}
	finish := func() {
		rec.Status, rec.BytesOut, rec.BytesIn = cw.status, body.n, cw.n
		rec.Decision = "allow"
		if cw.failure != "" {
			rec.Decision, rec.Reason = cw.decision, cw.failure
		}
		if st != nil {
			if d, why := st.failed(); why != "" {
				rec.Decision, rec.Reason = d, why
			}
		}
		rec.Duration = audit.Millis(time.Since(start))
	}
	defer func() {
		// A body cut off in mid-copy ends the proxy in a panic (which
		// closes the sandbox's connection): the request is audited all the
		// same, as the error it was, before the panic goes on.
		if p := recover(); p != nil {
			finish()
			side := "the upstream's connection failed"
			if cw.writeErr != nil {
				side = "the sandbox's side closed"
			}
			rec.Decision, rec.Reason = "error", fmt.Sprintf("response cut off after %d bytes: %s", cw.n, side)
			u.g.record(rec)
			panic(p)
		}
	}()
	// The request goes on flowing upstream while the answer comes back: an
	// upstream may answer before it has read the whole request. Without
	// this, an HTTP/1.1 server reads away what is left of the request as
	// the answer's headers go out, racing the proxy's forwarding of it,
	// and the exchange is cut off or hangs. (HTTP/2 is full duplex anyway.)
	http.NewResponseController(w).EnableFullDuplex()
	u.proxy.ServeHTTP(cw, r)
	finish()
	u.g.record(rec)
}

// swapRequest puts real values in place of placeholders in the URL, the
// headers and (for secrets that opt in) the body, toward this host only.
func swapRequest(s *secrets.Set, host string, r *http.Request) ([]string, error) {
	var all []string
	add := func(names []string) {
		for _, n := range names {
			if !slices.Contains(all, n) {
				all = append(all, n)
			}
		}
	}
	u, names, err := s.SwapURL(host, r.URL.RequestURI())
	if err != nil {
		return nil, err
	}
	if len(names) > 0 {
		nu, perr := r.URL.Parse(u)
		if perr != nil {
			return nil, fmt.Errorf("request URL after secret swap: %v", perr)
		}
		r.URL.Path, r.URL.RawPath, r.URL.RawQuery = nu.Path, nu.RawPath, nu.RawQuery
		add(names)
	}
	for _, vs := range r.Header {
		for i, v := range vs {
			// SwapHeader also looks inside "Basic ..." credentials.
			nv, names, err := s.SwapHeader(host, v)
			if err != nil {
				return nil, err
			}
			vs[i] = nv
			add(names)
		}
	}
	if r.Body != nil && r.Body != http.NoBody {
		if s.SwapsBody(host) {
			r.ContentLength = -1 // a swap changes the length: send it chunked
			r.Header.Del("Content-Length")
		}
		r.Body = readCloser{s.SwapBody(host, r.Body), r.Body}
	}
	return all, nil
}

// reqState is what one request's response handling reports back to
// ServeHTTP, which writes the audit record; it travels in the request's
// context, only for the requests that need it.
type reqState struct {
	api      llmusage.API // an LLM request, metered
	mu       sync.Mutex
	decision string
	reason   string
}

type reqStateKey struct{}

func stateOf(r *http.Request) *reqState {
	if r == nil {
		return nil
	}
	st, _ := r.Context().Value(reqStateKey{}).(*reqState)
	return st
}

// fail keeps the first reason a relay ended the exchange.
func (st *reqState) fail(decision, reason string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.reason == "" {
		st.decision, st.reason = decision, reason
	}
}

func (st *reqState) failed() (string, string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.decision, st.reason
}

// modifyResponse redacts, then runs the embedding program's hook.
func (u *upstream) modifyResponse(resp *http.Response) error {
	if resp.StatusCode == http.StatusSwitchingProtocols {
		if err := u.upgrade(resp); err != nil {
			return err
		}
	} else {
		if st := stateOf(resp.Request); st != nil && st.api != "" {
			u.tapResponse(resp, st) // next to the upstream's bytes, before redaction
		}
		if err := u.redact(resp); err != nil {
			return err
		}
	}
	if h := u.g.cfg.Hooks.OnResponse; h != nil {
		if err := h(resp); err != nil {
			return fmt.Errorf("response hook: %w", err)
		}
	}
	return nil
}

// upgrade handles a 101 answer. Headers are redacted like any response's;
// the connection that follows is relayed frame by frame when secrets must
// be scrubbed from it (a WebSocket only: another protocol could not be
// scanned, so it is refused while secrets are configured) or when it is an
// OpenAI Responses WebSocket to meter; otherwise its bytes pass untouched.
func (u *upstream) upgrade(resp *http.Response) error {
	s := u.g.cfg.Secrets
	st := stateOf(resp.Request)
	tap := st != nil && st.api == llmusage.OpenAIResponses
	if s == nil && !tap {
		return nil
	}
	if s != nil {
		redactHeaders(s, resp)
	}
	if !isWebSocket(resp.Header) {
		if s == nil {
			return nil
		}
		return fmt.Errorf("upgrade to %q: only WebSocket connections can be scanned for secrets", resp.Header.Get("Upgrade"))
	}
	if ext := resp.Header.Get("Sec-WebSocket-Extensions"); ext != "" {
		return fmt.Errorf("the server agreed to WebSocket extensions nobody offered (%q)", ext)
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		return nil // the reverse proxy reports it
	}
	if st == nil {
		st = &reqState{} // not reached: ServeHTTP made one for a WebSocket with secrets
	}
	c := &wsConn{rwc: rwc, fail: st.fail, down: &wsDir{}}
	if tap {
		c.down.tap = u.wsTap(st, c.down, resp.Request.URL.Path)
		// A response.create on the open connection is a request too: once
		// the budget is spent, it is not passed on.
		c.up = &wsDir{fromClient: true, gate: u.wsGate(st, resp.Request.URL.Path)}
	}
	resp.Body = c
	if s == nil {
		return nil
	}
	host := u.t.host
	c.down.xf, c.down.ctl = s.RedactStream(), func(p []byte) ([]byte, error) { return []byte(s.RedactString(string(p))), nil }
	if xf := s.SwapStream(host); xf != nil {
		// Toward the server, payloads follow the rules of request bodies:
		// a placeholder becomes its value only for a secret that opted into
		// bodies (:body), passes unchanged for other secrets of this host,
		// and ends the connection (audited secret_blocked) for anyone else's.
		if c.up == nil {
			c.up = &wsDir{fromClient: true}
		}
		c.up.xf, c.up.ctl = xf, func(p []byte) ([]byte, error) {
			x := s.SwapStream(host)
			out, err := x.Push(nil, p)
			if err != nil {
				return nil, err
			}
			return x.Flush(out)
		}
	}
	return nil
}

func redactHeaders(s *secrets.Set, resp *http.Response) {
	for _, vs := range resp.Header {
		for i, v := range vs {
			vs[i] = s.RedactString(v)
		}
	}
	for _, vs := range resp.Trailer {
		for i, v := range vs {
			vs[i] = s.RedactString(v)
		}
	}
}

// redact replaces real secret values an upstream echoes back (an echo
// endpoint, an error quoting the request) with their placeholders.
func (u *upstream) redact(resp *http.Response) error {
	s := u.g.cfg.Secrets
	if s == nil {
		return nil
	}
	redactHeaders(s, resp)
	if resp.Body != nil && resp.Body != http.NoBody {
		resp.Body = readCloser{s.Redact(resp.Body), resp.Body}
		resp.ContentLength = -1 // a placeholder's length differs from the value's
		resp.Header.Del("Content-Length")
	}
	return nil
}

// fail answers a request the upstream could not serve; a placeholder found
// in a streamed body toward the wrong host ends up here too.
func (u *upstream) fail(w http.ResponseWriter, r *http.Request, err error) {
	cw, _ := w.(*countingWriter)
	var leak *secrets.LeakError
	status, decision, reason := http.StatusBadGateway, "error", fmt.Sprintf("upstream %s: %v", u.t.host, err)
	var ruled interface{ Rule() string }
	if errors.As(err, &leak) {
		status, decision, reason = http.StatusForbidden, "secret_blocked", leak.Error()
	} else if errors.As(err, &ruled) { // a policy script refused the response
		status, decision, reason = http.StatusForbidden, "deny", err.Error()
	}
	if cw != nil {
		cw.decision, cw.failure = decision, reason
	}
	http.Error(w, "airlock: "+reason, status)
}

// copyBuffers are larger than the reverse proxy's default 32 KiB: fewer,
// bigger writes through two TLS layers.
var copyBuffers = &bufferPool{p: sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}}

type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte  { return *(b.p.Get().(*[]byte)) }
func (b *bufferPool) Put(x []byte) { b.p.Put(&x) }

type readCloser struct {
	io.Reader
	io.Closer
}

type countingReader struct {
	r io.ReadCloser
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countingReader) Close() error { return c.r.Close() }

// countingWriter records status and bytes; Unwrap lets the reverse proxy
// reach Flush and Hijack (streaming, WebSocket upgrades) underneath.
type countingWriter struct {
	http.ResponseWriter
	status            int
	n                 int64
	decision, failure string
	writeErr          error // the first write that failed: the sandbox's side is gone
}

func (c *countingWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	if err != nil && c.writeErr == nil {
		c.writeErr = err
	}
	return n, err
}

func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }
