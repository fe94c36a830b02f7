package credentials

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/secrets"
)

// The fake provider: a TLS token endpoint (trusted through its own CA pool,
// never by skipping verification) that, like Claude's and OpenAI's, accepts
// each refresh token once and answers a second use with invalid_grant.
type provider struct {
	t    *testing.T
	kind Kind
	srv  *httptest.Server

	mu      sync.Mutex
	valid   map[string]bool // refresh tokens that may be spent
	spent   map[string]bool
	posts   int
	reused  int
	serial  int
	fail    int              // answer every request with this status
	during  func()           // called while a refresh is being answered
	lastTok tokenResponse    // the last answer
	rotate  bool             // issue a new refresh token (Gemini's does not)
	short   bool             // issue tokens valid for 2 minutes
	seen    []map[string]any // request bodies, decoded
}

func newProvider(t *testing.T, kind Kind, refresh string) *provider {
	p := &provider{t: t, kind: kind, valid: map[string]bool{refresh: true}, spent: map[string]bool{}, rotate: kind != Gemini}
	p.srv = httptest.NewTLSServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *provider) cfg(now func() time.Time) config {
	return config{tokenURL: p.srv.URL + "/oauth/token", client: p.srv.Client(), now: now, poll: 10 * time.Millisecond}
}

func (p *provider) serve(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.posts++
	if p.during != nil {
		p.during()
	}
	if p.fail != 0 {
		w.WriteHeader(p.fail)
		io.WriteString(w, `{"error":"temporarily_unavailable","error_description":"echo sk-ant-ort01-REAL"}`)
		return
	}
	body, _ := io.ReadAll(r.Body)
	got := map[string]any{}
	switch ct := r.Header.Get("Content-Type"); ct {
	case "application/json":
		json.Unmarshal(body, &got)
	case "application/x-www-form-urlencoded":
		v, _ := url.ParseQuery(string(body))
		for k := range v {
			got[k] = v.Get(k)
		}
	default:
		p.t.Errorf("refresh request with Content-Type %q", ct)
	}
	p.seen = append(p.seen, got)
	wantClient := map[Kind]string{Claude: claudeClientID, Codex: codexClientID, Gemini: geminiClientID}[p.kind]
	if r.Method != http.MethodPost || got["grant_type"] != "refresh_token" || got["client_id"] != wantClient {
		p.t.Errorf("refresh request %s with %v: want a POST of grant_type=refresh_token and client_id %s", r.Method, keys(got), wantClient)
	}
	rt, _ := got["refresh_token"].(string)
	if !p.valid[rt] {
		if p.spent[rt] {
			p.reused++
		}
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":"invalid_grant","error_description":"refresh token already used: `+rt+`"}`)
		return
	}
	p.serial++
	n := p.serial
	resp := tokenResponse{AccessToken: fmt.Sprintf("access-NEW-%d-%s", n, p.kind), ExpiresIn: "28800", TokenType: "Bearer"}
	if p.rotate {
		delete(p.valid, rt)
		p.spent[rt] = true
		resp.RefreshToken = fmt.Sprintf("refresh-NEW-%d-%s", n, p.kind)
		p.valid[resp.RefreshToken] = true
	}
	switch p.kind {
	case Claude:
		resp.AccessToken = "sk-ant-oat01-" + resp.AccessToken
		resp.Scope = "user:inference user:profile"
	case Codex:
		resp.AccessToken = jwt(map[string]any{"exp": time.Now().Add(10 * 24 * time.Hour).Unix(), "n": n}, "access-sig-NEW")
		resp.IDToken = jwt(map[string]any{"email": "u@example.com", "n": n}, "id-sig-NEW")
		resp.ExpiresIn = ""
	case Gemini:
		resp.AccessToken = "ya29." + resp.AccessToken
		resp.IDToken = jwt(map[string]any{"aud": geminiClientID}, "google-sig-NEW")
		resp.Scope = "openid https://www.googleapis.com/auth/cloud-platform"
	}
	if p.short {
		resp.ExpiresIn = "120"
	}
	p.lastTok = resp
	json.NewEncoder(w).Encode(resp)
}

