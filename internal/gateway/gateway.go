// Package gateway is the sandbox's only way out: every connection is decided
// by policy, names are resolved on the host and the checked address is the
// one dialled, HTTP and TLS to allowed hosts are intercepted so endpoint
// rules and secret placeholders apply, and every step is audited. This file
// is the explicit front door (HTTP CONNECT and absolute-URI proxying); the
// transparent netstack door feeds the same pipeline.
package gateway

import (
	"context"
	"crypto/subtle"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/ca"
	"github.com/airlock-dev/airlock/internal/llmusage"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/secrets"
)

// Bounds against a hostile sandbox: slow or huge request heads, idle
// connections, and dials that hang.
const (
	headerTimeout  = 10 * time.Second
	maxHeaderBytes = 64 << 10
	idleTimeout    = 5 * time.Minute
	dialTimeout    = 15 * time.Second
	resolveTimeout = 10 * time.Second
)

// Resolver looks names up on the host (a *net.Resolver in production).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config is one sandbox's gateway.
type Config struct {
	Policy  *policy.Policy
	CA      *ca.CA
	Secrets *secrets.Set // nil: no secrets
	Audit   *audit.Log   // nil: nothing recorded
	// StaticHosts are --add-host mappings: answered without DNS, and their
	// addresses count as explicitly allowed by the IP class checks.
	StaticHosts map[string]netip.Addr
	Resolver    Resolver       // default net.DefaultResolver
	Upstream    *x509.CertPool // roots that upstream servers must chain to; nil = the host's
	// Token is the per-sandbox proxy credential: clients send it as the
	// password of Basic Proxy-Authorization (http://airlock:TOKEN@host:port).
	Token string
	// Hooks are optional Go functions called on every intercepted request
	// and response (the embedded API's).
	Hooks Hooks
	// Sandbox is the sandbox's id, passed to the Approver in each Question.
	Sandbox string
	// Approver is asked when policy says Ask; nil denies at once ("ask:
	// nobody to ask").
	Approver Approver
	// Broker serves airlock.internal (ports 80 and 443, the latter
	// intercepted with a leaf from CA) through both doors; nil refuses the
	// name like any host no rule allows.
	Broker http.Handler
	// Meter, if set, reads LLM API responses (usage per response, audited
	// as kind llm) and refuses LLM requests once its budget is spent; nil
	// leaves LLM traffic like any other.
	Meter *llmusage.Meter
}

// Hooks let an embedding program see and change intercepted HTTP. OnRequest
// runs after policy allowed the request and before secrets are swapped in
// (it sees placeholders, never real values); an error refuses the request
// with 403. OnResponse runs after secret values were redacted; an error
// answers 502. Both must be safe for concurrent use.
type Hooks struct {
	OnRequest  func(*http.Request) error
	OnResponse func(*http.Response) error
}

// Gateway serves one sandbox.
type Gateway struct {
	cfg Config
	// pol is the policy in force: cfg.Policy until SetPolicy swaps in one
	// that adds remembered decisions.
	pol atomic.Pointer[policy.Policy]
	// dial connects to an address policy checked. Tests swap it to reach
	// local servers on ports an unprivileged user cannot bind (443).
	dial func(ctx context.Context, addr string) (net.Conn, error)
}

// New checks cfg and returns a gateway.
func New(cfg Config) (*Gateway, error) {
	if cfg.Policy == nil || cfg.CA == nil {
		return nil, errors.New("gateway: a policy and a CA are required")
	}
	if len(cfg.Token) < 32 {
		return nil, errors.New("gateway: the proxy token must have at least 32 characters")
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if len(cfg.Secrets.Names()) == 0 {
		cfg.Secrets = nil // nothing to swap or redact: keep bodies off the scanning path
	}
	d := &net.Dialer{Timeout: dialTimeout}
	g := &Gateway{cfg: cfg, dial: func(ctx context.Context, addr string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addr)
	}}
	g.pol.Store(cfg.Policy)
	return g, nil
}

// SetPolicy puts p in force for every decision from now on (a remembered
// approval added rules); connections already decided are not revisited.
func (g *Gateway) SetPolicy(p *policy.Policy) { g.pol.Store(p) }

func (g *Gateway) policy() *policy.Policy { return g.pol.Load() }

// ServeProxy serves the explicit front door on ln until ln is closed.
func (g *Gateway) ServeProxy(ln net.Listener) error {
	srv := &http.Server{
		Handler:           http.HandlerFunc(g.front),
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          discardLogger, // hostile input is audited, not logged
	}
	err := srv.Serve(ln)
	if errors.Is(err, net.ErrClosed) || errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

var discardLogger = log.New(io.Discard, "", 0)

// front is the proxy's entry: authenticate, then CONNECT or absolute URI.
func (g *Gateway) front(w http.ResponseWriter, r *http.Request) {
	if auth := r.Header.Get("Proxy-Authorization"); !g.authorized(auth) {
		w.Header().Set("Proxy-Authenticate", `Basic realm="airlock"`)
		http.Error(w, "airlock: proxy authentication required", http.StatusProxyAuthRequired)
		// Clients such as git ask without credentials first and retry with
		// them after this challenge; only a wrong token is a refusal.
		rec := audit.Record{Kind: "network", Subject: r.Host, Decision: "challenge", Reason: "no proxy token: asked for one"}
		if auth != "" {
			rec.Decision, rec.Reason = "deny", "wrong proxy token"
		}
		g.record(rec)
		return
	}
	switch {
	case r.Method == http.MethodConnect:
		g.connect(w, r)
	case r.URL.IsAbs() && r.URL.Scheme == "http":
		host, port, err := splitHostPort(r.URL.Host, 80)
		if err != nil {
			http.Error(w, "airlock: "+err.Error(), http.StatusBadRequest)
			return
		}
		t, d, err := g.route(r.Context(), host, port, r)
		if err != nil || d.Verdict != policy.Allow || !d.Intercept {
			g.refuse(w, host, port, d, err, "plain HTTP needs a bare host rule (ports 80/443)")
			return
		}
		if t.broker {
			g.brokerHandler(t).ServeHTTP(w, r)
			return
		}
		u := newUpstream(g, t, "http", false)
		u.ServeHTTP(w, r)
		u.close()
	default:
		http.Error(w, "airlock: this is a proxy: send CONNECT host:port or an absolute http:// URL", http.StatusBadRequest)
	}
}

func (g *Gateway) authorized(h string) bool {
	scheme, cred, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return false
	}
	_, pass, _ := strings.Cut(string(raw), ":")
	return subtle.ConstantTimeCompare([]byte(pass), []byte(g.cfg.Token)) == 1
}

