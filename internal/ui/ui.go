// Package ui is airlock ui: a web page on host loopback where a human
// answers every running sandbox's approval requests. It only talks to an
// approval.Hub; everything it serves is embedded, and every request must
// carry the URL's token, name the page's own host and, to change anything,
// come from the page itself.
package ui

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/internal/approval"
)

//go:embed assets
var assets embed.FS

// MaxBody is the most a POST may carry; more is refused with 413.
const MaxBody = 4 << 10

// recentMax is how many resolved requests the page lists.
const recentMax = 20

// Options configure a Server. The zero value is right for airlock ui.
type Options struct {
	// Listen is 127.0.0.1:PORT or localhost:PORT (port 0, the default,
	// picks one). Nothing else: the page must stay on host loopback, which
	// a sandbox's gateway refuses to reach.
	Listen string
	// Refresh is how often the page gets a fresh list of pending requests
	// and saved rules besides live events (default 15 s), for changes made
	// elsewhere that no event announces (airlock revoke).
	Refresh time.Duration
}

// Server is the page: an http.Handler bound to its own loopback listener.
type Server struct {
	hub     approval.Hub
	ln      net.Listener
	port    string
	token   string // in the printed URL, then the cookie
	csrf    string // in the page; every POST repeats it in a header
	cookie  string
	refresh time.Duration
	page    []byte // index.html with this server's CSRF token in place

	mu     sync.Mutex
	recent []stamped // resolved requests, newest first
}

// stamped is an event as the page gets it: when this server saw it.
type stamped struct {
	approval.Event
	At time.Time `json:"at"`
}

// New listens on opts.Listen (127.0.0.1, a random port by default) and
// returns the page for h. Serve it with Serve; print URL.
func New(h approval.Hub, opts Options) (*Server, error) {
	if h == nil {
		return nil, errors.New("ui: no approval hub")
	}
	addr := opts.Listen
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("ui: listen address %q: want 127.0.0.1:PORT", addr)
	}
	if host != "127.0.0.1" && host != "localhost" {
		return nil, fmt.Errorf("ui: listen address %q: the page serves on 127.0.0.1 only", addr)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || (port != "0" && p == 0) {
		return nil, fmt.Errorf("ui: listen address %q: bad port", addr)
	}
	// Always the IPv4 literal: "localhost" might resolve elsewhere.
	ln, err := net.Listen("tcp4", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		return nil, fmt.Errorf("ui: listen: %w", err)
	}
	s, err := newServer(h, ln, opts)
	if err != nil {
		ln.Close()
		return nil, err
	}
	return s, nil
}

// csrfSlot is where index.html takes the CSRF token.
const csrfSlot = "{{.CSRF}}"

func newServer(h approval.Hub, ln net.Listener, opts Options) (*Server, error) {
	tcp, ok := ln.Addr().(*net.TCPAddr)
	if !ok || !tcp.IP.Equal(net.IPv4(127, 0, 0, 1)) {
		return nil, fmt.Errorf("ui: listener on %v, not 127.0.0.1", ln.Addr())
	}
	s := &Server{
		hub: h, ln: ln, port: strconv.Itoa(tcp.Port),
		token: randomToken(), csrf: randomToken(),
		refresh: opts.Refresh,
	}
	// One value goes into the page. No html/template: its reflection turns
	// off the linker's dead-method elimination for the whole binary (+7 MB,
	// +4 MiB of every supervisor's RSS).
	tpl, err := assets.ReadFile("assets/index.html")
	if err != nil || bytes.Count(tpl, []byte(csrfSlot)) != 1 {
		return nil, fmt.Errorf("ui: the page needs exactly one %s", csrfSlot)
	}
	s.page = bytes.Replace(tpl, []byte(csrfSlot), []byte(html.EscapeString(s.csrf)), 1)
	if s.refresh <= 0 {
		s.refresh = 15 * time.Second
	}
	// Cookies ignore ports: name it after ours so two pages do not clash.
	s.cookie = "airlock_ui_" + s.port
	return s, nil
}

// randomToken is 256 bits from the system's CSPRNG, URL-safe.
func randomToken() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand panics rather than return short)
	return base64.RawURLEncoding.EncodeToString(b)
}

// URL is what to open: the page with its token. Opening it once sets a
// cookie; the token is then dropped from the address bar.
func (s *Server) URL() string {
	return "http://127.0.0.1:" + s.port + "/?token=" + s.token
}

// Addr is the listener's address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Listener is the loopback listener New opened, for a caller that serves
// the handler itself (an httptest.Server in tests).
func (s *Server) Listener() net.Listener { return s.ln }