func (p *provider) counts() (posts, reused int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.posts, p.reused
}

func keys(m map[string]any) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	return k
}

func jwt(claims map[string]any, sig string) string {
	h := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT"}`))
	c, _ := json.Marshal(claims)
	return h + "." + base64.RawURLEncoding.EncodeToString(c) + "." + base64.RawURLEncoding.EncodeToString([]byte(sig))
}

// realSecrets are in the fixtures and must never reach the sandbox's copy or a
// message.
var realSecrets = []string{"sk-ant-oat01-REAL", "sk-ant-ort01-REAL", "REAL-access", "REAL-refresh", "sk-proj-REAL", "mcp-REAL",
	"ya29.REAL", "1//REAL", base64.RawURLEncoding.EncodeToString([]byte("id-sig-REAL")), base64.RawURLEncoding.EncodeToString([]byte("google-sig-REAL"))}

// fixture writes a login file of kind in a new home, expiring at exp.
func fixture(t *testing.T, kind Kind, exp time.Time) (home, rel, refresh string) {
	home = t.TempDir()
	var doc any
	switch kind {
	case Claude:
		rel, refresh = claudePath, "sk-ant-ort01-REAL-1"
		doc = map[string]any{
			"claudeAiOauth": map[string]any{
				"accessToken": "sk-ant-oat01-REAL-access", "refreshToken": refresh, "expiresAt": exp.UnixMilli(),
				"scopes": []string{"user:inference", "user:profile"}, "subscriptionType": "max", "rateLimitTier": "default_claude_max_20x",
				"refreshTokenExpiresAt": exp.Add(30 * 24 * time.Hour).UnixMilli(), "futureField": map[string]any{"kept": true},
			},
			"mcpOAuth": map[string]any{"srv|1": map[string]any{"accessToken": "mcp-REAL-token", "serverUrl": "https://mcp.example.com"}},
		}
	case Codex:
		rel, refresh = codexPath, "REAL-refresh-codex-1"
		doc = map[string]any{
			"OPENAI_API_KEY": "sk-proj-REAL-key",
			"tokens": map[string]any{
				"id_token":      jwt(map[string]any{"email": "u@example.com", "https://api.openai.com/auth": map[string]any{"chatgpt_plan_type": "plus", "chatgpt_account_id": "acc-1"}}, "id-sig-REAL"),
				"access_token":  jwt(map[string]any{"exp": exp.Unix(), "https://api.openai.com/auth": map[string]any{"chatgpt_account_id": "acc-1"}}, "REAL-access-sig"),
				"refresh_token": refresh, "account_id": "acc-1",
			},
			"last_refresh": exp.Add(-10 * 24 * time.Hour).UTC().Format(time.RFC3339Nano),
			"auth_mode":    "chatgpt",
		}
	case Gemini:
		rel, refresh = geminiPath, "1//REAL-refresh-gemini"
		doc = map[string]any{
			"access_token": "ya29.REAL-access", "refresh_token": refresh, "scope": "openid https://www.googleapis.com/auth/cloud-platform",
			"token_type": "Bearer", "id_token": jwt(map[string]any{"aud": geminiClientID}, "google-sig-REAL"), "expiry_date": exp.UnixMilli(),
		}
	}
	b, _ := json.Marshal(doc)
	path := filepath.Join(home, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o640); err != nil {
		t.Fatal(err)
	}
	return home, rel, refresh
}

var hostsOf = map[Kind][]string{Claude: {"api.anthropic.com"}, Codex: {"chatgpt.com"}, Gemini: {"cloudcode-pa.googleapis.com", "oauth2.googleapis.com"}}

