// Package credentials lets an agent CLI inside a sandbox use the user's own
// OAuth login (Claude Code, Codex, Gemini CLI) without the login's secrets ever
// entering the sandbox.
//
// The user's login file stays on the host, hidden from every sandbox (see
// credentialPaths in internal/backend). Open reads it and gives:
//
//   - the sandbox's copy, for the same path in the agent's private home: the
//     access token replaced by a placeholder shaped like the real one, no
//     refresh token, no other token-like field, and an expiry a year away, so
//     the CLI never tries to refresh by itself;
//   - a rotating *secrets.Secret for the gateway, which swaps the placeholder
//     for the current real access token toward the login's hosts only, and
//     redacts the current and recent tokens from responses.
//
// Run keeps the real token fresh: shortly before it expires (RefreshBefore),
// under a lock shared by every airlock on the machine and, where the CLI has
// one, by the real CLI (an flock on a file beside the login: codex's own
// ~/.codex/auth.lock; for Claude Code also claude's ~/.claude/.oauth_refresh.lock
// directory; Gemini's Google refresh tokens do not rotate), it
// re-reads the file, adopts a token someone else already refreshed, or spends
// the refresh token at the provider, writes the result back to the user's file
// (atomically, same mode and owner, every other field kept) so the real CLI
// keeps working, and rotates the Secret. Refresh tokens are single-use and
// rotate (Claude, Codex): two refreshers spending one token log the user out,
// which is why there is exactly one at a time and why the file, not memory, is
// where the refresh token is read from.
//
// What each CLI does with the sandbox's copy, seen by running the pinned
// versions (claude 2.1.330, codex 0.169.0, gemini 0.61.0) on it through a
// logging proxy:
//
//   - Claude Code refreshes only when expiresAt is within 5 minutes; without a
//     refreshToken its refresh gives up ("no_refresh_token") and it keeps using
//     the access token, as with the inference-only CLAUDE_CODE_OAUTH_TOKEN. It
//     sent the placeholder to api.anthropic.com (/api/oauth/profile,
//     /v1/messages) and, on a 401, did not try to refresh.
//   - Codex refuses an auth.json without tokens.refresh_token ("failed to
//     deserialize"); with "" it loads ("Logged in using ChatGPT"). It
//     refreshes by itself when the access token's exp is near (refresh_reason
//     "proactive_expiry"; a token it cannot decode it just uses), so the
//     placeholder is a JWT in shape: a far-off exp and the account claim, the
//     marker as signature. It sent it to chatgpt.com (/backend-api/...);
//     on a 401 it POSTs the empty refresh token to auth.openai.com
//     ("unauthorized_recovery"), which can only fail. Its id_token carries the
//     plan and account claims codex reads; the copy keeps them under a
//     signature that verifies nowhere, since a signed id_token can be
//     exchanged for an API key.
//   - Gemini CLI (google-auth-library) refreshes when expiry_date is within
//     5 minutes, and without refresh_token fails with "No refresh token is
//     set." The copy has neither it nor id_token. At start it POSTs the token
//     to oauth2.googleapis.com/tokeninfo (if that fails it wants a browser
//     login), GETs www.googleapis.com/oauth2/v2/userinfo (a failure is only a
//     warning), then uses cloudcode-pa.googleapis.com: the login's hosts must
//     include the first and the last.
//
// The reference designs are out of date here: claude-docker-roadmap.md's OAuth
// section refreshes at console.anthropic.com (now platform.claude.com, with
// client_id and the scopes in a JSON body) and treats the refresh token as
// reusable; it rotates and a spent one is dead. Its "strip the refresh token"
// also leaves the access token itself in the sandbox, where this package puts
// a placeholder.
package credentials

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/internal/secrets"
)

const (
	// RefreshBefore is how long before expiry the refresher renews the token.
	RefreshBefore = 10 * time.Minute
	// pollEvery is how often Run looks at the user's file, to adopt a token the
	// real CLI or another airlock refreshed.
	pollEvery = 30 * time.Second
	// lockWait bounds waiting for another refresher (Claude's lock goes stale
	// after 60 s).
	lockWait = 90 * time.Second
	// requestTimeout bounds one refresh request.
	requestTimeout = 30 * time.Second
	// maxFile and maxResponse bound what is read: a login file or a token
	// response is a few KiB.
	maxFile     = 1 << 20
	maxResponse = 64 << 10
	// minRefreshInterval keeps a provider that hands out tokens shorter-lived
	// than RefreshBefore from being asked again at once, over and over.
	minRefreshInterval = time.Minute
	// retryMin and retryMax bound the wait after a failed refresh.
	retryMin = 15 * time.Second
	retryMax = 5 * time.Minute
)

