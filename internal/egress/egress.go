// Package egress assembles one sandbox's way out: the gateway pipeline
// (policy, host-side resolution, TLS interception, secrets, audit) and its
// door — the transparent netstack on a link from the backend, or the
// explicit proxy, whose connections the guest hands over from inside. It
// also runs that pipeline standalone (`airlock gateway`).
package egress

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/broker"
	"github.com/airlock-dev/airlock/internal/ca"
	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/dnsserver"
	"github.com/airlock-dev/airlock/internal/gateway"
	"github.com/airlock-dev/airlock/internal/ghapp"
	"github.com/airlock-dev/airlock/internal/llmusage"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/proto"
	"github.com/airlock-dev/airlock/internal/secrets"
)

// The transparent network's fixed plan: the sandbox is 10.0.2.15 behind a
// gateway at 10.0.2.2 that also answers DNS at 10.0.2.3; names get
// addresses from 198.18.0.0/15 (the benchmarking range, never routed).
var (
	tapNet     = proto.Net{Device: "eth0", Addr: "10.0.2.15/24", Gateway: "10.0.2.2", MTU: 65520}
	sandboxIP  = netip.MustParseAddr("10.0.2.15")
	gatewayIP  = netip.MustParseAddr("10.0.2.2")
	dnsIP      = netip.MustParseAddr("10.0.2.3")
	namePool   = netip.MustParsePrefix("198.18.0.0/15")
	maxUDPLogs = 100 // distinct dropped UDP destinations audited, then one note
)

// Inside the sandbox: where the guest relays from, and where the gateway's
// socket and the CA bundle appear.
const (
	relayListen = "127.0.0.1:3128"
	proxyInside = "/run/airlock/proxy.sock"
	// BundleInside is the CA bundle (the system's plus airlock's CA) every
	// sandbox with a gateway trusts; SSL_CERT_FILE and friends point at it.
	BundleInside = "/run/airlock/ca-bundle.pem"
	// TrustStoreInside is the same roots as a PKCS#12 trust store, for
	// JVMs (JAVA_TOOL_OPTIONS names it).
	TrustStoreInside = "/run/airlock/ca-truststore.p12"
)

// CAEnv is what makes each common runtime trust the bundle at bundle (the
// system's roots plus airlock's CA) without losing the system's roots: the
// variable each one reads, since many carry roots of their own and ignore
// the system's. Go, OpenSSL and curl read SSL_CERT_FILE (and the system
// paths, which the bundle covers too); Node NODE_EXTRA_CA_CERTS (which adds
// to its roots, so npm's registry works with it alone); npm's own cafile
// setting (which a project's .npmrc may set, and which replaces Node's
// roots) is pointed at the bundle so such a file cannot break it; Python's
// requests and pip, cargo, deno (whose own roots are Mozilla's) and the
// AWS CLI (botocore carries certifi's) each their own; JVMs the trust
// store (appended to the user's JAVA_TOOL_OPTIONS, see JavaOptions).
func CAEnv(bundle, trustStore string) []string {
	env := []string{
		"SSL_CERT_FILE=" + bundle, "NODE_EXTRA_CA_CERTS=" + bundle, "NPM_CONFIG_CAFILE=" + bundle,
		"REQUESTS_CA_BUNDLE=" + bundle, "PIP_CERT=" + bundle, "CURL_CA_BUNDLE=" + bundle, "GIT_SSL_CAINFO=" + bundle,
		"CARGO_HTTP_CAINFO=" + bundle, "DENO_CERT=" + bundle, "AWS_CA_BUNDLE=" + bundle,
	}
	if trustStore != "" {
		env = append(env, "JAVA_TOOL_OPTIONS="+JavaOptions(trustStore))
	}
	return env
}

// JavaOptions are the JVM options that make it trust the store at p.
func JavaOptions(p string) string {
	return "-Djavax.net.ssl.trustStore=" + p + " -Djavax.net.ssl.trustStoreType=PKCS12 -Djavax.net.ssl.trustStorePassword=" + ca.TrustStorePassword
}

