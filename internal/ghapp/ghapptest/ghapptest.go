// Package ghapptest is a stand-in for GitHub in tests: its App token endpoint
// (checks the JWT's signature with the App's public key, mints tokens limited
// to the repositories asked for) and an auth front for git's smart HTTP that
// admits only those tokens, for those repositories.
package ghapptest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Server is GitHub's side: one App with one installation that can reach Repos.
type Server struct {
	AppID, InstallationID string
	Key                   *rsa.PublicKey
	Repos                 []string // names the installation may reach

	mu     sync.Mutex
	ttl    time.Duration // lifetime of minted tokens (0: an hour); SetTTL
	tokens map[string]grant
	minted int
	seen   []string // Basic-auth passwords the git front was sent
}

type grant struct {
	repos   []string
	perms   map[string]string
	expires time.Time
}

// SetTTL sets the lifetime of the tokens minted from now on (0: an hour);
// safe while the server runs.
func (s *Server) SetTTL(d time.Duration) {
	s.mu.Lock()
	s.ttl = d
	s.mu.Unlock()
}

// Minted is how many tokens the endpoint has issued.
func (s *Server) Minted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.minted
}

// Seen is every password the git front was sent, in order.
func (s *Server) Seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen)
}

// Tokens are the tokens issued, for tests that look for them where they must not be.
func (s *Server) Tokens() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for t := range s.tokens {
		out = append(out, t)
	}
	return out
}

// ServeHTTP is POST /app/installations/{id}/access_tokens.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fail := func(code int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(map[string]string{"message": msg})
	}
	if r.Method != http.MethodPost || r.URL.Path != "/app/installations/"+s.InstallationID+"/access_tokens" {
		fail(http.StatusNotFound, "Not Found")
		return
	}
	jwt, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || !s.validJWT(jwt, time.Now()) {
		fail(http.StatusUnauthorized, "A JSON web token could not be decoded")
		return
	}
	var body struct {
		Repositories []string          `json:"repositories"`
		Permissions  map[string]string `json:"permissions"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body); err != nil {
		fail(http.StatusUnprocessableEntity, "Invalid request")
		return
	}
	if len(body.Repositories) == 0 {
		body.Repositories = s.Repos
	}
	for _, repo := range body.Repositories {
		if !slices.Contains(s.Repos, repo) {
			fail(http.StatusUnprocessableEntity, "There is at least one repository that does not exist or is not accessible to the parent installation.")
			return
		}
	}
	if body.Permissions == nil {
		body.Permissions = map[string]string{"contents": "write", "metadata": "read"}
	}
	b := make([]byte, 18)
	rand.Read(b)
	tok := "ghs_" + hex.EncodeToString(b)
	s.mu.Lock()
	ttl := s.ttl
	s.mu.Unlock()
	if ttl == 0 {
		ttl = time.Hour
	}
	exp := time.Now().Add(ttl)
	s.mu.Lock()
	if s.tokens == nil {
		s.tokens = map[string]grant{}
	}
	s.tokens[tok] = grant{repos: body.Repositories, perms: body.Permissions, expires: exp}
	s.minted++
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(map[string]any{"token": tok, "expires_at": exp.UTC().Format(time.RFC3339), "permissions": body.Permissions})
}

// validJWT checks an RS256 JWT as GitHub does: signature by the App's key,
// iss the App's id, iat/exp around now, at most 10 minutes apart.
func (s *Server) validJWT(jwt string, now time.Time) bool {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return false
	}
	var head struct{ Alg string }
	hb, err1 := base64.RawURLEncoding.DecodeString(parts[0])
	cb, err2 := base64.RawURLEncoding.DecodeString(parts[1])
	sig, err3 := base64.RawURLEncoding.DecodeString(parts[2])
	if err1 != nil || err2 != nil || err3 != nil || json.Unmarshal(hb, &head) != nil || head.Alg != "RS256" {
		return false
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if rsa.VerifyPKCS1v15(s.Key, crypto.SHA256, sum[:], sig) != nil {
		return false
	}
	var c struct {
		Iat, Exp int64
		Iss      any
	}
	if json.Unmarshal(cb, &c) != nil {
		return false
	}
	iss, _ := c.Iss.(string)
	if f, ok := c.Iss.(float64); ok {
		iss = big.NewFloat(f).Text('f', 0)
	}
	iat, exp := time.Unix(c.Iat, 0), time.Unix(c.Exp, 0)
	return iss == s.AppID && !now.Before(iat.Add(-time.Minute)) && now.Before(exp) && exp.Sub(iat) <= 11*time.Minute
}

// Git wraps git's smart HTTP (git http-backend) with GitHub's rule: Basic
// auth whose password is a live token this Server minted, for a path
// /OWNER/REPO.git whose REPO is in the token's list; a push also needs
// contents: write. No credentials: 401 with a Basic challenge, so git asks
// its credential helper; a token out of scope: 403.
func (s *Server) Git(backend http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pass, ok := r.BasicAuth()
		if !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="GitHub"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		s.mu.Lock()
		s.seen = append(s.seen, pass)
		g, known := s.tokens[pass]
		s.mu.Unlock()
		if !known || time.Now().After(g.expires) {
			w.Header().Set("WWW-Authenticate", `Basic realm="GitHub"`)
			http.Error(w, "invalid credentials", http.StatusUnauthorized)
			return
		}
		parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 3)
		if len(parts) < 3 {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		repo := strings.TrimSuffix(parts[1], ".git")
		push := r.URL.Query().Get("service") == "git-receive-pack" || strings.HasSuffix(r.URL.Path, "/git-receive-pack")
		if !slices.Contains(g.repos, repo) || push && g.perms["contents"] != "write" {
			http.Error(w, "Permission to "+parts[0]+"/"+repo+" denied: the token does not cover it", http.StatusForbidden)
			return
		}
		backend.ServeHTTP(w, r)
	})
}

// CA is a test certificate authority.
type CA struct {
	PEM  []byte
	cert *x509.Certificate
	key  *rsa.PrivateKey
}

// NewCA makes a CA valid for a day.
func NewCA() (*CA, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ghapptest CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), cert: cert, key: key}, nil
}

// Pool is a pool holding only the CA.
func (c *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.cert)
	return p
}

// Leaf issues a server certificate for names (host names or IP addresses).
func (c *CA) Leaf(names ...string) (tls.Certificate, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// KeyPEM is key in PKCS#1 PEM, as GitHub hands App keys out.
func KeyPEM(key *rsa.PrivateKey) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
}
