package supervisor

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/backend/native"
	"github.com/airlock-dev/airlock/internal/ca"
	"github.com/airlock-dev/airlock/internal/gateway"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/proto"
	"github.com/airlock-dev/airlock/internal/secrets"
)

// NetworkSpec is what a sandbox may reach. Without allow rules (or secrets)
// there is no gateway at all and the sandbox has loopback only.
type NetworkSpec struct {
	AllowHosts []string `json:"allow_hosts,omitempty"`
	DenyHosts  []string `json:"deny_hosts,omitempty"`
	Endpoints  []string `json:"endpoints,omitempty"`
	// Secrets are --secret flags. Values are read when the supervisor starts
	// and never stored; each secret's hosts are allowed.
	Secrets    []string `json:"secrets,omitempty"`
	AddHosts   []string `json:"add_hosts,omitempty"` // NAME:IP
	UpstreamCA string   `json:"upstream_ca,omitempty"`
}

func (n NetworkSpec) enabled() bool {
	return len(n.AllowHosts)+len(n.Endpoints)+len(n.Secrets) > 0
}

// Inside the sandbox: where the guest relays from, and where the gateway's
// socket and the CA bundle appear.
const (
	relayListen  = "127.0.0.1:3128"
	proxyInside  = "/run/airlock/proxy.sock"
	bundleInside = "/run/airlock/ca-bundle.pem"
)

// systemBundles are the usual trust-store files; the ones that exist on the
// host are covered by a bundle that adds airlock's CA.
var systemBundles = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}

// network is a running gateway and what the sandbox needs to use it.
type network struct {
	ln    net.Listener
	audit *audit.Log
	env   []string
	files []native.FileMount
	relay *proto.Relay
}

// pipeline is one gateway before it has a door: its policy, secrets, CA,
// audit log and proxy token. A sandbox's network and `airlock gateway` make
// it the same way.
type pipeline struct {
	gw        *gateway.Gateway
	audit     *audit.Log
	secrets   *secrets.Set
	authority *ca.CA
	token     string
}

// newPipeline builds a gateway from n, auditing to auditPath as sandbox id.
func newPipeline(n NetworkSpec, id, auditPath string) (_ *pipeline, err error) {
	var all []*secrets.Secret
	allow := append([]string(nil), n.AllowHosts...)
	for _, f := range n.Secrets {
		s, err := secrets.ParseFlag(f, secrets.DefaultSources())
		if err != nil {
			return nil, err
		}
		all = append(all, s)
		allow = append(allow, s.Hosts...)
	}
	set, err := secrets.NewSet(all...)
	if err != nil {
		return nil, fmt.Errorf("--secret: %w", err)
	}
	pol, err := policy.New(policy.Config{AllowHosts: allow, DenyHosts: n.DenyHosts, Endpoints: n.Endpoints})
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
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	if n.UpstreamCA != "" {
		pem, err := os.ReadFile(n.UpstreamCA)
		if err != nil {
			return nil, fmt.Errorf("--upstream-ca: %w", err)
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--upstream-ca %s: no PEM certificate in it", n.UpstreamCA)
		}
	}
	caDir, err := ca.Dir()
	if err != nil {
		return nil, err
	}
	authority, err := ca.Load(caDir)
	if err != nil {
		return nil, err
	}
	log, err := audit.Open(auditPath, id, set.RedactString)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			log.Close()
		}
	}()
	tok := make([]byte, 32) // 256 bits: the sandbox's only credential for its door
	rand.Read(tok)
	token := hex.EncodeToString(tok)
	gw, err := gateway.New(gateway.Config{Policy: pol, CA: authority, Secrets: set, Audit: log, StaticHosts: static, Upstream: roots, Token: token})
	if err != nil {
		return nil, err
	}
	return &pipeline{gw: gw, audit: log, secrets: set, authority: authority, token: token}, nil
}

// startNetwork builds and serves the sandbox's gateway. dir is the sandbox's
// state dir (audit log, bundle), sock the path for the front door's socket.
func startNetwork(n NetworkSpec, id, dir, sock string) (_ *network, err error) {
	p, err := newPipeline(n, id, filepath.Join(dir, "audit.jsonl"))
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			p.audit.Close()
		}
	}()
	log, set, authority, token, gw := p.audit, p.secrets, p.authority, p.token, p.gw
	bundle, err := authority.Bundle()
	if err != nil {
		return nil, err
	}
	bundlePath := filepath.Join(dir, "ca-bundle.pem")
	if err := os.WriteFile(bundlePath, bundle, 0o644); err != nil {
		return nil, err
	}
	os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("gateway socket: %w", err)
	}
	go gw.ServeProxy(ln)

	nw := &network{ln: ln, audit: log, relay: &proto.Relay{Listen: relayListen, Socket: proxyInside}}
	nw.files = []native.FileMount{{Source: sock, Target: proxyInside}, {Source: bundlePath, Target: bundleInside}}
	for _, b := range systemBundles {
		if st, err := os.Stat(b); err == nil && st.Mode().IsRegular() {
			nw.files = append(nw.files, native.FileMount{Source: bundlePath, Target: b})
		}
	}
	proxy := "http://airlock:" + token + "@" + relayListen
	nw.env = append(set.Env(),
		"HTTPS_PROXY="+proxy, "HTTP_PROXY="+proxy, "https_proxy="+proxy, "http_proxy="+proxy,
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1",
		"SSL_CERT_FILE="+bundleInside, "NODE_EXTRA_CA_CERTS="+bundleInside, "REQUESTS_CA_BUNDLE="+bundleInside,
		"CURL_CA_BUNDLE="+bundleInside, "GIT_SSL_CAINFO="+bundleInside)
	return nw, nil
}

func (n *network) Close() {
	n.ln.Close()
	n.audit.Close()
}
