package ui

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/approval"
)

// serve starts a Server for h on a random loopback port until the test ends.
func serve(t *testing.T, h approval.Hub) *Server {
	t.Helper()
	s, err := New(h, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

func token(s *Server) string {
	u, _ := url.Parse(s.URL())
	return u.Query().Get("token")
}

func base(s *Server) string { return "http://" + s.Addr().String() }

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Timeout:       10 * time.Second,
}

// do sends a real request and checks the headers every answer must carry.
func do(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	res, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	checkHeaders(t, req, res.Header)
	return res, string(b)
}

func checkHeaders(t *testing.T, req *http.Request, h http.Header) {
	t.Helper()
	want := map[string]string{
		"X-Content-Type-Options": "nosniff",
		"X-Frame-Options":        "DENY",
		"Referrer-Policy":        "no-referrer",
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s %s: %s = %q, want %q", req.Method, req.URL.Path, k, got, v)
		}
	}
	csp := h.Get("Content-Security-Policy")
	if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("%s %s: Content-Security-Policy %q", req.Method, req.URL.Path, csp)
	}
	for k := range h {
		if strings.HasPrefix(k, "Access-Control-") {
			t.Errorf("%s %s: CORS header %s: %q", req.Method, req.URL.Path, k, h.Get(k))
		}
	}
}

func newReq(t *testing.T, method, u string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// login opens the printed URL and returns the cookie it sets.
func login(t *testing.T, s *Server) *http.Cookie {
	t.Helper()
	res, _ := do(t, newReq(t, "GET", s.URL(), nil))
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/" {
		t.Fatalf("first load: %s, Location %q; want 303 to /", res.Status, res.Header.Get("Location"))
	}
	for _, c := range res.Cookies() {
		if c.Value == token(s) {
			if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" {
				t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, Path=/", c)
			}
			return c
		}
	}
	t.Fatalf("first load set no cookie with the token: %v", res.Cookies())
	return nil
}

var csrfMeta = regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)">`)

// page loads / with the cookie and returns the CSRF token in it.
func page(t *testing.T, s *Server, c *http.Cookie) string {
	t.Helper()
	req := newReq(t, "GET", base(s)+"/", nil)
	req.AddCookie(c)
	res, body := do(t, req)
	if res.StatusCode != 200 {
		t.Fatalf("page with cookie: %s", res.Status)
	}
	m := csrfMeta.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%s", body)
	}
	return m[1]
}

func TestListensOnLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::1]:0", "[::]:0", "192.0.2.1:0", "example.com:0", "127.0.0.2:0", "127.0.0.1", "127.0.0.1:http", "127.0.0.1:70000"} {
		if s, err := New(newFakeHub(), Options{Listen: addr}); err == nil {
			s.Listener().Close()
			t.Errorf("New(Listen %q) = nil error, want refusal", addr)
		}
	}
	for _, addr := range []string{"", "127.0.0.1:0", "localhost:0"} {
		s, err := New(newFakeHub(), Options{Listen: addr})
		if err != nil {
			t.Fatalf("New(Listen %q): %v", addr, err)
		}
		if ip := s.Addr().(*net.TCPAddr).IP; !ip.Equal(net.IPv4(127, 0, 0, 1)) {
			t.Errorf("New(Listen %q) listens on %v", addr, s.Addr())
		}
		if !strings.HasPrefix(s.URL(), "http://"+s.Addr().String()+"/?token=") {
			t.Errorf("URL %q does not name %v", s.URL(), s.Addr())
		}
		s.Listener().Close()
	}
}

func TestTokenIsRandomAndLong(t *testing.T) {
	a, b := serve(t, newFakeHub()), serve(t, newFakeHub())
	raw, err := base64.RawURLEncoding.DecodeString(token(a))
	if err != nil || len(raw)*8 < 128 {
		t.Fatalf("token %q: %d bits, %v", token(a), len(raw)*8, err)
	}
	if token(a) == token(b) || a.csrf == a.token {
		t.Fatal("two tokens are equal")
	}
}