// Serve serves the page until ctx ends, then closes it; open event streams
// end with ctx.
func (s *Server) Serve(ctx context.Context) error {
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    16 << 10,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if hs.Shutdown(sctx) != nil {
				hs.Close()
			}
		case <-done:
		}
	}()
	err := hs.Serve(s.ln)
	close(done)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// ServeHTTP checks, in order: the Host header (DNS rebinding), the token,
// the method, and for a change the origin, the CSRF token and the body's
// size and type. Every answer, refusals too, carries the same headers and
// never a CORS one.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; "+
		"connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
	hd.Set("Cache-Control", "no-store")

	if r.Host != "127.0.0.1:"+s.port && r.Host != "localhost:"+s.port {
		http.Error(w, "wrong Host: open the URL airlock ui printed", http.StatusMisdirectedRequest)
		return
	}
	if !s.authorized(w, r) {
		http.Error(w, "missing or wrong token: open the URL airlock ui printed", http.StatusForbidden)
		return
	}
	switch r.URL.Path {
	case "/":
		if allow(w, r, http.MethodGet, http.MethodHead) {
			s.index(w, r)
		}
	case "/app.js", "/app.css":
		if allow(w, r, http.MethodGet, http.MethodHead) {
			s.asset(w, r)
		}
	case "/events":
		if allow(w, r, http.MethodGet) {
			s.events(w, r)
		}
	case "/api/decide", "/api/revoke":
		if allow(w, r, http.MethodPost) && s.change(w, r) {
			if r.URL.Path == "/api/decide" {
				s.decide(w, r)
			} else {
				s.revoke(w, r)
			}
		}
	default:
		http.NotFound(w, r)
	}
}

// authorized accepts the token from the cookie, an Authorization: Bearer
// header, or (the first load) the URL, which then sets the cookie.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	if c, err := r.Cookie(s.cookie); err == nil && s.equal(c.Value, s.token) {
		return true
	}
	if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && s.equal(b, s.token) {
		return true
	}
	if q := r.URL.Query().Get("token"); q != "" && r.URL.Path == "/" && s.equal(q, s.token) {
		http.SetCookie(w, &http.Cookie{
			Name: s.cookie, Value: s.token, Path: "/",
			HttpOnly: true, SameSite: http.SameSiteStrictMode,
		})
		return true
	}
	return false
}

func (s *Server) equal(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// allow refuses any other method with 405 (OPTIONS too: no preflight is
// ever answered).
func allow(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	return false
}

// change admits a state change only from the page itself: same origin by
// Sec-Fetch-Site and Origin (when the client sends them, as browsers do),
// the page's CSRF token in X-CSRF-Token, a JSON body, and at most MaxBody
// bytes of it.
func (s *Server) change(w http.ResponseWriter, r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
		return false
	}
	if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host {
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
		return false
	}
	if !s.equal(r.Header.Get("X-CSRF-Token"), s.csrf) {
		http.Error(w, "missing or wrong CSRF token: reload the page", http.StatusForbidden)
		return false
	}
	if r.ContentLength > MaxBody {
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		return false
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" && !strings.HasPrefix(ct, "application/json;") {
		http.Error(w, "want Content-Type: application/json", http.StatusUnsupportedMediaType)
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
	return true
}

// readJSON decodes the (capped) body into v; false means it answered.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		// One value, nothing after it (and a body past the cap is refused,
		// not cut).
		if err = dec.Decode(new(json.RawMessage)); err == io.EOF {
			err = nil
		} else if err == nil {
			err = errors.New("more than one JSON value")
		}
	}
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		return false
	case err != nil:
		http.Error(w, "bad request body: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	if r.URL.RawQuery != "" {
		// The token is in the cookie now: take it out of the address bar
		// and the history.
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(s.page)
}

func (s *Server) asset(w http.ResponseWriter, r *http.Request) {
	b, err := assets.ReadFile("assets" + r.URL.Path)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	ct := "text/css; charset=utf-8"
	if strings.HasSuffix(r.URL.Path, ".js") {
		ct = "text/javascript; charset=utf-8"
	}
	w.Header().Set("Content-Type", ct)
	w.Write(b)
}

// decideBody is what the page posts to /api/decide.
type decideBody struct {
	ID       string         `json:"id"`
	Allow    bool           `json:"allow"`
	Scope    approval.Scope `json:"scope"`
	Wildcard bool           `json:"wildcard"`
}

