package credentials

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Kind is the agent CLI whose login file it is.
type Kind string

const (
	Claude Kind = "claude"
	Codex  Kind = "codex"
	Gemini Kind = "gemini"
)

// Where each CLI (the pinned versions: claude 2.1.330, codex 0.169.0, gemini
// 0.61.0) keeps its login, relative to the user's home, and how it refreshes:
// the endpoints, client ids and request bodies are what those CLIs sent, seen
// through a logging proxy, given a login due for refresh (and match the
// constants in their bundles). Gemini's client secret is the installed-app
// one gemini-cli ships in its source, as Google's installed-app flow expects.
const (
	claudePath = ".claude/.credentials.json"
	codexPath  = ".codex/auth.json"
	geminiPath = ".gemini/oauth_creds.json"

	claudeTokenURL = "https://platform.claude.com/v1/oauth/token"
	claudeClientID = "9d1c250a-e61b-44d9-88ed-5944d1962f5e"
	codexTokenURL  = "https://auth.openai.com/oauth/token"
	codexClientID  = "app_EMoamEEZ73f0CkXaXp7hrann"
	geminiTokenURL = "https://oauth2.googleapis.com/token"
	geminiClientID = "681255809395-oo8ft2oprdrnp9e3aqf6av3hmdib135j.apps.googleusercontent.com"
	// geminiClientSecret is public: it ships in gemini-cli's source, as Google's
	// installed-app flow expects.
	geminiClientSecret = "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"

	// codexRefreshInterval is when codex refreshes by itself (last_refresh older
	// than this), used as the expiry of an access token whose exp airlock cannot
	// read.
	codexRefreshInterval = 8 * 24 * time.Hour
)

// sandboxExpiry is the expiry written into the sandbox's copy: far enough that
// the CLI never refreshes by itself (it has no refresh token to do it with),
// while airlock keeps the real token behind the placeholder current.
const sandboxExpiry = 365 * 24 * time.Hour

// KindOf tells which CLI's login a path (relative to the home) is.
func KindOf(rel string) (Kind, bool) {
	switch cleanRel(rel) {
	case claudePath:
		return Claude, true
	case codexPath:
		return Codex, true
	case geminiPath:
		return Gemini, true
	}
	return "", false
}

// tokens is what airlock needs from a login file.
type tokens struct {
	access, refresh string
	expiry          time.Time // zero: unknown
}

// tokenResponse is an OAuth token endpoint's answer to a refresh.
type tokenResponse struct {
	AccessToken  string      `json:"access_token"`
	RefreshToken string      `json:"refresh_token"`
	IDToken      string      `json:"id_token"`
	ExpiresIn    json.Number `json:"expires_in"`
	Scope        string      `json:"scope"`
	TokenType    string      `json:"token_type"`
}

// format is one CLI's file: how to read it, refresh it, write the refresh back
// and make the sandbox's copy. doc is the whole file, decoded with UseNumber so
// that rewriting it keeps every field airlock does not know as it was.
type format struct {
	kind     Kind
	display  string // "Claude Code"
	relogin  string // what the user does when the login cannot be refreshed
	tokenURL string
	// lock is the file beside the login that refreshers flock: codex's own
	// (codex 0.169.0 holds ~/.codex/auth.lock while it refreshes and rewrites
	// auth.json), else airlock's.
	lock string
	read func(doc map[string]any) (tokens, error)
	// request is the refresh request's body and content type.
	request func(doc map[string]any, refresh string) ([]byte, string)
	// apply writes a refresh's result into doc.
	apply func(doc map[string]any, r tokenResponse, now time.Time) error
	// prefix starts the placeholder, in the real token's shape.
	prefix func(access string, now time.Time) string
	// sandbox makes the sandbox's copy of doc.
	sandbox func(doc map[string]any, placeholder string, now time.Time) (map[string]any, error)
}