// swapped is the token the gateway would send for the login's placeholder.
func swapped(t *testing.T, l *Login) string {
	t.Helper()
	set, err := secrets.NewSet(l.Secret())
	if err != nil {
		t.Fatal(err)
	}
	v, names, err := set.SwapHeader(hostsOf[l.Kind][0], "Bearer "+l.Secret().Placeholder)
	if err != nil || len(names) != 1 {
		t.Fatalf("swap: %v %v", names, err)
	}
	return strings.TrimPrefix(v, "Bearer ")
}

func readDoc(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

func assertNoSecret(t *testing.T, what, s string) {
	t.Helper()
	for _, v := range realSecrets {
		if strings.Contains(s, v) {
			t.Fatalf("%s holds a real secret (%s…): %s", what, v[:min(len(v), 12)], s)
		}
	}
}

func TestTheSandboxCopyHoldsAPlaceholderAndNoSecret(t *testing.T) {
	now := time.Now()
	tests := []struct {
		kind   Kind
		prefix string
		check  func(t *testing.T, doc map[string]any, ph string)
	}{
		{Claude, "sk-ant-oat01-" + secrets.Marker, func(t *testing.T, doc map[string]any, ph string) {
			o := doc["claudeAiOauth"].(map[string]any)
			if o["accessToken"] != ph || o["refreshToken"] != nil || o["refreshTokenExpiresAt"] != nil {
				t.Fatalf("claudeAiOauth = %v: want the placeholder and no refresh token", o)
			}
			if exp, _ := num(o["expiresAt"]); time.UnixMilli(exp).Before(now.Add(300 * 24 * time.Hour)) {
				t.Fatalf("expiresAt %v is not far off; claude would refresh by itself", time.UnixMilli(exp))
			}
			if o["subscriptionType"] != "max" || len(strList(o["scopes"])) != 2 || o["futureField"] == nil {
				t.Fatalf("claudeAiOauth = %v: the fields claude needs are gone", o)
			}
			if doc["mcpOAuth"] != nil {
				t.Fatal("MCP servers' tokens reached the sandbox's copy")
			}
		}},
		{Codex, "eyJ", func(t *testing.T, doc map[string]any, ph string) {
			o := doc["tokens"].(map[string]any)
			if o["access_token"] != ph || o["refresh_token"] != "" || o["account_id"] != "acc-1" {
				t.Fatalf("tokens = %v: want the placeholder, an empty refresh token and the account", o)
			}
			if doc["OPENAI_API_KEY"] != nil || doc["auth_mode"] != "chatgpt" {
				t.Fatalf("top level = %v", doc)
			}
			claims, ok := jwtPayload(o["id_token"].(string))
			if !ok || claims["email"] != "u@example.com" || claims["https://api.openai.com/auth"] == nil {
				t.Fatalf("id_token claims = %v: codex reads the plan and account from them", claims)
			}
			if !strings.HasSuffix(o["id_token"].(string), "."+unsignedSignature) {
				t.Fatal("the id_token kept its signature")
			}
			if exp, ok := jwtExp(ph); !ok || exp.Before(now.Add(300*24*time.Hour)) {
				t.Fatalf("the placeholder is not a JWT with a far-off exp (%v, %v)", exp, ok)
			}
			if c, _ := jwtPayload(ph); len(c) != 2 || c[codexAuthClaim] == nil {
				t.Fatalf("the placeholder's claims are %v: want exp and the account claim only", c)
			}
		}},
		{Gemini, "ya29." + secrets.Marker, func(t *testing.T, doc map[string]any, ph string) {
			if doc["access_token"] != ph || doc["refresh_token"] != nil || doc["id_token"] != nil {
				t.Fatalf("copy = %v: want the placeholder and no refresh or id token", doc)
			}
			if doc["token_type"] != "Bearer" || doc["scope"] == nil {
				t.Fatalf("copy = %v: token_type and scope are needed", doc)
			}
			if exp, _ := num(doc["expiry_date"]); time.UnixMilli(exp).Before(now.Add(300 * 24 * time.Hour)) {
				t.Fatal("expiry_date is not far off; the library would refresh by itself")
			}
		}},
	}
	for _, tt := range tests {
		t.Run(string(tt.kind)+"'s copy keeps what the CLI reads and drops the rest", func(t *testing.T) {
			home, rel, refresh := fixture(t, tt.kind, now.Add(2*time.Hour))
			p := newProvider(t, tt.kind, refresh)
			l, err := open(context.Background(), home, rel, hostsOf[tt.kind], p.cfg(time.Now))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if posts, _ := p.counts(); posts != 0 {
				t.Fatalf("a login valid for 2 h was refreshed (%d requests)", posts)
			}
			sb := l.SandboxFile()
			assertNoSecret(t, "the sandbox's copy", string(sb))
			ph := l.Secret().Placeholder
			if !strings.HasPrefix(ph, tt.prefix) || !strings.Contains(string(sb), ph) {
				t.Fatalf("placeholder %.40q… does not start with %q or is not in the copy", ph, tt.prefix)
			}
			tt.check(t, readDoc(t, writeTemp(t, sb)), ph)
			real, _ := formats[tt.kind].read(readDoc(t, filepath.Join(home, rel)))
			if got := swapped(t, l); got != real.access {
				t.Fatalf("the gateway would swap in %.20q…, not the real token", got)
			}
		})
	}
}

func writeTemp(t *testing.T, b []byte) string {
	p := filepath.Join(t.TempDir(), "copy.json")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAnExpiredLoginIsRefreshedOnOpenAndWrittenBack(t *testing.T) {
	for _, kind := range []Kind{Claude, Codex, Gemini} {
		t.Run(string(kind)+" is refreshed, and the file keeps its other fields and mode", func(t *testing.T) {
			home, rel, refresh := fixture(t, kind, time.Now().Add(-time.Hour))
			path := filepath.Join(home, rel)
			before := readDoc(t, path)
			p := newProvider(t, kind, refresh)
			l, err := open(context.Background(), home, rel, hostsOf[kind], p.cfg(time.Now))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if posts, _ := p.counts(); posts != 1 {
				t.Fatalf("%d refresh requests, want 1", posts)
			}
			if got := swapped(t, l); got != p.lastTok.AccessToken {
				t.Fatalf("the gateway swaps in %.24q…, not the refreshed token", got)
			}
			after := readDoc(t, path)
			tk, _ := formats[kind].read(after)
			if tk.access != p.lastTok.AccessToken {
				t.Fatal("the file does not hold the refreshed access token")
			}
			if wantRT := map[bool]string{true: p.lastTok.RefreshToken, false: refresh}[p.rotate]; tk.refresh != wantRT {
				t.Fatalf("the file's refresh token is %q, want %q", tk.refresh, wantRT)
			}
			if !tk.expiry.After(time.Now().Add(time.Hour)) {
				t.Fatalf("the file's expiry %v was not moved on", tk.expiry)
			}
			switch kind {
			case Claude:
				if after["mcpOAuth"] == nil || after["claudeAiOauth"].(map[string]any)["futureField"] == nil ||
					after["claudeAiOauth"].(map[string]any)["subscriptionType"] != "max" {
					t.Fatalf("fields airlock does not manage were lost: %v", after)
				}
			case Codex:
				if after["OPENAI_API_KEY"] != before["OPENAI_API_KEY"] || after["auth_mode"] != "chatgpt" || after["tokens"].(map[string]any)["account_id"] != "acc-1" ||
					after["tokens"].(map[string]any)["id_token"] != p.lastTok.IDToken || after["last_refresh"] == before["last_refresh"] {
					t.Fatalf("codex's file after the refresh: %v", after)
				}
			case Gemini:
				if after["token_type"] != "Bearer" || after["id_token"] != p.lastTok.IDToken {
					t.Fatalf("gemini's file after the refresh: %v", after)
				}
			}
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
				t.Fatalf("mode after rewrite: %v %v, want 0640", fi.Mode(), err)
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(path), claudeLockName)); !os.IsNotExist(err) {
				t.Fatal("Claude Code's refresh lock was left behind")
			}
		})
	}
}