// systemBundles are the usual trust-store files; the ones that exist on the
// host are covered by a bundle that adds airlock's CA.
var systemBundles = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}

// Egress is a sandbox's running gateway and what the sandbox needs to use it.
type Egress struct {
	// Env is what the sandbox needs in its environment: placeholders, CA
	// paths and, in proxy mode, the proxy variables.
	Env []string
	// Files are host files to bind inside (CA bundle, gateway socket, resolv.conf).
	Files []backend.FileMount
	Relay *proto.Relay // proxy mode: the guest's relay to the front door
	Net   *proto.Net   // transparent mode: the sandbox's interface

	gw     *gateway.Gateway
	meter  *llmusage.Meter
	base   policy.Config // the config's rules; SetRules adds remembered ones
	dns    *dnsserver.Server
	audit  *audit.Log
	ln     net.Listener         // proxy mode: the front door
	stack  interface{ Close() } // transparent mode: the netstack (attach_linux.go)
	dnsUDP net.PacketConn       // transparent mode: DNS, served until closed
	dnsTCP net.Listener
	// dialIn, transparent mode: a connection from the gateway's address
	// into the sandbox (published ports); set by Attach.
	dialIn func(ctx context.Context, to netip.AddrPort) (net.Conn, error)
}

// DialSandbox connects to port on the sandbox's network interface, from
// the gateway's address, through the netstack: a published port's way in.
// It is an error in proxy mode (the backend's guest dials there) and
// before Attach.
func (nw *Egress) DialSandbox(ctx context.Context, port uint16) (net.Conn, error) {
	if nw.dialIn == nil {
		return nil, errors.New("egress: no network interface to dial into")
	}
	return nw.dialIn(ctx, netip.AddrPortFrom(sandboxIP, port))
}

// Config is one sandbox's egress.
type Config struct {
	Network config.Network
	Mode    string // config.ModeTransparent or config.ModeProxy, decided already
	ID      string
	// Dir is the sandbox's private state dir (resolv.conf, hosts).
	Dir string
	// BundleDir holds the CA bundle files every sandbox shares, one per
	// content (see ca.BundleFile); "" writes the sandbox's own into Dir.
	BundleDir string
	// ProxySocket is where the front door listens in proxy mode.
	ProxySocket string
	Secrets     *secrets.Set // from LoadSecrets
	Audit       *audit.Log   // the sandbox's one audit stream
	Hooks       gateway.Hooks
	// Approver, if set, is asked about connections no rule covers (the
	// policy's default becomes ask); nil denies them.
	Approver gateway.Approver
	// Services are mounted on the broker at airlock.internal (pattern →
	// handler, e.g. "/hostexec/" or "/mcp/"): this sandbox's own, so a
	// request's sandbox is the one whose door it came through.
	Services map[string]http.Handler
	// Budget bounds the sandbox's LLM use; the gateway meters LLM responses
	// (kind llm in the audit log, with running totals) whether or not it is set.
	Budget config.Budget
}

// NewMeter is a sandbox's LLM meter for budget b (zero: no bound).
func NewMeter(b config.Budget) *llmusage.Meter {
	lb := llmusage.Budget{Tokens: b.Tokens, USD: b.USD}
	if len(b.Prices) > 0 {
		lb.Prices = map[string]llmusage.Price{}
		for g, p := range b.Prices {
			lb.Prices[g] = llmusage.Price{Input: p.Input, Output: p.Output, CacheRead: p.CacheRead, CacheWrite: p.CacheWrite}
		}
	}
	return llmusage.NewMeter(lb)
}

// Usage is the sandbox's LLM use so far, as the gateway metered it.
func (e *Egress) Usage() llmusage.Totals { return e.meter.Totals() }