func (s *Server) decide(w http.ResponseWriter, r *http.Request) {
	var b decideBody
	if !readJSON(w, r, &b) {
		return
	}
	if b.Scope == "" {
		b.Scope = approval.Once
	}
	if b.ID == "" || !b.Scope.Valid() {
		writeJSON(w, http.StatusBadRequest, errorBody{"want an id and a scope: once, session, project or global"})
		return
	}
	err := s.hub.Decide(r.Context(), b.ID, approval.Decision{Allow: b.Allow, Scope: b.Scope, Wildcard: b.Wildcard, By: "ui"})
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, struct{}{})
	case errors.Is(err, approval.ErrUnknown):
		writeJSON(w, http.StatusNotFound, errorBody{err.Error()})
	case errors.Is(err, approval.ErrDecided), errors.Is(err, approval.ErrExpired):
		writeJSON(w, http.StatusConflict, errorBody{err.Error()})
	default:
		writeJSON(w, http.StatusBadGateway, errorBody{err.Error()})
	}
}

type errorBody struct {
	Error string `json:"error"`
}

func (s *Server) revoke(w http.ResponseWriter, r *http.Request) {
	var b struct {
		ID string `json:"id"`
	}
	if !readJSON(w, r, &b) {
		return
	}
	if b.ID == "" {
		writeJSON(w, http.StatusBadRequest, errorBody{"want the id of a saved rule"})
		return
	}
	rule, err := s.hub.Revoke(r.Context(), b.ID)
	if err != nil {
		writeJSON(w, http.StatusConflict, errorBody{err.Error()})
		return
	}
	rules, err := s.hub.Rules(r.Context())
	if err != nil {
		rules = nil // the page keeps its list, less the revoked one
	}
	writeJSON(w, http.StatusOK, struct {
		Revoked approval.Rule   `json:"revoked"`
		Rules   []approval.Rule `json:"rules"`
	}{rule, rules})
}

// snapshot is the whole state the page shows; it replaces what it had.
type snapshot struct {
	Now     time.Time          `json:"now"` // the host's clock, for the countdowns
	Pending []approval.Request `json:"pending"`
	Rules   []approval.Rule    `json:"rules"`
	Recent  []stamped          `json:"recent"`
	Errors  []string           `json:"errors,omitempty"`
}

func (s *Server) snapshot(ctx context.Context) snapshot {
	snap := snapshot{Now: time.Now(), Pending: []approval.Request{}, Rules: []approval.Rule{}}
	if p, err := s.hub.Pending(ctx); err != nil {
		snap.Errors = append(snap.Errors, "pending requests: "+err.Error())
	} else if p != nil {
		snap.Pending = p
	}
	if rs, err := s.hub.Rules(ctx); err != nil {
		snap.Errors = append(snap.Errors, "saved decisions: "+err.Error())
	} else if rs != nil {
		snap.Rules = rs
	}
	s.mu.Lock()
	snap.Recent = append([]stamped{}, s.recent...)
	s.mu.Unlock()
	return snap
}

// remember keeps a resolved request for the page's "last decisions" (once,
// however many streams saw it).
func (s *Server) remember(e stamped) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.recent {
		if o.Request.ID == e.Request.ID {
			return
		}
	}
	s.recent = append([]stamped{e}, s.recent...)
	if len(s.recent) > recentMax {
		s.recent = s.recent[:recentMax]
	}
}

// events is the page's live feed (Server-Sent Events): a "snapshot" first
// and every Refresh, then each "request" and "resolved" event as the hub
// delivers it. It ends when the client goes, the server stops, or the hub's
// watch ends; the page reconnects.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	// Watch before listing, so nothing falls between the two.
	ch, err := s.hub.Watch(ctx)
	if err != nil {
		http.Error(w, "watch approvals: "+err.Error(), http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	send := func(event string, v any) bool {
		b, err := json.Marshal(v)
		if err != nil {
			return false
		}
		// A page that stops reading must not hold this stream forever.
		rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if _, err := io.WriteString(w, "retry: 2000\n\n"); err != nil {
		return
	}
	if !send("snapshot", s.snapshot(ctx)) {
		return
	}
	tick := time.NewTicker(s.refresh)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if !send("snapshot", s.snapshot(ctx)) {
				return
			}
		case e, ok := <-ch:
			if !ok {
				return
			}
			st := stamped{Event: e, At: time.Now()}
			switch e.Type {
			case "resolved":
				s.remember(st)
				if !send("resolved", st) {
					return
				}
				if e.Decision != nil && e.Decision.Scope.Saved() {
					if rs, err := s.hub.Rules(ctx); err == nil {
						if rs == nil {
							rs = []approval.Rule{}
						}
						if !send("rules", rs) {
							return
						}
					}
				}
			case "request":
				if !send("request", st) {
					return
				}
			}
		}
	}
}
