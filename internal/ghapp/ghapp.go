// Package ghapp mints GitHub App installation tokens on the host: a JWT signed
// with the App's private key, exchanged at GitHub for a token limited to named
// repositories and permissions, and kept fresh until the sandbox ends.
package ghapp

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/internal/regfile"
)

const (
	// DefaultAPI is GitHub's REST API; GitHub Enterprise and tests name another.
	DefaultAPI = "https://api.github.com"
	// MaxLifetime is the longest a token is used: GitHub's installation
	// tokens last an hour, and one that claims longer is treated as if it did.
	MaxLifetime = time.Hour
	// RefreshBefore is how long before its expiry a token is replaced, so a
	// request in flight never carries a lapsed one.
	RefreshBefore = 10 * time.Minute
	// retryEvery paces refreshes that failed (GitHub down, network gone).
	retryEvery = 30 * time.Second
	// maxKeyFile bounds the key file read: a 4096-bit PEM key is about 3 KiB.
	maxKeyFile = 64 << 10
	// maxResponse bounds the token endpoint's answer read.
	maxResponse = 256 << 10
	// maxToken bounds a token's length; GitHub's are 40 to a few hundred bytes.
	maxToken = 4 << 10
	// requestTimeout bounds one exchange.
	requestTimeout = 30 * time.Second
)

// App is one GitHub App installation and the scope of the tokens to mint.
type App struct {
	AppID          string            // the App's numeric id (the JWT's iss)
	InstallationID string            // the installation's numeric id
	KeyFile        string            // the App's private key, PEM (PKCS#1 or PKCS#8 RSA); ~/ expands
	Repositories   []string          // repository names the token is limited to (at least one)
	Permissions    map[string]string // e.g. contents: write; none: the App's own
	API            string            // REST API base; "" is DefaultAPI
}

// Check validates a without reading the key file.
func (a App) Check() error {
	if !digits(a.AppID) {
		return errors.New("app: the App's numeric id is missing or not a number")
	}
	if !digits(a.InstallationID) {
		return errors.New("installation: the installation's numeric id is missing or not a number")
	}
	if a.KeyFile == "" {
		return errors.New("key: the path of the App's private key file is missing")
	}
	if len(a.Repositories) == 0 {
		return errors.New("repos: name the repositories the token may reach (a token for every repository of the installation is not minted)")
	}
	for _, r := range a.Repositories {
		if !validRepo(r) {
			return fmt.Errorf("repos: %q is not a repository name (letters, digits, - . _; owner/ is allowed and dropped)", r)
		}
	}
	for k, v := range a.Permissions {
		if !validPermName(k) {
			return fmt.Errorf("permissions: %q is not a permission name such as contents or pull_requests", k)
		}
		if v != "read" && v != "write" && v != "admin" {
			return fmt.Errorf("permissions: %s: %q is not read, write or admin", k, v)
		}
	}
	if a.API != "" {
		u, err := url.Parse(a.API)
		if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return errors.New("api: the API base must be an https:// URL without user, query or fragment, e.g. " + DefaultAPI)
		}
	}
	return nil
}

func digits(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func validRepo(r string) bool {
	if owner, name, ok := strings.Cut(r, "/"); ok {
		return validName(owner) && validName(name)
	}
	return validName(r)
}

func validName(s string) bool {
	if s == "" || len(s) > 100 || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}

func validPermName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c == '_') {
			return false
		}
	}
	return true
}

// repoNames are the repositories as the API takes them: names alone (an
// installation belongs to one account, which the owner part would repeat).
func (a App) repoNames() []string {
	out := make([]string, 0, len(a.Repositories))
	for _, r := range a.Repositories {
		if _, name, ok := strings.Cut(r, "/"); ok {
			r = name
		}
		out = append(out, r)
	}
	return out
}

// LoadKey reads the App's private key file (size-bounded, regular file only).
func LoadKey(path string) (*rsa.PrivateKey, error) {
	if rest, ok := strings.CutPrefix(path, "~/"); ok {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, fmt.Errorf("key file: expanding ~: %w", err)
		}
		path = filepath.Join(home, rest)
	}
	b, err := regfile.Read(path, maxKeyFile, true)
	switch {
	case errors.Is(err, regfile.ErrNotRegular):
		return nil, fmt.Errorf("key file %s: not a regular file", path)
	case errors.As(err, new(*regfile.TooLargeError)):
		return nil, fmt.Errorf("key file %s: larger than %d KiB, not a private key", path, maxKeyFile>>10)
	case err != nil:
		return nil, fmt.Errorf("key file: %w", err)
	}
	k, err := ParseKey(b)
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	return k, nil
}

// ParseKey reads a PEM RSA private key, PKCS#1 ("RSA PRIVATE KEY") or PKCS#8
// ("PRIVATE KEY"), as GitHub hands them out. Anything else is an error that
// says what it is instead, never quoting the bytes.
func ParseKey(b []byte) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New("not a PEM file; GitHub's App keys begin -----BEGIN RSA PRIVATE KEY-----")
	}
	if _, ok := block.Headers["DEK-Info"]; ok {
		return nil, errors.New("an encrypted PEM key; decrypt it (openssl rsa) first")
	}
	var key any
	var err error
	switch block.Type {
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "ENCRYPTED PRIVATE KEY":
		return nil, errors.New("an encrypted PKCS#8 key; decrypt it (openssl pkcs8) first")
	default:
		return nil, fmt.Errorf("a PEM %.40q block, not an RSA private key", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("not a valid %s: %v", strings.ToLower(block.Type), err)
	}
	k, ok := key.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("a %T private key, not RSA; GitHub signs Apps' JWTs with RS256", key)
	}
	if k.N.BitLen() < 2048 {
		return nil, fmt.Errorf("an RSA key of %d bits, under 2048", k.N.BitLen())
	}
	return k, nil
}