// ErrLoginExpired says the login cannot be refreshed: the provider refused the
// refresh token (revoked, expired, or spent by something else) or there is
// none. The user has to sign in again; the error says how.
var ErrLoginExpired = errors.New("the login must be renewed")

// Find returns those of paths (relative to home, as agents.Login.Path) that
// are regular files in home, in order.
func Find(home string, paths ...string) []string {
	var out []string
	for _, p := range paths {
		fi, err := os.Stat(filepath.Join(home, cleanRel(p)))
		if err == nil && fi.Mode().IsRegular() {
			out = append(out, p)
		}
	}
	return out
}

// config is what tests change: where the token endpoint is and how to reach it.
type config struct {
	tokenURL string // "" for the format's own
	client   *http.Client
	now      func() time.Time
	poll     time.Duration // how often Run looks at the file
	busy     func()        // called when a refresh finds a lock held
}

func defaultConfig() config {
	return config{client: &http.Client{Timeout: requestTimeout}, now: time.Now, poll: pollEvery}
}

// Login is one open login file.
type Login struct {
	// Path is the file, relative to the home; the sandbox's copy goes at the
	// same path in the agent's private home.
	Path string
	// Kind is the CLI it belongs to.
	Kind Kind
	// Warn, if set before Run, hears about failed refreshes that Run will
	// retry. Never a token.
	Warn func(error)

	file    string // absolute
	f       *format
	cfg     config
	secret  *secrets.Secret
	rot     *secrets.Rotator
	sandbox []byte

	mu       sync.Mutex
	access   string    // the access token the Secret holds
	expiry   time.Time // its expiry, zero if unknown
	stamp    fileStamp // the file as last read
	lastPost time.Time // when this Login last spent a refresh token

	closeOnce sync.Once
	closed    chan struct{}
}

// Open opens the login file at rel (relative to home; its kind is known by the
// path, see KindOf) for a sandbox whose access token may go to hosts. A login
// that is expired or expires within RefreshBefore is refreshed first, so the
// sandbox starts with a working token; if that fails for a reason that may
// pass and the token has not expired yet, Open goes on with it. Open does not
// start the refresher: call Run, and Close when the sandbox is gone.
func Open(ctx context.Context, home, rel string, hosts []string) (*Login, error) {
	return open(ctx, home, rel, hosts, defaultConfig())
}

func open(ctx context.Context, home, rel string, hosts []string, cfg config) (*Login, error) {
	kind, ok := KindOf(rel)
	if !ok {
		return nil, fmt.Errorf("credentials: %s is not a login file airlock knows (%s, %s, %s)", rel, claudePath, codexPath, geminiPath)
	}
	f := formats[kind]
	if cfg.tokenURL == "" {
		cfg.tokenURL = f.tokenURL
	}
	l := &Login{Path: cleanRel(rel), Kind: kind, file: filepath.Join(home, cleanRel(rel)), f: f, cfg: cfg, closed: make(chan struct{})}
	doc, t, stamp, err := l.read()
	if err != nil {
		return nil, err
	}
	if t.access == "" {
		return nil, l.errorf("%w: it holds no access token; %s", ErrLoginExpired, f.relogin)
	}
	now := cfg.now()
	if l.due(t, now) {
		d, nt, err := l.refreshLocked(ctx)
		switch {
		case err == nil:
			doc, t = d, nt
		case errors.Is(err, ErrLoginExpired) || !now.Before(t.expiry):
			return nil, err
		default:
			// The token still works for a few minutes and the failure may
			// pass: start with it; Run tries again.
		}
	}
	name := "AIRLOCK_LOGIN_" + strings.ToUpper(string(kind))
	secret, rot, err := secrets.NewRotating(name, []byte(t.access), hosts, f.prefix(t.access, now))
	if err != nil {
		return nil, l.errorf("%w", err)
	}
	copyDoc, err := f.sandbox(doc, secret.Placeholder, now)
	if err != nil {
		return nil, l.errorf("%w", err)
	}
	sb, err := json.MarshalIndent(copyDoc, "", "  ")
	if err != nil {
		return nil, l.errorf("%w", err)
	}
	l.secret, l.rot, l.sandbox = secret, rot, append(sb, '\n')
	l.access, l.expiry, l.stamp = t.access, t.expiry, stamp
	return l, nil
}

// Secret is what the gateway swaps the sandbox's placeholder for: always the
// current access token, toward the login's hosts only.
func (l *Login) Secret() *secrets.Secret { return l.secret }

// SandboxFile is the sandbox's copy of the login file, to write at Path in the
// agent's private home (mode 0600). It holds no secret.
func (l *Login) SandboxFile() []byte { return bytes.Clone(l.sandbox) }

// Expiry is when the current access token expires (zero if unknown).
func (l *Login) Expiry() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiry
}