func TestClaudeRefreshSendsItsScopesAndHoldsClaudesOwnLock(t *testing.T) {
	home, rel, refresh := fixture(t, Claude, time.Now().Add(-time.Minute))
	p := newProvider(t, Claude, refresh)
	held := false
	p.during = func() {
		fi, err := os.Stat(filepath.Join(home, ".claude", claudeLockName))
		held = err == nil && fi.IsDir()
	}
	l, err := open(context.Background(), home, rel, hostsOf[Claude], p.cfg(time.Now))
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if !held {
		t.Fatal("claude's .oauth_refresh.lock was not held during the refresh; the real CLI could spend the same token")
	}
	if got := p.seen[0]["scope"]; got != "user:inference user:profile" {
		t.Fatalf("scope = %v, want the login's scopes", got)
	}
}

func TestConcurrentRefreshersSpendTheRefreshTokenOnce(t *testing.T) {
	for _, kind := range []Kind{Claude, Codex} {
		t.Run(string(kind)+": four airlocks open an expired login at once", func(t *testing.T) {
			home, rel, refresh := fixture(t, kind, time.Now().Add(-time.Hour))
			p := newProvider(t, kind, refresh)
			logins := make([]*Login, 4)
			errs := make([]error, 4)
			var wg sync.WaitGroup
			for i := range logins {
				wg.Add(1)
				go func() {
					defer wg.Done()
					logins[i], errs[i] = open(context.Background(), home, rel, hostsOf[kind], p.cfg(time.Now))
				}()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			posts, reused := p.counts()
			if posts != 1 || reused != 0 {
				t.Fatalf("%d refresh requests, %d with a spent token; want exactly 1 and none", posts, reused)
			}
			for _, l := range logins {
				if got := swapped(t, l); got != p.lastTok.AccessToken {
					t.Fatal("an airlock did not adopt the token the first one refreshed")
				}
			}
		})
	}
}

// TestTwoProcessesSpendTheRefreshTokenOnce runs the refresh in two child
// processes (this test binary again) at once: the lock is the file's, not a
// mutex in one process.
func TestTwoProcessesSpendTheRefreshTokenOnce(t *testing.T) {
	if os.Getenv("AIRLOCK_CREDENTIALS_CHILD") != "" {
		t.Skip("in the child")
	}
	home, rel, refresh := fixture(t, Claude, time.Now().Add(-time.Hour))
	p := newProvider(t, Claude, refresh)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	var cmds []*exec.Cmd
	for range 2 {
		c := exec.Command(os.Args[0], "-test.run=^TestChildRefresh$", "-test.count=1")
		c.Env = append(os.Environ(), "AIRLOCK_CREDENTIALS_CHILD="+strings.Join([]string{home, rel, p.srv.URL, ca}, "\n"))
		c.Stdout, c.Stderr = os.Stderr, os.Stderr
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("child: %v", err)
		}
	}
	if posts, reused := p.counts(); posts != 1 || reused != 0 {
		t.Fatalf("%d refresh requests, %d with a spent token; want exactly 1 and none", posts, reused)
	}
}