// LoadSecrets reads the values of n's secrets (--secret's form: from the
// host's environment, a file, a command or a GitHub App) and adds values
// given directly. An error names the secret, never its value. App tokens
// are kept fresh until stop is called; warn hears failed refreshes (nil:
// standard error).
func LoadSecrets(n config.Network, values []*secrets.Secret, warn func(string)) (set *secrets.Set, stop func(), err error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			cancel()
		}
	}()
	if warn == nil {
		warn = func(w string) { fmt.Fprintf(os.Stderr, "airlock: warning: %s\n", w) }
	}
	src := secrets.DefaultSources()
	src.GitHubApp = func(name string, a secrets.AppSource) ([]byte, func(*secrets.Rotator), error) {
		return mintApp(ctx, n.UpstreamCA, name, a, warn)
	}
	all := append([]*secrets.Secret(nil), values...)
	for _, f := range n.Secrets {
		s, err := f.Open(src)
		if err != nil {
			return nil, nil, err
		}
		all = append(all, s)
	}
	set, err = secrets.NewSet(all...)
	if err != nil {
		return nil, nil, fmt.Errorf("--secret: %w", err)
	}
	return set, cancel, nil
}

// mintApp mints a github-app: source's first token on the host, and keeps
// later ones coming into the secret's Rotator until ctx ends. The HTTPS
// client verifies the API's certificate against the host's roots plus
// --upstream-ca, as the gateway does.
func mintApp(ctx context.Context, upstreamCA, name string, a secrets.AppSource, warn func(string)) ([]byte, func(*secrets.Rotator), error) {
	app := ghapp.App{AppID: a.AppID, InstallationID: a.InstallationID, KeyFile: a.Key, Repositories: a.Repos, Permissions: a.Permissions, API: a.API}
	if err := app.Check(); err != nil {
		return nil, nil, err
	}
	key, err := ghapp.LoadKey(app.KeyFile)
	if err != nil {
		return nil, nil, err
	}
	roots, err := upstreamRoots(upstreamCA)
	if err != nil {
		return nil, nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // the host's proxy settings are not the sandbox's business, nor a way around the CA check
	tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	m := &ghapp.Minter{App: app, Key: key, Client: &http.Client{Transport: tr, Timeout: time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	first, err := m.Mint(ctx, time.Now())
	if err != nil {
		return nil, nil, err
	}
	keep := func(r *secrets.Rotator) {
		k := &ghapp.Keeper{Minter: m, Rotate: r.Rotate,
			OnError: func(err error) { warn(fmt.Sprintf("secret %s: refreshing its GitHub App token: %v", name, err)) }}
		go k.Run(ctx, first)
	}
	return []byte(first.Value), keep, nil
}

// upstreamRoots is nil (the host's roots, loaded by crypto/tls when first
// needed) or the host's roots plus the --upstream-ca file.
func upstreamRoots(file string) (*x509.CertPool, error) {
	if file == "" {
		return nil, nil
	}
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	pem, err := config.ReadRegular(file, 4<<20) // a bundle, not a FIFO
	if err != nil {
		return nil, fmt.Errorf("--upstream-ca: %w", err)
	}
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--upstream-ca %s: no PEM certificate in it", file)
	}
	return roots, nil
}

// pipeline is one gateway before it has a door: its policy, secrets, CA,
// audit log and proxy token. A sandbox's egress and `airlock gateway` make
// it the same way.
type pipeline struct {
	gw        *gateway.Gateway
	config    policy.Config
	policy    *policy.Policy
	authority *ca.CA
	token     string
}

// newPipeline builds a gateway from n, its secrets and audit log.
func newPipeline(id string, n config.Network, mode string, set *secrets.Set, log *audit.Log, hooks gateway.Hooks, approver gateway.Approver, services map[string]http.Handler, meter *llmusage.Meter) (*pipeline, error) {
	allow := append([]string(nil), n.AllowHosts...)
	allow = append(allow, set.Hosts()...)
	if err := n.CheckTunnels(); err != nil {
		return nil, err
	}
	if err := config.CheckTunnelSecrets(n.TunnelHosts, set.All()); err != nil { // also those given by the API, not in n
		return nil, err
	}
	pc := policy.Config{AllowHosts: allow, Tunnels: n.TunnelHosts, DenyHosts: n.DenyHosts, Endpoints: n.Endpoints}
	if n.PolicyScript != "" {
		sc, err := LoadPolicyScript(n.PolicyScript, log, id)
		if err != nil {
			return nil, err
		}
		pc.Script = sc
		hooks = scriptHooks(sc, hooks)
	}
	if approver != nil {
		pc.Default = policy.Ask
	}
	if mode == config.ModeTransparent {
		pc.GatewayAddrs = []netip.AddrPort{netip.AddrPortFrom(gatewayIP, 0), netip.AddrPortFrom(dnsIP, 0)}
	}
	pol, err := policy.New(pc)
	if err != nil {
		return nil, err
	}
	static := map[string]netip.Addr{}
	for _, a := range n.AddHosts {
		name, ip, ok := strings.Cut(a, ":")
		addr, perr := netip.ParseAddr(strings.Trim(ip, "[]"))
		if !ok || name == "" || perr != nil {
			return nil, fmt.Errorf("--add-host %q: use NAME:IP, e.g. api.local:127.0.0.1", a)
		}
		static[strings.ToLower(strings.TrimSuffix(name, "."))] = addr
	}
	resolver, err := hostResolver(n.DNSUpstream)
	if err != nil {
		return nil, err
	}
	// nil is the host's roots (gateway.Config.Upstream), which crypto/tls
	// loads at the first upstream handshake: parsing them here took 10-16
	// ms of every start with a network, before the guest had its plan.
	roots, err := upstreamRoots(n.UpstreamCA)
	if err != nil {
		return nil, err
	}
	caDir, err := ca.Dir()
	if err != nil {
		return nil, err
	}
	authority, err := ca.Load(caDir)
	if err != nil {
		return nil, err
	}
	tok := make([]byte, 32) // 256 bits: the sandbox's only credential for its door
	rand.Read(tok)
	token := hex.EncodeToString(tok)
	// The broker at airlock.internal tells the sandbox about itself: names
	// of secrets and their hosts, never values.
	info := broker.Info{Sandbox: id, Network: broker.Network{Mode: mode, Default: pc.Default.String(), AllowHosts: allow, TunnelHosts: n.TunnelHosts, DenyHosts: n.DenyHosts, Endpoints: n.Endpoints}}
	for _, s := range set.All() {
		info.Network.Secrets = append(info.Network.Secrets, broker.Secret{Name: s.Name, Hosts: s.Hosts})
	}
	b := broker.New(info)
	for pattern, h := range services {
		b.Handle(pattern, h)
	}
	gw, err := gateway.New(gateway.Config{Policy: pol, CA: authority, Secrets: set, Audit: log, StaticHosts: static, Resolver: resolver, Upstream: roots, Token: token, Hooks: hooks,
		Sandbox: id, Broker: b, Approver: approver, Meter: meter})
	if err != nil {
		return nil, err
	}
	return &pipeline{gw: gw, config: pc, policy: pol, authority: authority, token: token}, nil
}

// Start builds the sandbox's gateway. In transparent mode it starts serving
// when Attach gets the sandbox's link; in proxy mode its front door listens
// on c.ProxySocket now.
func Start(c Config) (_ *Egress, err error) {
	meter := NewMeter(c.Budget)
	p, err := newPipeline(c.ID, c.Network, c.Mode, c.Secrets, c.Audit, c.Hooks, c.Approver, c.Services, meter)
	if err != nil {
		return nil, err
	}
	gw, token := p.gw, p.token
	bundleDir := c.BundleDir
	if bundleDir == "" {
		bundleDir = c.Dir
	}
	bundlePath, err := p.authority.BundleFile(bundleDir)
	if err != nil {
		return nil, err
	}
	trustStore, err := ca.TrustStoreFile(bundlePath)
	if err != nil {
		return nil, err
	}
	e := &Egress{gw: gw, meter: meter, base: p.config, audit: c.Audit}
	e.Files = []backend.FileMount{{Source: bundlePath, Target: BundleInside}, {Source: trustStore, Target: TrustStoreInside}}
	for _, b := range systemBundles {
		if st, err := os.Stat(b); err == nil && st.Mode().IsRegular() {
			e.Files = append(e.Files, backend.FileMount{Source: bundlePath, Target: b})
		}
	}
	e.Env = append(c.Secrets.Env(), CAEnv(BundleInside, TrustStoreInside)...)
	// git over HTTPS to a :git secret's hosts gets its placeholder from a
	// credential helper in git's environment config (config.MergeEnv puts
	// it after any the user passes).
	e.Env = append(e.Env, config.GitConfigEnv(c.Secrets.GitConfig())...)

	if c.Mode == config.ModeTransparent {
		e.Net = &tapNet
		e.dns = &dnsserver.Server{Policy: p.policy, Pool: dnsserver.NewPool(namePool), Audit: c.Audit, Broker: true, Approvals: c.Approver != nil}
		for _, f := range []struct{ name, target, text string }{
			{"resolv.conf", "/etc/resolv.conf", "# airlock: the gateway answers DNS for the names policy allows\nnameserver " + dnsIP.String() + "\noptions edns0\n"},
			{"hosts", "/etc/hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t" + backend.Hostname(c.ID) + "\n"},
		} {
			p := filepath.Join(c.Dir, f.name)
			if err := os.WriteFile(p, []byte(f.text), 0o644); err != nil {
				return nil, err
			}
			e.Files = append(e.Files, backend.FileMount{Source: p, Target: hostTarget(f.target)})
		}
		return e, nil
	}
	os.Remove(c.ProxySocket)
	if e.ln, err = listenHandover(c.ProxySocket); err != nil {
		return nil, fmt.Errorf("gateway socket: %w", err)
	}
	go gw.ServeProxy(e.ln)
	e.Relay = &proto.Relay{Listen: relayListen, Socket: proxyInside}
	e.Files = append(e.Files, backend.FileMount{Source: c.ProxySocket, Target: proxyInside})
	proxy := "http://airlock:" + token + "@" + relayListen
	e.Env = append(e.Env,
		"HTTPS_PROXY="+proxy, "HTTP_PROXY="+proxy, "https_proxy="+proxy, "http_proxy="+proxy,
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1")
	return e, nil
}

// hostResolver is the resolver the gateway uses for allowed names: the
// host's, or the one --dns-upstream names.
func hostResolver(upstream string) (gateway.Resolver, error) {
	if upstream == "" {
		return net.DefaultResolver, nil
	}
	ap, err := netip.ParseAddrPort(upstream)
	if err != nil {
		return nil, fmt.Errorf("--dns-upstream %q: use IP:PORT, e.g. 192.168.1.1:53", upstream)
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, ap.String())
	}}, nil
}

// hostTarget follows a host path's symlinks (resolv.conf is often one into
// /run) to the file a sandbox process opening the path would reach, so the
// mount lands there even when the link dangles inside the sandbox's /run.
func hostTarget(p string) string {
	for range 8 {
		link, err := os.Readlink(p)
		if err != nil {
			return p
		}
		if !path.IsAbs(link) {
			link = path.Join(path.Dir(p), link)
		}
		p = path.Clean(link)
	}
	return p
}

// Close stops the gateway; the audit log is the caller's.
func (nw *Egress) Close() {
	if nw.ln != nil {
		nw.ln.Close()
	}
	if nw.dnsUDP != nil {
		nw.dnsUDP.Close()
		nw.dnsTCP.Close()
	}
	if nw.stack != nil {
		nw.stack.Close()
	}
}

// SetRules puts the config's rules plus allow and deny (remembered
// decisions) in force for every decision from now on; a deny wins as ever.
func (e *Egress) SetRules(allow, deny []string) error {
	pc := e.base
	pc.AllowHosts = append(append([]string(nil), e.base.AllowHosts...), allow...)
	pc.DenyHosts = append(append([]string(nil), e.base.DenyHosts...), deny...)
	p, err := policy.New(pc)
	if err != nil {
		return err
	}
	e.gw.SetPolicy(p)
	if e.dns != nil {
		e.dns.SetPolicy(p)
	}
	return nil
}