// String names the login; never a token.
func (l *Login) String() string { return fmt.Sprintf("%s login ~/%s", l.f.display, l.Path) }

// Run keeps the access token fresh until ctx is done or Close is called, and
// then returns nil. It returns an error wrapping ErrLoginExpired when the login
// can no longer be refreshed (the user must sign in again); failures that may
// pass (network, the provider's 5xx, a held lock) go to Warn and are retried
// with backoff (15 s doubling to 5 min). Whatever happens, the Secret keeps
// the last token it had.
func (l *Login) Run(ctx context.Context) error {
	backoff := time.Duration(0)
	for {
		l.mu.Lock()
		expiry, lastPost := l.expiry, l.lastPost
		l.mu.Unlock()
		now := l.cfg.now()
		wait := l.cfg.poll
		if !expiry.IsZero() {
			// Due, but refreshed less than minRefreshInterval ago: wait for
			// that, not for nothing.
			due := expiry.Add(-RefreshBefore)
			if next := lastPost.Add(minRefreshInterval); next.After(due) {
				due = next
			}
			wait = min(wait, max(0, due.Sub(now)))
		}
		if backoff > 0 {
			wait = backoff
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-l.closed:
			t.Stop()
			return nil
		case <-t.C:
		}
		err := l.tick(ctx)
		switch {
		case err == nil:
			backoff = 0
		case errors.Is(err, ErrLoginExpired):
			return err
		case ctx.Err() != nil:
			return nil
		default:
			if l.Warn != nil {
				l.Warn(err)
			}
			backoff = min(max(2*backoff, retryMin), retryMax)
		}
	}
}

// Close stops Run. The user's file and the Secret's last token stay as they are.
func (l *Login) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}

// tick adopts a token changed in the file and refreshes one that is due.
func (l *Login) tick(ctx context.Context) error {
	l.mu.Lock()
	stamp := l.stamp
	l.mu.Unlock()
	if cur, err := stampOf(l.file); err != nil || cur != stamp {
		_, t, st, err := l.read()
		if err != nil {
			return err
		}
		if err := l.adopt(t, st); err != nil {
			return err
		}
	}
	l.mu.Lock()
	t := tokens{access: l.access, expiry: l.expiry}
	l.mu.Unlock()
	if !l.due(t, l.cfg.now()) {
		return nil
	}
	_, _, err := l.refreshLocked(ctx)
	return err
}

// due reports whether t must be refreshed now. A token without a known expiry
// is used until the provider refuses it.
func (l *Login) due(t tokens, now time.Time) bool {
	return !t.expiry.IsZero() && !now.Before(t.expiry.Add(-RefreshBefore))
}

// refreshLocked refreshes under the locks: it re-reads the file, and if the
// token there is not due (another refresher was first), adopts it instead of
// spending the refresh token.
func (l *Login) refreshLocked(ctx context.Context) (map[string]any, tokens, error) {
	lctx, cancel := context.WithTimeout(ctx, lockWait)
	defer cancel()
	unlock, err := lockFile(lctx, filepath.Join(filepath.Dir(l.file), l.f.lock), l.cfg.busy)
	if err != nil {
		return nil, tokens{}, l.errorf("%w", err)
	}
	defer unlock()
	if l.Kind == Claude {
		unlockClaude, err := lockClaude(lctx, filepath.Dir(l.file), l.cfg.busy)
		if err != nil {
			return nil, tokens{}, l.errorf("%w", err)
		}
		defer unlockClaude()
	}
	doc, t, stamp, err := l.read()
	if err != nil {
		return nil, tokens{}, err
	}
	l.mu.Lock()
	recent := !l.lastPost.IsZero() && l.cfg.now().Sub(l.lastPost) < minRefreshInterval
	l.mu.Unlock()
	if !l.due(t, l.cfg.now()) || recent {
		return doc, t, l.adopt(t, stamp)
	}
	if t.refresh == "" {
		return nil, tokens{}, l.errorf("%w: it holds no refresh token; %s", ErrLoginExpired, l.f.relogin)
	}
	l.mu.Lock()
	l.lastPost = l.cfg.now()
	l.mu.Unlock()
	resp, err := l.post(ctx, doc, t.refresh)
	if err != nil {
		return nil, tokens{}, err
	}
	now := l.cfg.now()
	if err := l.f.apply(doc, resp, now); err != nil {
		return nil, tokens{}, l.errorf("%w", err)
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, tokens{}, l.errorf("%w", err)
	}
	// The refresh token is spent: from here on only the file has the new one.
	// A failed write is the one error that loses the login.
	if err := writeAtomic(l.file, b); err != nil {
		return nil, tokens{}, l.errorf("%w: the provider gave new tokens but writing them to the file failed (%v); %s", ErrLoginExpired, err, l.f.relogin)
	}
	doc, t, stamp, err = l.read()
	if err != nil {
		return nil, tokens{}, err
	}
	return doc, t, l.adopt(t, stamp)
}