func TestHostHeaderMustBeLoopback(t *testing.T) {
	s := serve(t, newFakeHub())
	c := login(t, s)
	port := s.Addr().(*net.TCPAddr).Port
	for _, host := range []string{"evil.example", "evil.example:" + itoa(port), "127.0.0.1", "localhost",
		"127.0.0.1:" + itoa(port+1), "[::1]:" + itoa(port), "0.0.0.0:" + itoa(port), "localhost.:" + itoa(port), "LOCALHOST.evil:" + itoa(port)} {
		req := newReq(t, "GET", base(s)+"/", nil)
		req.Host = host
		req.AddCookie(c)
		if res, _ := do(t, req); res.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("Host %q: %s, want 421", host, res.Status)
		}
	}
	for _, host := range []string{"127.0.0.1:" + itoa(port), "localhost:" + itoa(port)} {
		req := newReq(t, "GET", base(s)+"/", nil)
		req.Host = host
		req.AddCookie(c)
		if res, _ := do(t, req); res.StatusCode != 200 {
			t.Errorf("Host %q: %s, want 200", host, res.Status)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestTokenRequired(t *testing.T) {
	s := serve(t, newFakeHub(request("sb1-1", "example.com", time.Minute)))
	wrong := strings.Repeat("A", len(token(s)))
	for _, path := range []string{"/", "/app.js", "/app.css", "/events", "/nope"} {
		for name, set := range map[string]func(*http.Request){
			"no token":     func(*http.Request) {},
			"wrong cookie": func(r *http.Request) { r.AddCookie(&http.Cookie{Name: s.cookie, Value: wrong}) },
			"wrong bearer": func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+wrong) },
			"wrong query":  func(r *http.Request) { r.URL.RawQuery = "token=" + wrong },
			"empty cookie": func(r *http.Request) { r.AddCookie(&http.Cookie{Name: s.cookie, Value: ""}) },
		} {
			req := newReq(t, "GET", base(s)+path, nil)
			set(req)
			if res, body := do(t, req); res.StatusCode != http.StatusForbidden || strings.Contains(body, "csrf") {
				t.Errorf("GET %s, %s: %s, want 403", path, name, res.Status)
			}
		}
	}
	// The URL's token works on the page only (to set the cookie), and the
	// cookie or a bearer header everywhere.
	req := newReq(t, "GET", base(s)+"/app.js?token="+token(s), nil)
	if res, _ := do(t, req); res.StatusCode != http.StatusForbidden {
		t.Errorf("GET /app.js?token=: %s, want 403", res.Status)
	}
	c := login(t, s)
	for _, path := range []string{"/", "/app.js", "/app.css"} {
		req := newReq(t, "GET", base(s)+path, nil)
		req.AddCookie(c)
		if res, _ := do(t, req); res.StatusCode != 200 {
			t.Errorf("GET %s with the cookie: %s", path, res.Status)
		}
		req = newReq(t, "GET", base(s)+path, nil)
		req.Header.Set("Authorization", "Bearer "+token(s))
		if res, _ := do(t, req); res.StatusCode != 200 {
			t.Errorf("GET %s with a bearer token: %s", path, res.Status)
		}
	}
	// A cookie named for another port's page does not count.
	req = newReq(t, "GET", base(s)+"/", nil)
	req.AddCookie(&http.Cookie{Name: "airlock_ui_1", Value: token(s)})
	if res, _ := do(t, req); res.StatusCode != http.StatusForbidden {
		t.Errorf("another port's cookie: %s, want 403", res.Status)
	}
}

