// Package fakellm is a scripted stand-in for the LLM providers' APIs
// (Anthropic Messages, OpenAI Responses and Chat Completions, Gemini
// generateContent), served over HTTPS on a loopback address with a test CA
// under the providers' real names, so agent CLIs run unchanged against it
// (reached with --add-host NAME:IP --upstream-ca CA). Tests only: it stands
// in for the public internet, which tests cannot reach.
//
// A conversation follows a Script: the step an API request is at is the
// number of tool results its history already holds, so retries, side
// requests (titles, quota checks) and each agent's own bookkeeping do not
// move it along. Every request is recorded with the credential it carried
// and the usage reported for it.
package fakellm

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// The providers' API hosts the server's certificate covers.
var Hosts = []string{
	"api.anthropic.com",
	"api.openai.com",
	"generativelanguage.googleapis.com",
}

// Step is one model turn: a tool call the agent should make, or (Tool
// empty) a final text answer.
type Step struct {
	Text string         // said before the call, or the whole answer
	Tool string         // the tool's name as the agent knows it ("Write", "write_file", "shell", "mcp__fs__read_file")
	Args map[string]any // the call's arguments
}

// Usage is what the server reports for each answer (every answer reports
// the same, so a test knows the totals from the count of answers).
type Usage struct {
	Input      int64 `json:"input"`
	Output     int64 `json:"output"`
	CacheRead  int64 `json:"cache_read"`
	CacheWrite int64 `json:"cache_write"`
}

// Request is one API request as the server saw it.
type Request struct {
	API        string // "anthropic", "openai-responses", "openai-chat", "gemini"
	Path       string
	Credential string // the key or bearer token it carried (header or query)
	Model      string
	Step       int  // the script step answered (-1: a side request answered with text)
	Stream     bool // answered as SSE
	Usage      Usage
	Time       time.Time
}

// Server is a running fake.
type Server struct {
	Addr   string // host:port it listens on
	CAFile string // PEM of the CA that signed its certificate
	Script []Step
	Usage  Usage
	// Log, if set before requests arrive, gets one line per request: API,
	// path, step and the credential it carried (the server is a test's:
	// showing what arrived is its point).
	Log io.Writer
	// RequireKey, if set before requests arrive, is the only credential
	// accepted: others get 401 in the providers' error shape.
	RequireKey string

	mu   sync.Mutex
	reqs []Request
	srv  *http.Server
	ln   net.Listener
}

// Start serves on addr (e.g. "127.0.0.5:443") until Close, with a fresh CA
// written to dir/ca.pem. usage is reported for every answer.
func Start(addr, dir string, script []Step, usage Usage) (*Server, error) {
	certPEM, cert, err := newCertificate(Hosts)
	if err != nil {
		return nil, err
	}
	s := &Server{CAFile: filepath.Join(dir, "ca.pem"), Script: script, Usage: usage}
	if err := os.WriteFile(s.CAFile, certPEM, 0o644); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s.Addr = ln.Addr().String()
	mux := http.NewServeMux()
	s.routeAnthropic(mux)
	s.routeOpenAI(mux)
	s.routeGemini(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.record(Request{API: "unknown", Path: r.URL.Path, Step: -1})
		http.Error(w, `{"error":{"message":"fakellm: no such endpoint"}}`, http.StatusNotFound)
	})
	s.srv = &http.Server{Handler: s.checkKey(mux), ReadHeaderTimeout: 10 * time.Second}
	s.ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}})
	go s.srv.Serve(s.ln)
	return s, nil
}

// Set changes the script, the log or the key required while the server
// runs (the fields themselves may only be set before requests arrive).
func (s *Server) Set(f func(s *Server)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// Close stops the server.
func (s *Server) Close() error { return s.srv.Close() }

// Requests returns what was received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Totals sums the usage reported over every answer.
func (s *Server) Totals() Usage {
	var t Usage
	for _, r := range s.Requests() {
		t.Input += r.Usage.Input
		t.Output += r.Usage.Output
		t.CacheRead += r.Usage.CacheRead
		t.CacheWrite += r.Usage.CacheWrite
	}
	return t
}

func (s *Server) record(r Request) {
	r.Time = time.Now()
	s.mu.Lock()
	s.reqs = append(s.reqs, r)
	if s.Log != nil {
		fmt.Fprintf(s.Log, "%s %s step %d, credential %s\n", r.API, r.Path, r.Step, r.Credential)
	}
	s.mu.Unlock()
}

// Credential is the key or token a request carries, wherever its API puts it.
func Credential(r *http.Request) string {
	if k := r.Header.Get("x-api-key"); k != "" {
		return k
	}
	if k := r.Header.Get("x-goog-api-key"); k != "" {
		return k
	}
	if a, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return a
	}
	return r.URL.Query().Get("key")
}

// checkKey refuses requests without RequireKey, as the providers do: 401
// with an error body their clients print.
func (s *Server) checkKey(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		want := s.RequireKey
		s.mu.Unlock()
		if want == "" || Credential(r) == want {
			next.ServeHTTP(w, r)
			return
		}
		s.record(Request{API: "rejected", Path: r.URL.Path, Credential: Credential(r), Step: -1})
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key","code":"invalid_api_key","status":"UNAUTHENTICATED"}}`)
	})
}

// step returns the script step for a history holding toolResults results,
// and whether it is past the script's end (then a closing text is said).
func (s *Server) step(toolResults int) (Step, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if toolResults < len(s.Script) {
		return s.Script[toolResults], true
	}
	return Step{Text: "Done."}, false
}

// newCertificate makes a CA and a serving certificate for hosts signed by
// it (a separate leaf: rustls, which Codex uses, refuses a CA certificate
// as a server's). It returns the CA's PEM and the leaf.
func newCertificate(hosts []string) ([]byte, tls.Certificate, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "fakellm test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("fakellm: CA certificate: %w", err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     hosts,
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("fakellm: certificate: %w", err)
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	return caPEM, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