func TestChildRefresh(t *testing.T) {
	env := os.Getenv("AIRLOCK_CREDENTIALS_CHILD")
	if env == "" {
		t.Skip("run by TestTwoProcessesSpendTheRefreshTokenOnce")
	}
	f := strings.Split(env, "\n")
	pool := x509Pool(t, f[3])
	cfg := config{tokenURL: f[2] + "/oauth/token", client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: pool}}, now: time.Now, poll: time.Second}
	l, err := open(context.Background(), f[0], f[1], hostsOf[Claude], cfg)
	if err != nil {
		t.Fatal(err)
	}
	if swapped(t, l) == "sk-ant-oat01-REAL-access" {
		t.Fatal("still the expired token")
	}
}

func TestAFailedRefreshSaysWhatToDoAndLeavesTheFile(t *testing.T) {
	tests := []struct {
		name    string
		kind    Kind
		status  int  // the provider's answer; 0: the refresh token is not one it knows
		expired bool // errors.Is ErrLoginExpired
		want    string
	}{
		{"a spent claude refresh token asks to sign in again", Claude, 0, true, "run `claude` and type /login"},
		{"a spent codex refresh token asks for codex login", Codex, 0, true, "codex login"},
		{"a refused gemini refresh token asks to log in with Google", Gemini, 0, true, "Login with Google"},
		{"a provider outage is not an expired login", Claude, http.StatusServiceUnavailable, false, "HTTP 503, temporarily_unavailable; will retry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			home, rel, _ := fixture(t, tt.kind, time.Now().Add(-time.Hour))
			before, _ := os.ReadFile(filepath.Join(home, rel))
			p := newProvider(t, tt.kind, "some-other-token")
			p.fail = tt.status
			_, err := open(context.Background(), home, rel, hostsOf[tt.kind], p.cfg(time.Now))
			if err == nil {
				t.Fatal("Open succeeded")
			}
			if errors.Is(err, ErrLoginExpired) != tt.expired || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q: want ErrLoginExpired=%v and %q", err, tt.expired, tt.want)
			}
			assertNoSecret(t, "the error", err.Error())
			if after, _ := os.ReadFile(filepath.Join(home, rel)); string(after) != string(before) {
				t.Fatal("a failed refresh changed the user's file")
			}
		})
	}
}