var formats = map[Kind]*format{
	Claude: {
		kind: Claude, display: "Claude Code", tokenURL: claudeTokenURL, lock: ".credentials.json.airlock.lock",
		relogin: "sign in again on the host: run `claude` and type /login",
		read: func(doc map[string]any) (tokens, error) {
			o, ok := doc["claudeAiOauth"].(map[string]any)
			if !ok {
				return tokens{}, errors.New(`no "claudeAiOauth" object (is this an API-key setup?)`)
			}
			t := tokens{access: str(o["accessToken"]), refresh: str(o["refreshToken"])}
			if ms, ok := num(o["expiresAt"]); ok {
				t.expiry = time.UnixMilli(ms)
			}
			return t, nil
		},
		request: func(doc map[string]any, refresh string) ([]byte, string) {
			// claude 2.1.330 asks for its whole default scope list; airlock asks
			// for the scopes the login holds, which its grant covers.
			body := map[string]string{"grant_type": "refresh_token", "refresh_token": refresh, "client_id": claudeClientID}
			o, _ := doc["claudeAiOauth"].(map[string]any)
			if s := strList(o["scopes"]); len(s) > 0 {
				body["scope"] = strings.Join(s, " ")
			}
			b, _ := json.Marshal(body)
			return b, "application/json"
		},
		apply: func(doc map[string]any, r tokenResponse, now time.Time) error {
			o, _ := doc["claudeAiOauth"].(map[string]any)
			secs, err := expiresIn(r)
			if err != nil {
				return err
			}
			o["accessToken"] = r.AccessToken
			if r.RefreshToken != "" {
				o["refreshToken"] = r.RefreshToken
			}
			o["expiresAt"] = json.Number(strconv.FormatInt(now.Add(secs).UnixMilli(), 10))
			if r.Scope != "" {
				o["scopes"] = strings.Fields(r.Scope)
			}
			return nil
		},
		prefix: func(string, time.Time) string { return "sk-ant-oat01-" },
		sandbox: func(doc map[string]any, ph string, now time.Time) (map[string]any, error) {
			// Only the login: other top-level entries (mcpOAuth: MCP servers'
			// tokens) stay on the host.
			o, ok := scrub(doc["claudeAiOauth"]).(map[string]any)
			if !ok {
				return nil, errors.New(`no "claudeAiOauth" object`)
			}
			o["accessToken"] = ph
			o["expiresAt"] = json.Number(strconv.FormatInt(now.Add(sandboxExpiry).UnixMilli(), 10))
			return map[string]any{"claudeAiOauth": o}, nil
		},
	},
	Codex: {
		kind: Codex, display: "Codex", tokenURL: codexTokenURL, lock: "auth.lock",
		relogin: "sign in again on the host: run `codex login`",
		read: func(doc map[string]any) (tokens, error) {
			o, ok := doc["tokens"].(map[string]any)
			if !ok {
				return tokens{}, errors.New(`no "tokens" object (is this an API-key login?)`)
			}
			t := tokens{access: str(o["access_token"]), refresh: str(o["refresh_token"])}
			if exp, ok := jwtExp(t.access); ok {
				t.expiry = exp
			} else if last, err := time.Parse(time.RFC3339Nano, str(doc["last_refresh"])); err == nil {
				t.expiry = last.Add(codexRefreshInterval)
			}
			return t, nil
		},
		request: func(_ map[string]any, refresh string) ([]byte, string) {
			// What codex 0.169.0 sends when its token nears expiry (older
			// versions also sent "scope": "openid profile email").
			b, _ := json.Marshal(map[string]string{
				"client_id": codexClientID, "grant_type": "refresh_token",
				"refresh_reason": "proactive_expiry", "refresh_token": refresh,
			})
			return b, "application/json"
		},
		apply: func(doc map[string]any, r tokenResponse, now time.Time) error {
			o, _ := doc["tokens"].(map[string]any)
			o["access_token"] = r.AccessToken
			if r.IDToken != "" {
				o["id_token"] = r.IDToken
			}
			if r.RefreshToken != "" {
				o["refresh_token"] = r.RefreshToken
			}
			doc["last_refresh"] = now.UTC().Format(time.RFC3339Nano)
			return nil
		},
		prefix: codexPrefix,
		sandbox: func(doc map[string]any, ph string, now time.Time) (map[string]any, error) {
			out, _ := scrub(doc).(map[string]any)
			if _, ok := doc["OPENAI_API_KEY"]; ok {
				out["OPENAI_API_KEY"] = nil
			}
			// scrub drops "tokens" by its name; its fields are scrubbed one by
			// one, so account_id stays.
			in, _ := doc["tokens"].(map[string]any)
			o, _ := scrub(in).(map[string]any)
			o["access_token"] = ph
			// codex 0.169.0 refuses an auth.json without the field ("failed to
			// deserialize"); empty, it loads, and nothing can be refreshed with it.
			o["refresh_token"] = ""
			if id := str(in["id_token"]); id != "" {
				o["id_token"] = unsign(id)
			}
			out["tokens"] = o
			out["last_refresh"] = now.UTC().Format(time.RFC3339Nano)
			return out, nil
		},
	},
	Gemini: {
		kind: Gemini, display: "Gemini CLI", tokenURL: geminiTokenURL, lock: "oauth_creds.json.airlock.lock",
		relogin: "sign in again on the host: run `gemini` and choose Login with Google",
		read: func(doc map[string]any) (tokens, error) {
			t := tokens{access: str(doc["access_token"]), refresh: str(doc["refresh_token"])}
			if ms, ok := num(doc["expiry_date"]); ok {
				t.expiry = time.UnixMilli(ms)
			}
			return t, nil
		},
		request: func(_ map[string]any, refresh string) ([]byte, string) {
			v := url.Values{"client_id": {geminiClientID}, "client_secret": {geminiClientSecret},
				"grant_type": {"refresh_token"}, "refresh_token": {refresh}}
			return []byte(v.Encode()), "application/x-www-form-urlencoded"
		},
		apply: func(doc map[string]any, r tokenResponse, now time.Time) error {
			secs, err := expiresIn(r)
			if err != nil {
				return err
			}
			doc["access_token"] = r.AccessToken
			doc["expiry_date"] = json.Number(strconv.FormatInt(now.Add(secs).UnixMilli(), 10))
			if r.RefreshToken != "" {
				doc["refresh_token"] = r.RefreshToken
			}
			if r.IDToken != "" {
				doc["id_token"] = r.IDToken
			}
			if r.Scope != "" {
				doc["scope"] = r.Scope
			}
			if r.TokenType != "" {
				doc["token_type"] = r.TokenType
			}
			return nil
		},
		prefix: func(string, time.Time) string { return "ya29." },
		sandbox: func(doc map[string]any, ph string, now time.Time) (map[string]any, error) {
			// id_token goes too: a Google-signed identity assertion is accepted
			// as a bearer by services that trust the client id.
			out, _ := scrub(doc).(map[string]any)
			out["access_token"] = ph
			if tt, ok := doc["token_type"].(string); ok {
				out["token_type"] = tt // "Bearer", which the library puts in the header
			}
			out["expiry_date"] = json.Number(strconv.FormatInt(now.Add(sandboxExpiry).UnixMilli(), 10))
			return out, nil
		},
	},
}