func TestPageHasNoInlineScript(t *testing.T) {
	s := serve(t, newFakeHub())
	c := login(t, s)
	req := newReq(t, "GET", base(s)+"/", nil)
	req.AddCookie(c)
	res, body := do(t, req)
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Errorf("page Content-Type %q", ct)
	}
	if m := regexp.MustCompile(`(?i)<script(\s[^>]*)?>`).FindAllString(body, -1); len(m) != 1 || !strings.Contains(m[0], `src="/app.js"`) {
		t.Errorf("script tags %q: want only <script src=\"/app.js\">", m)
	}
	if regexp.MustCompile(`(?i)\son[a-z]+\s*=|javascript:|https?://`).MatchString(body) {
		t.Errorf("page has an inline handler or an external URL:\n%s", body)
	}
	req = newReq(t, "GET", base(s)+"/app.js", nil)
	req.AddCookie(c)
	res, body = do(t, req)
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/javascript") {
		t.Errorf("app.js Content-Type %q", ct)
	}
	if strings.Contains(body, "innerHTML") || regexp.MustCompile(`https?://`).MatchString(body) {
		t.Error("app.js uses innerHTML or an external URL")
	}
}

// post sends a state change as the page does, with changes applied.
func post(t *testing.T, s *Server, c *http.Cookie, csrf, path, body string, change func(*http.Request)) (*http.Response, string) {
	t.Helper()
	req := newReq(t, "POST", base(s)+path, strings.NewReader(body))
	req.AddCookie(c)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-CSRF-Token", csrf)
	req.Header.Set("Origin", base(s))
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	if change != nil {
		change(req)
	}
	return do(t, req)
}

func TestChangesNeedCSRFAndSameOrigin(t *testing.T) {
	h := newFakeHub(request("sb1-1", "example.com", time.Minute))
	s := serve(t, h)
	c := login(t, s)
	csrf := page(t, s, c)
	body := `{"id":"sb1-1","allow":true,"scope":"once"}`
	port := itoa(s.Addr().(*net.TCPAddr).Port)
	refused := map[string]func(*http.Request){
		"no CSRF token":          func(r *http.Request) { r.Header.Del("X-CSRF-Token") },
		"wrong CSRF token":       func(r *http.Request) { r.Header.Set("X-CSRF-Token", strings.Repeat("x", len(csrf))) },
		"the login token":        func(r *http.Request) { r.Header.Set("X-CSRF-Token", token(s)) },
		"cross-site":             func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "cross-site") },
		"same-site":              func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "same-site") },
		"another origin":         func(r *http.Request) { r.Header.Set("Origin", "http://evil.example") },
		"another port's origin":  func(r *http.Request) { r.Header.Set("Origin", "http://127.0.0.1:1") },
		"null origin":            func(r *http.Request) { r.Header.Set("Origin", "null") },
		"https origin":           func(r *http.Request) { r.Header.Set("Origin", "https://127.0.0.1:"+port) },
		"no cookie":              func(r *http.Request) { r.Header.Del("Cookie") },
		"a form's content type":  func(r *http.Request) { r.Header.Set("Content-Type", "application/x-www-form-urlencoded") },
		"text/plain":             func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") },
		"no content type":        func(r *http.Request) { r.Header.Del("Content-Type") },
		"the CSRF token as auth": func(r *http.Request) { r.Header.Del("Cookie"); r.Header.Set("Authorization", "Bearer "+csrf) },
	}
	for name, change := range refused {
		for _, path := range []string{"/api/decide", "/api/revoke"} {
			res, _ := post(t, s, c, csrf, path, body, change)
			if res.StatusCode/100 != 4 {
				t.Errorf("POST %s, %s: %s, want refused", path, name, res.Status)
			}
		}
	}
	if d := h.decided(); len(d) != 0 {
		t.Fatalf("refused requests decided: %+v", d)
	}
	// The page's own request, and one from a client that sends neither
	// Origin nor Sec-Fetch-Site (curl), both with the CSRF token.
	res, out := post(t, s, c, csrf, "/api/decide", body, nil)
	if res.StatusCode != 200 {
		t.Fatalf("the page's POST: %s %s", res.Status, out)
	}
	h.add(request("sb1-2", "example.org", time.Minute))
	res, out = post(t, s, c, csrf, "/api/decide", `{"id":"sb1-2","allow":false,"scope":"project","wildcard":true}`, func(r *http.Request) {
		r.Header.Del("Origin")
		r.Header.Del("Sec-Fetch-Site")
	})
	if res.StatusCode != 200 {
		t.Fatalf("POST without Origin: %s %s", res.Status, out)
	}
	want := []decided{
		{"sb1-1", approval.Decision{Allow: true, Scope: approval.Once, By: "ui"}},
		{"sb1-2", approval.Decision{Allow: false, Scope: approval.Project, Wildcard: true, By: "ui"}},
	}
	if got := h.decided(); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("decisions %+v, want %+v", got, want)
	}
	// Revoke the rule the second made.
	res, out = post(t, s, c, csrf, "/api/revoke", `{"id":"r-sb1-2"}`, nil)
	if res.StatusCode != 200 || !strings.Contains(out, `"revoked":{"id":"r-sb1-2"`) {
		t.Fatalf("revoke: %s %s", res.Status, out)
	}
	if rs, _ := h.Rules(context.Background()); len(rs) != 0 {
		t.Fatalf("rules after revoke: %+v", rs)
	}
}