func TestALoginWithoutARefreshTokenCannotBeRefreshed(t *testing.T) {
	home, rel, _ := fixture(t, Gemini, time.Now().Add(-time.Hour))
	path := filepath.Join(home, rel)
	doc := readDoc(t, path)
	delete(doc, "refresh_token")
	b, _ := json.Marshal(doc)
	os.WriteFile(path, b, 0o600)
	p := newProvider(t, Gemini, "x")
	_, err := open(context.Background(), home, rel, hostsOf[Gemini], p.cfg(time.Now))
	if !errors.Is(err, ErrLoginExpired) || !strings.Contains(err.Error(), "no refresh token") {
		t.Fatalf("error = %v", err)
	}
	if posts, _ := p.counts(); posts != 0 {
		t.Fatal("a request went out without a refresh token")
	}
}

// clock is a settable now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// eventually waits for cond, failing after a generous bound (a hang, not a
// timing assertion).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting until %s", what)
}

func TestRunRefreshesBeforeExpiryAndTheGatewaySeesTheNewToken(t *testing.T) {
	c := &clock{t: time.Now()}
	home, rel, refresh := fixture(t, Claude, c.now().Add(15*time.Minute))
	p := newProvider(t, Claude, refresh)
	l, err := open(context.Background(), home, rel, hostsOf[Claude], p.cfg(c.now))
	if err != nil {
		t.Fatal(err)
	}
	set, _ := secrets.NewSet(l.Secret()) // made once, as the gateway does
	done := make(chan error, 1)
	go func() { done <- l.Run(context.Background()) }()
	c.add(6 * time.Minute) // 9 minutes left: due
	eventually(t, "the refresher renewed the token", func() bool { posts, _ := p.counts(); return posts == 1 })
	eventually(t, "the Set swaps in the new token", func() bool {
		v, _, _ := set.SwapHeader("api.anthropic.com", l.Secret().Placeholder)
		p.mu.Lock()
		defer p.mu.Unlock()
		return v == p.lastTok.AccessToken
	})
	if got := set.RedactString("echo sk-ant-oat01-REAL-access"); strings.Contains(got, "REAL") {
		t.Fatal("the replaced token is no longer redacted from responses")
	}
	l.Close()
	if err := <-done; err != nil {
		t.Fatalf("Run after Close = %v", err)
	}
	if posts, _ := p.counts(); posts != 1 {
		t.Fatalf("%d refreshes of a token valid for 8 h", posts)
	}
}