// target is a destination that policy allowed, with the address to dial.
type target struct {
	host      string
	port      uint16
	addr      netip.Addr
	intercept bool
	tunnel    bool // a blind TLS tunnel: the SNI is checked, then bytes pass unseen
	rule      string
	broker    bool // served by Config.Broker, never dialled
}

func (t target) dialAddr() string {
	return netip.AddrPortFrom(t.addr, t.port).String()
}

// decide runs policy on the name, asks the approver if policy says Ask,
// resolves the name on the host and checks every address; the first address
// that passes is the one that will be dialled, so a name that resolves
// somewhere private later (rebinding) cannot slip by. A refusal is a
// Decision; a failure (the name does not resolve) is an error, audited as
// "error" rather than "deny". r is the plain-HTTP request through the proxy
// door, or nil.
func (g *Gateway) decide(ctx context.Context, host string, port uint16, r *http.Request) (target, policy.Decision, error) {
	t := target{host: strings.TrimSuffix(strings.ToLower(host), "."), port: port}
	d := g.policy().Host(t.host, port)
	if d.Verdict == policy.Ask {
		d = g.ask(ctx, t, d, r)
	}
	if d.Verdict != policy.Allow {
		return t, d, nil
	}
	t.intercept, t.tunnel, t.rule = d.Intercept, d.Tunnel, d.Rule
	if ip, err := netip.ParseAddr(t.host); err == nil {
		t.addr = ip.Unmap() // Host already checked a literal as a direct connection
		return t, d, nil
	}
	if ip, ok := g.cfg.StaticHosts[t.host]; ok {
		if ad := g.policy().Addr(ip, port, true); ad.Verdict != policy.Allow {
			return t, ad, nil
		}
		t.addr = ip
		return t, d, nil
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	ips, err := g.cfg.Resolver.LookupNetIP(ctx, "ip", t.host)
	if err == nil && len(ips) == 0 {
		err = errors.New("no addresses")
	}
	if err != nil {
		return t, d, fmt.Errorf("%s does not resolve on the host: %w", t.host, err)
	}
	var first policy.Decision
	for i, ip := range ips {
		ad := g.policy().Addr(ip.Unmap(), port, false)
		if ad.Verdict == policy.Allow {
			t.addr = ip.Unmap()
			return t, d, nil
		}
		if i == 0 {
			first = ad
		}
	}
	return t, first, nil
}

// refuse answers a refusal (403) or a failure (502, when err is set) with
// the reason, and audits it as "deny" or "error".
func (g *Gateway) refuse(w http.ResponseWriter, host string, port uint16, d policy.Decision, err error, extra string) {
	if err != nil {
		http.Error(w, fmt.Sprintf("airlock: %s:%d failed: %v", host, port, err), http.StatusBadGateway)
		g.recordError(host, port, d.Rule, err)
		return
	}
	reason := d.Reason
	if extra != "" && d.Verdict == policy.Allow {
		reason = extra
	}
	http.Error(w, fmt.Sprintf("airlock: %s:%d refused: %s", host, port, reason), http.StatusForbidden)
	g.recordDeny(host, port, d.Rule, reason)
}

// recordError audits a connection that policy allowed but that failed
// before it was made (the name did not resolve). Dial failures are audited
// by dialTunnel and upstream failures by the upstream handler, also as "error".
func (g *Gateway) recordError(host string, port uint16, rule string, err error) {
	g.record(audit.Record{Kind: "network", Host: host, Port: int(port), Decision: "error", Rule: rule, Reason: err.Error()})
}

// recordDeny audits a connection refused by policy.
func (g *Gateway) recordDeny(host string, port uint16, rule, reason string) {
	g.record(audit.Record{Kind: "network", Host: host, Port: int(port), Decision: "deny", Rule: rule, Reason: reason})
}

func (g *Gateway) record(r audit.Record) {
	if g.cfg.Audit != nil {
		g.cfg.Audit.Write(r)
	}
}

func splitHostPort(hostport string, defPort uint16) (string, uint16, error) {
	host, ps, err := net.SplitHostPort(hostport)
	if err != nil {
		if defPort == 0 || strings.Contains(hostport, "]:") {
			return "", 0, fmt.Errorf("bad host:port %q", hostport)
		}
		return strings.Trim(hostport, "[]"), defPort, nil
	}
	p, err := strconv.ParseUint(ps, 10, 16)
	if err != nil || p == 0 {
		return "", 0, fmt.Errorf("bad port in %q", hostport)
	}
	return host, uint16(p), nil
}