func TestDecideErrors(t *testing.T) {
	h := newFakeHub(request("sb1-1", "example.com", time.Minute))
	s := serve(t, h)
	c := login(t, s)
	csrf := page(t, s, c)
	for _, tc := range []struct {
		body string
		code int
	}{
		{`{"id":"sb1-1","allow":true}`, 200}, // scope once by default
		{`{"id":"sb1-1","allow":true}`, 409}, // already decided
		{`{"id":"sb9-9","allow":true}`, 404},
		{`{"id":"sb1-1","allow":true,"scope":"forever"}`, 400},
		{`{"allow":true}`, 400},
		{`{"id":"sb1-1","allow":true,"by":"cli"}`, 400}, // the surface is always ui
		{`{"id":"sb1-1"`, 400},
		{`{"id":"sb1-1"} {"id":"sb1-1"}`, 400},
	} {
		if res, out := post(t, s, c, csrf, "/api/decide", tc.body, nil); res.StatusCode != tc.code {
			t.Errorf("decide %s: %s %s, want %d", tc.body, res.Status, out, tc.code)
		}
	}
	if res, _ := post(t, s, c, csrf, "/api/revoke", `{"id":"nope"}`, nil); res.StatusCode != http.StatusConflict {
		t.Errorf("revoke unknown: %s", res.Status)
	}
}

func TestBodiesAreCapped(t *testing.T) {
	h := newFakeHub(request("sb1-1", "example.com", time.Minute))
	s := serve(t, h)
	c := login(t, s)
	csrf := page(t, s, c)
	big := `{"id":"sb1-1","allow":true,"scope":"once"}` + strings.Repeat(" ", MaxBody)
	if res, _ := post(t, s, c, csrf, "/api/decide", big, nil); res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body: %s, want 413", res.Status)
	}
	// Without a Content-Length (chunked), the cap still holds.
	res, _ := post(t, s, c, csrf, "/api/decide", "", func(r *http.Request) {
		r.Body = io.NopCloser(strings.NewReader(big))
		r.ContentLength = -1
	})
	if res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized chunked body: %s, want 413", res.Status)
	}
	if d := h.decided(); len(d) != 0 {
		t.Fatalf("an oversized body decided: %+v", d)
	}
}

func TestOnlyTheMethodsNeeded(t *testing.T) {
	s := serve(t, newFakeHub())
	c := login(t, s)
	csrf := page(t, s, c)
	for _, tc := range []struct{ method, path string }{
		{"POST", "/"}, {"PUT", "/"}, {"DELETE", "/"}, {"OPTIONS", "/"}, {"OPTIONS", "/api/decide"},
		{"GET", "/api/decide"}, {"PUT", "/api/decide"}, {"PATCH", "/api/revoke"}, {"POST", "/events"}, {"POST", "/app.js"},
	} {
		req := newReq(t, tc.method, base(s)+tc.path, strings.NewReader("{}"))
		req.AddCookie(c)
		req.Header.Set("X-CSRF-Token", csrf)
		req.Header.Set("Origin", "http://evil.example")
		req.Header.Set("Access-Control-Request-Method", "POST")
		if res, _ := do(t, req); res.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s %s: %s, want 405", tc.method, tc.path, res.Status)
		}
	}
}