func TestRunAdoptsATokenTheRealCLIRefreshed(t *testing.T) {
	home, rel, refresh := fixture(t, Codex, time.Now().Add(5*24*time.Hour))
	p := newProvider(t, Codex, refresh)
	l, err := open(context.Background(), home, rel, hostsOf[Codex], p.cfg(time.Now))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go l.Run(context.Background())
	// The real codex refreshes on the host and rewrites its file.
	path := filepath.Join(home, rel)
	doc := readDoc(t, path)
	fresh := jwt(map[string]any{"exp": time.Now().Add(10 * 24 * time.Hour).Unix()}, "by-the-real-cli")
	doc["tokens"].(map[string]any)["access_token"] = fresh
	b, _ := json.Marshal(doc)
	if err := writeAtomic(path, b); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the refresher adopted the CLI's token", func() bool { return swapped(t, l) == fresh })
	if posts, _ := p.counts(); posts != 0 {
		t.Fatal("the refresher spent the refresh token instead of adopting")
	}
}

func TestRunStopsWhenTheLoginIsRevoked(t *testing.T) {
	c := &clock{t: time.Now()}
	home, rel, _ := fixture(t, Gemini, c.now().Add(time.Hour))
	p := newProvider(t, Gemini, "not-the-users")
	l, err := open(context.Background(), home, rel, hostsOf[Gemini], p.cfg(c.now))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c.add(55 * time.Minute)
	err = l.Run(context.Background())
	if !errors.Is(err, ErrLoginExpired) || !strings.Contains(err.Error(), "gemini") {
		t.Fatalf("Run = %v, want ErrLoginExpired saying how to sign in", err)
	}
	assertNoSecret(t, "the error", err.Error())
}

func TestTheRewrittenFileKeepsItsOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the file another owner")
	}
	home, rel, refresh := fixture(t, Gemini, time.Now().Add(-time.Hour))
	path := filepath.Join(home, rel)
	if err := os.Chown(path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	p := newProvider(t, Gemini, refresh)
	if _, err := open(context.Background(), home, rel, hostsOf[Gemini], p.cfg(time.Now)); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65534 || st.Gid != 65534 || fi.Mode().Perm() != 0o640 {
		t.Fatalf("owner %d:%d mode %v after the rewrite, want 65534:65534 0640", st.Uid, st.Gid, fi.Mode())
	}
}

func TestFindListsTheLoginFilesPresent(t *testing.T) {
	home, _, _ := fixture(t, Codex, time.Now())
	os.MkdirAll(filepath.Join(home, ".gemini", "oauth_creds.json"), 0o700) // a directory is not a login
	got := Find(home, claudePath, codexPath, geminiPath)
	if len(got) != 1 || got[0] != codexPath {
		t.Fatalf("Find = %v, want only %s", got, codexPath)
	}
}

func TestOpenRefusesAnUnknownPath(t *testing.T) {
	if _, err := Open(context.Background(), t.TempDir(), ".config/goose/secrets.yaml", []string{"x.com"}); err == nil {
		t.Fatal("Open accepted a file it cannot handle")
	}
}

func TestNothingPrintsAToken(t *testing.T) {
	home, rel, refresh := fixture(t, Claude, time.Now().Add(time.Hour))
	p := newProvider(t, Claude, refresh)
	l, err := open(context.Background(), home, rel, hostsOf[Claude], p.cfg(time.Now))
	if err != nil {
		t.Fatal(err)
	}
	assertNoSecret(t, "a printout", fmt.Sprintf("%v %+v %s %v", l, l, l, l.Secret()))
}

func x509Pool(t *testing.T, caFile string) *tls.Config {
	b, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatal("no CA in " + caFile)
	}
	return &tls.Config{RootCAs: pool}
}