// JWT is the App's proof of identity for GitHub: RS256, issued 60 s in the
// past (clock drift), expiring 9 minutes after now (GitHub takes at most 10).
func JWT(key *rsa.PrivateKey, appID string, now time.Time) (string, error) {
	head := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT"}`))
	claims, err := json.Marshal(struct {
		Iat int64  `json:"iat"`
		Exp int64  `json:"exp"`
		Iss string `json:"iss"`
	}{now.Add(-60 * time.Second).Unix(), now.Add(9 * time.Minute).Unix(), appID})
	if err != nil {
		return "", err
	}
	signed := head + "." + base64.RawURLEncoding.EncodeToString(claims)
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		return "", fmt.Errorf("signing the JWT: %w", err)
	}
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig), nil
}

// Token is an installation token. Value is never printed by String.
type Token struct {
	Value   string
	Expires time.Time
}

func (t Token) String() string {
	return "installation token expiring " + t.Expires.UTC().Format(time.RFC3339)
}

// Format makes every fmt verb print String, so no verb shows the value.
func (t Token) Format(f fmt.State, _ rune) { io.WriteString(f, t.String()) }

// Minter mints tokens for one App installation.
type Minter struct {
	App    App
	Key    *rsa.PrivateKey
	Client *http.Client // verifies certificates; never one that skips verification
}

// Mint exchanges a fresh JWT for an installation token at
// POST {api}/app/installations/{id}/access_tokens.
func (m *Minter) Mint(ctx context.Context, now time.Time) (Token, error) {
	jwt, err := JWT(m.Key, m.App.AppID, now)
	if err != nil {
		return Token{}, err
	}
	body := map[string]any{"repositories": m.App.repoNames()}
	if len(m.App.Permissions) > 0 {
		body["permissions"] = m.App.Permissions
	}
	b, _ := json.Marshal(body)
	api := strings.TrimSuffix(m.App.API, "/")
	if api == "" {
		api = DefaultAPI
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, api+"/app/installations/"+m.App.InstallationID+"/access_tokens", bytes.NewReader(b))
	if err != nil {
		return Token{}, fmt.Errorf("token request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+jwt)
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	req.Header.Set("Content-Type", "application/json")
	client := m.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return Token{}, fmt.Errorf("token endpoint %s: %w", api, err)
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return Token{}, fmt.Errorf("token endpoint %s: reading the answer: %w", api, err)
	}
	if len(rb) > maxResponse {
		return Token{}, fmt.Errorf("token endpoint %s: an answer over %d KiB", api, maxResponse>>10)
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return Token{}, statusError(api, resp.StatusCode, rb)
	}
	var out struct {
		Token     string    `json:"token"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	if err := json.Unmarshal(rb, &out); err != nil {
		return Token{}, fmt.Errorf("token endpoint %s: the answer is not the expected JSON", api)
	}
	if err := checkToken(out.Token); err != nil {
		return Token{}, fmt.Errorf("token endpoint %s: %w", api, err)
	}
	exp := out.ExpiresAt
	if exp.IsZero() || exp.After(now.Add(MaxLifetime)) {
		exp = now.Add(MaxLifetime)
	}
	if !exp.After(now) {
		return Token{}, fmt.Errorf("token endpoint %s: the token it gave has already expired (check the host's clock)", api)
	}
	return Token{Value: out.Token, Expires: exp}, nil
}

func checkToken(t string) error {
	if len(t) < 8 || len(t) > maxToken {
		return errors.New("the answer holds no token of a plausible length")
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; c <= ' ' || c >= 0x7f {
			return errors.New("the token holds characters that cannot go in a header")
		}
	}
	return nil
}

// statusError says what a refusal means, with GitHub's own message cut to one
// short line (it holds no secret: the JWT is ours, the message theirs).
func statusError(api string, code int, body []byte) error {
	var msg struct {
		Message string `json:"message"`
	}
	json.Unmarshal(body, &msg)
	m := strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, msg.Message)
	if len(m) > 160 {
		m = m[:160] + "…"
	}
	if m != "" {
		m = " (" + strconv.Quote(m) + ")"
	}
	hint := ""
	switch code {
	case http.StatusUnauthorized:
		hint = ": the App's JWT was refused; check the app id and that the key file is this App's current key"
	case http.StatusNotFound:
		hint = ": no such installation for this App; check the installation id"
	case http.StatusUnprocessableEntity:
		hint = ": check the repositories (names the installation can reach) and permissions (ones the App has)"
	case http.StatusForbidden:
		hint = ": the App may not be granted what was asked"
	}
	return fmt.Errorf("token endpoint %s answered %d%s%s", api, code, m, hint)
}

// PermissionsString is permissions in the flag's form, sorted: contents:write,metadata:read.
func PermissionsString(p map[string]string) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + ":" + p[k]
	}
	return strings.Join(keys, ",")
}