// sse reads Server-Sent Events as (event, data) pairs.
func sse(t *testing.T, s *Server, c *http.Cookie) (<-chan [2]string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req := newReq(t, "GET", base(s)+"/events", nil).WithContext(ctx)
	req.AddCookie(c)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	checkHeaders(t, req, res.Header)
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("/events: %s %q", res.Status, res.Header.Get("Content-Type"))
	}
	ch := make(chan [2]string, 16)
	go func() {
		defer close(ch)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		var ev string
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				ev = v
			} else if v, ok := strings.CutPrefix(line, "data: "); ok {
				ch <- [2]string{ev, v}
			}
		}
	}()
	return ch, cancel
}

func next(t *testing.T, ch <-chan [2]string, want string) string {
	t.Helper()
	select {
	case e, ok := <-ch:
		if !ok {
			t.Fatalf("stream ended waiting for %q", want)
		}
		if e[0] != want {
			t.Fatalf("event %q %s, want %q", e[0], e[1], want)
		}
		return e[1]
	case <-time.After(5 * time.Second):
		t.Fatalf("no %q event", want)
	}
	return ""
}

func TestEventStream(t *testing.T) {
	h := newFakeHub(request("sb1-1", "example.com", time.Minute))
	s := serve(t, h)
	c := login(t, s)
	csrf := page(t, s, c)
	ch, stop := sse(t, s, c)
	defer stop()
	var snap snapshot
	if err := json.Unmarshal([]byte(next(t, ch, "snapshot")), &snap); err != nil {
		t.Fatal(err)
	}
	if len(snap.Pending) != 1 || snap.Pending[0].ID != "sb1-1" || len(snap.Rules) != 0 {
		t.Fatalf("snapshot %+v", snap)
	}
	h.add(request("sb2-1", "example.org", time.Minute))
	if ev := next(t, ch, "request"); !strings.Contains(ev, `"id":"sb2-1"`) {
		t.Fatalf("request event %s", ev)
	}
	post(t, s, c, csrf, "/api/decide", `{"id":"sb2-1","allow":true,"scope":"global"}`, nil)
	if ev := next(t, ch, "resolved"); !strings.Contains(ev, `"id":"sb2-1"`) || !strings.Contains(ev, `"by":"ui"`) {
		t.Fatalf("resolved event %s", ev)
	}
	if ev := next(t, ch, "rules"); !strings.Contains(ev, `"id":"r-sb2-1"`) {
		t.Fatalf("rules event %s", ev)
	}
	// A new stream's snapshot lists the decision among the last ones.
	ch2, stop2 := sse(t, s, c)
	defer stop2()
	if err := json.Unmarshal([]byte(next(t, ch2, "snapshot")), &snap); err != nil {
		t.Fatal(err)
	}
	if len(snap.Recent) != 1 || snap.Recent[0].Request.ID != "sb2-1" || len(snap.Pending) != 1 || len(snap.Rules) != 1 {
		t.Fatalf("second snapshot %+v", snap)
	}
}

// The handler alone (as an httptest.Server would serve it) applies the
// same checks.
func TestHandlerChecksWithRecorder(t *testing.T) {
	s, err := New(newFakeHub(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Listener().Close()
	r := httptest.NewRequest("GET", "/", nil)
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r) // Host example.com
	if w.Code != http.StatusMisdirectedRequest {
		t.Errorf("httptest's default Host: %d, want 421", w.Code)
	}
	r = httptest.NewRequest("GET", s.URL(), nil)
	w = httptest.NewRecorder()
	s.ServeHTTP(w, r)
	if w.Code != http.StatusSeeOther {
		t.Errorf("the printed URL: %d, want 303", w.Code)
	}
}