// secretish names fields that may hold a credential. The sandbox's copy drops
// every such field airlock does not fill in itself: an unknown field of a login
// file is more likely a token than anything a CLI needs.
func secretish(name string) bool {
	n := strings.ToLower(name)
	for _, w := range []string{"token", "secret", "key", "password", "credential", "cookie"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// scrub returns a deep copy of v without secretish fields.
func scrub(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			if !secretish(k) {
				out[k] = scrub(e)
			}
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = scrub(e)
		}
		return out
	}
	return v
}

func expiresIn(r tokenResponse) (time.Duration, error) {
	n, err := r.ExpiresIn.Int64()
	if err != nil || n <= 0 || n > 366*24*3600 {
		return 0, errors.New("the token endpoint's answer has no usable expires_in")
	}
	return time.Duration(n) * time.Second, nil
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func num(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	if i, err := n.Int64(); err == nil {
		return i, true
	}
	f, err := n.Float64()
	return int64(f), err == nil
}

func strList(v any) []string {
	l, _ := v.([]any)
	var out []string
	for _, e := range l {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// jwtParts splits a JWT and decodes its payload; it verifies nothing.
func jwtPayload(tok string) (map[string]any, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return nil, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return nil, false
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var claims map[string]any
	if d.Decode(&claims) != nil || claims == nil {
		return nil, false
	}
	return claims, true
}

func jwtExp(tok string) (time.Time, bool) {
	c, ok := jwtPayload(tok)
	if !ok {
		return time.Time{}, false
	}
	exp, ok := num(c["exp"])
	if !ok {
		return time.Time{}, false
	}
	return time.Unix(exp, 0), true
}

// codexAuthClaim holds the ChatGPT account and plan in OpenAI's tokens.
const codexAuthClaim = "https://api.openai.com/auth"

// unsignedSignature replaces a JWT's signature in the sandbox: valid base64url,
// so a CLI that splits the token still can, and useless to anything verifying it.
const unsignedSignature = "YWlybG9jay11bnNpZ25lZA"

// unsign keeps a JWT's header and claims (codex reads the plan and account from
// its id_token) and drops the signature, which is what would make it a
// credential: OpenAI's token exchange takes a signed id_token for an API key.
// Anything that is not a JWT is dropped whole.
func unsign(tok string) string {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return ""
	}
	return parts[0] + "." + parts[1] + "." + unsignedSignature
}

// codexPrefix makes the placeholder a JWT in shape ("header.claims." then
// airlock's marker as the signature) whose exp is far off: codex 0.169.0
// refreshes by itself when it can read an access token's exp and it is near
// (it ignores a token it cannot decode, so this is a precaution). Of the real
// claims only the ChatGPT account claim is kept; the rest (session, ids) stay
// on the host. A token that is not a JWT gets no prefix.
func codexPrefix(access string, now time.Time) string {
	real, ok := jwtPayload(access)
	if !ok {
		return ""
	}
	claims := map[string]any{"exp": now.Add(sandboxExpiry).Unix()}
	if a, ok := real[codexAuthClaim]; ok {
		claims[codexAuthClaim] = a
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		return ""
	}
	header := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`))
	p := header + "." + base64.RawURLEncoding.EncodeToString(payload) + "."
	if len(p) > 3<<10 {
		return ""
	}
	return p
}

// decode parses a login file, keeping numbers as written.
func decode(b []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var doc map[string]any
	if err := d.Decode(&doc); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if doc == nil {
		return nil, errors.New("not a JSON object")
	}
	return doc, nil
}