// adopt makes t the Secret's token.
func (l *Login) adopt(t tokens, stamp fileStamp) error {
	if t.access == "" {
		return l.errorf("%w: it holds no access token; %s", ErrLoginExpired, l.f.relogin)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rot != nil && t.access != l.access {
		if err := l.rot.Rotate([]byte(t.access)); err != nil {
			return l.errorf("%w", err)
		}
	}
	l.access, l.expiry, l.stamp = t.access, t.expiry, stamp
	return nil
}

// post spends refresh at the token endpoint.
func (l *Login) post(ctx context.Context, doc map[string]any, refresh string) (tokenResponse, error) {
	body, ctype := l.f.request(doc, refresh)
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, l.cfg.tokenURL, bytes.NewReader(body))
	if err != nil {
		return tokenResponse{}, l.errorf("%w", err)
	}
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("Accept", "application/json")
	res, err := l.cfg.client.Do(req)
	if err != nil {
		// url.Error quotes the URL, which holds no token (they go in the body).
		return tokenResponse{}, l.errorf("refresh request: %w", err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxResponse))
	if err != nil {
		return tokenResponse{}, l.errorf("reading the token endpoint's answer: %w", err)
	}
	if res.StatusCode != http.StatusOK {
		code := errorCode(raw)
		if res.StatusCode == http.StatusBadRequest || res.StatusCode == http.StatusUnauthorized || res.StatusCode == http.StatusForbidden {
			return tokenResponse{}, l.errorf("%w: the provider refused the refresh token (HTTP %d%s): it was revoked, expired, or used by another program; %s",
				ErrLoginExpired, res.StatusCode, code, l.f.relogin)
		}
		return tokenResponse{}, l.errorf("the token endpoint answered HTTP %d%s; will retry", res.StatusCode, code)
	}
	var r tokenResponse
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&r); err != nil {
		return tokenResponse{}, l.errorf("the token endpoint's answer is not JSON")
	}
	if r.AccessToken == "" {
		return tokenResponse{}, l.errorf("the token endpoint's answer holds no access_token")
	}
	return r, nil
}

// errorCode extracts the OAuth error code ({"error": "invalid_grant"}, or
// OpenAI's {"error": {"code": ...}}) for messages: only a short word, as the
// rest of a body might echo a token.
func errorCode(raw []byte) string {
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(raw, &e) != nil || len(e.Error) == 0 {
		return ""
	}
	var code string
	if json.Unmarshal(e.Error, &code) != nil {
		var o struct {
			Code string `json:"code"`
			Type string `json:"type"`
		}
		json.Unmarshal(e.Error, &o)
		code = o.Code
		if code == "" {
			code = o.Type
		}
	}
	if code == "" || len(code) > 64 || strings.Trim(code, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != "" {
		return ""
	}
	return ", " + code
}

// read reads and parses the user's file.
func (l *Login) read() (map[string]any, tokens, fileStamp, error) {
	stamp, err := stampOf(l.file)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, tokens{}, stamp, l.errorf("%w: the file is gone; %s", ErrLoginExpired, l.f.relogin)
		}
		return nil, tokens{}, stamp, l.errorf("%w", err)
	}
	fh, err := os.Open(l.file)
	if err != nil {
		return nil, tokens{}, stamp, l.errorf("%w", err)
	}
	b, err := io.ReadAll(io.LimitReader(fh, maxFile+1))
	fh.Close()
	if err != nil {
		return nil, tokens{}, stamp, l.errorf("%w", err)
	}
	if len(b) > maxFile {
		return nil, tokens{}, stamp, l.errorf("larger than %d KiB; not a login file", maxFile>>10)
	}
	doc, err := decode(b)
	if err != nil {
		return nil, tokens{}, stamp, l.errorf("%w", err)
	}
	t, err := l.f.read(doc)
	if err != nil {
		return nil, tokens{}, stamp, l.errorf("%w", err)
	}
	return doc, t, stamp, nil
}

func (l *Login) errorf(format string, args ...any) error {
	return fmt.Errorf("%s login ~/%s: "+format, append([]any{l.f.display, l.Path}, args...)...)
}

// fileStamp tells whether a file changed since it was read.
type fileStamp struct {
	mod  time.Time
	size int64
	ino  uint64
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	s := fileStamp{mod: fi.ModTime(), size: fi.Size()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ino = st.Ino
	}
	return s, nil
}

func cleanRel(rel string) string {
	return strings.TrimPrefix(filepath.Clean("/"+rel), "/")
}