func TestARefreshWaitsForTheRealCLIsLockAndAdoptsItsToken(t *testing.T) {
	tests := []struct {
		name string
		kind Kind
		// hold takes the lock the real CLI takes while it refreshes, in dir;
		// the returned func releases it.
		hold func(t *testing.T, dir string) func()
	}{
		{"codex's flock on auth.lock", Codex, func(t *testing.T, dir string) func() {
			f, err := os.OpenFile(filepath.Join(dir, "auth.lock"), os.O_RDWR|os.O_CREATE, 0o666)
			if err != nil {
				t.Fatal(err)
			}
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
				t.Fatal(err)
			}
			return func() { f.Close() }
		}},
		{"claude's .oauth_refresh.lock directory", Claude, func(t *testing.T, dir string) func() {
			p := filepath.Join(dir, ".oauth_refresh.lock")
			if err := os.Mkdir(p, 0o700); err != nil {
				t.Fatal(err)
			}
			return func() { os.Remove(p) }
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			home, rel, refresh := fixture(t, tt.kind, time.Now().Add(-time.Hour))
			path := filepath.Join(home, rel)
			p := newProvider(t, tt.kind, refresh)
			release := tt.hold(t, filepath.Dir(path))
			type result struct {
				l   *Login
				err error
			}
			done := make(chan result, 1)
			waiting := make(chan struct{})
			cfg := p.cfg(time.Now)
			cfg.busy = func() { close(waiting) }
			go func() {
				l, err := open(context.Background(), home, rel, hostsOf[tt.kind], cfg)
				done <- result{l, err}
			}()
			select {
			case <-waiting:
			case r := <-done:
				t.Fatalf("Open did not wait for the CLI's lock (err %v)", r.err)
			}
			// While Open waits, the real CLI refreshes and rewrites its file.
			doc := readDoc(t, path)
			var fresh string
			switch tt.kind {
			case Codex:
				fresh = jwt(map[string]any{"exp": time.Now().Add(10 * 24 * time.Hour).Unix()}, "by-codex")
				doc["tokens"].(map[string]any)["access_token"] = fresh
				doc["tokens"].(map[string]any)["refresh_token"] = "rotated-by-codex"
			case Claude:
				fresh = "sk-ant-oat01-by-claude"
				o := doc["claudeAiOauth"].(map[string]any)
				o["accessToken"], o["refreshToken"], o["expiresAt"] = fresh, "rotated-by-claude", time.Now().Add(8*time.Hour).UnixMilli()
			}
			b, _ := json.Marshal(doc)
			if err := writeAtomic(path, b); err != nil {
				t.Fatal(err)
			}
			release()
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			if posts, _ := p.counts(); posts != 0 {
				t.Fatalf("%d refresh requests: airlock spent the refresh token the CLI had already rotated", posts)
			}
			if got := swapped(t, r.l); got != fresh {
				t.Fatal("airlock did not adopt the CLI's new token")
			}
		})
	}
}

func TestAnOutageDoesNotStopASandboxWhoseTokenStillWorks(t *testing.T) {
	home, rel, refresh := fixture(t, Claude, time.Now().Add(5*time.Minute))
	p := newProvider(t, Claude, refresh)
	p.fail = http.StatusBadGateway
	l, err := open(context.Background(), home, rel, hostsOf[Claude], p.cfg(time.Now))
	if err != nil {
		t.Fatalf("Open = %v; the token is good for 5 more minutes", err)
	}
	if got := swapped(t, l); got != "sk-ant-oat01-REAL-access" {
		t.Fatal("not the user's token")
	}
}

func TestAProviderOfShortTokensIsNotAskedAgainAtOnce(t *testing.T) {
	c := &clock{t: time.Now()}
	home, rel, refresh := fixture(t, Gemini, c.now().Add(-time.Minute))
	p := newProvider(t, Gemini, refresh)
	p.mu.Lock()
	p.short = true // tokens valid for 2 minutes, always due
	p.mu.Unlock()
	l, err := open(context.Background(), home, rel, hostsOf[Gemini], p.cfg(c.now))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := l.tick(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if posts, _ := p.counts(); posts != 1 {
		t.Fatalf("%d refreshes within a minute, want 1", posts)
	}
	c.add(minRefreshInterval)
	if err := l.tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	if posts, _ := p.counts(); posts != 2 {
		t.Fatalf("%d refreshes after a minute, want 2", posts)
	}
}
