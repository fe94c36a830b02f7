package supervisor

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/backend/native"
	"github.com/airlock-dev/airlock/internal/ca"
	"github.com/airlock-dev/airlock/internal/dnsserver"
	"github.com/airlock-dev/airlock/internal/gateway"
	"github.com/airlock-dev/airlock/internal/link"
	"github.com/airlock-dev/airlock/internal/netstack"
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
	// DNSUpstream is the resolver (IP:PORT) the gateway itself uses for
	// allowed names; "" means the host's.
	DNSUpstream string `json:"dns_upstream,omitempty"`
	// Mode is which door the sandbox's traffic takes: ModeTransparent,
	// ModeProxy, or "" / ModeAuto for transparent where this user can have it.
	Mode string `json:"mode,omitempty"`
	// SecretValues are secrets given by value (the programmatic API makes
	// them with secrets.New): never written anywhere, like Secrets' values.
	SecretValues []*secrets.Secret `json:"-"`
	// Hooks are Go functions the gateway calls on intercepted HTTP (the
	// embedded API's).
	Hooks gateway.Hooks `json:"-"`
}

// Network modes.
const (
	ModeAuto        = "auto"
	ModeTransparent = "transparent" // a TAP interface into the gateway's netstack: every packet
	ModeProxy       = "proxy"       // the explicit front door, relayed in, with proxy variables
)

func (n NetworkSpec) enabled() bool {
	return len(n.AllowHosts)+len(n.Endpoints)+len(n.Secrets)+len(n.SecretValues) > 0
}

// Enabled reports whether n lets anything out, so a gateway is needed.
func (n NetworkSpec) Enabled() bool { return n.enabled() }

// NetworkMode decides which door a sandbox gets: transparent wherever the
// TAP device can be made, else the proxy, and why.
func NetworkMode(requested string) (mode, why string, err error) {
	tapErr := native.CanMakeTAP()
	switch requested {
	case "", ModeAuto:
		if tapErr != nil {
			return ModeProxy, "no TAP device for this user: " + tapErr.Error(), nil
		}
		return ModeTransparent, "every packet goes through the gateway's network stack", nil
	case ModeTransparent:
		if tapErr != nil {
			return "", "", fmt.Errorf("--network-mode transparent: %v; run as root, or use --network-mode proxy", tapErr)
		}
		return ModeTransparent, "requested", nil
	case ModeProxy:
		return ModeProxy, "requested", nil
	}
	return "", "", fmt.Errorf("--network-mode %q: use auto, transparent or proxy", requested)
}

// The transparent network's fixed plan: the sandbox is 10.0.2.15 behind a
// gateway at 10.0.2.2 that also answers DNS at 10.0.2.3; names get
// addresses from 198.18.0.0/15 (the benchmarking range, never routed).
var (
	tapNet     = proto.Net{Device: "eth0", Addr: "10.0.2.15/24", Gateway: "10.0.2.2", MTU: 65520}
	gatewayIP  = netip.MustParseAddr("10.0.2.2")
	dnsIP      = netip.MustParseAddr("10.0.2.3")
	namePool   = netip.MustParsePrefix("198.18.0.0/15")
	maxUDPLogs = 100 // distinct dropped UDP destinations audited, then one note
)

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
	gw     *gateway.Gateway
	dns    *dnsserver.Server
	audit  *audit.Log
	env    []string
	files  []native.FileMount
	relay  *proto.Relay // proxy mode
	net    *proto.Net   // transparent mode
	ln     net.Listener // proxy mode: the front door
	stack  *netstack.Stack
	dnsUDP net.PacketConn // transparent mode: DNS, served until closed
	dnsTCP net.Listener
}

// pipeline is one gateway before it has a door: its policy, secrets, CA,
// audit log and proxy token. A sandbox's network and `airlock gateway` make
// it the same way.
type pipeline struct {
	gw        *gateway.Gateway
	policy    *policy.Policy
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
	for _, s := range n.SecretValues {
		all = append(all, s)
		allow = append(allow, s.Hosts...)
	}
	set, err := secrets.NewSet(all...)
	if err != nil {
		return nil, fmt.Errorf("--secret: %w", err)
	}
	pc := policy.Config{AllowHosts: allow, DenyHosts: n.DenyHosts, Endpoints: n.Endpoints}
	if n.Mode == ModeTransparent {
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
	gw, err := gateway.New(gateway.Config{Policy: pol, CA: authority, Secrets: set, Audit: log, StaticHosts: static, Resolver: resolver, Upstream: roots, Token: token, Hooks: n.Hooks})
	if err != nil {
		return nil, err
	}
	return &pipeline{gw: gw, policy: pol, audit: log, secrets: set, authority: authority, token: token}, nil
}

// startNetwork builds the sandbox's gateway. dir is the sandbox's state dir
// (audit log, bundle, resolv.conf), sock the path for the front door's
// socket in proxy mode. In transparent mode the gateway starts serving when
// attach gets the sandbox's TAP device.
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
	set, authority, token, gw := p.secrets, p.authority, p.token, p.gw
	bundle, err := authority.Bundle()
	if err != nil {
		return nil, err
	}
	bundlePath := filepath.Join(dir, "ca-bundle.pem")
	if err := os.WriteFile(bundlePath, bundle, 0o644); err != nil {
		return nil, err
	}
	nw := &network{gw: gw, audit: p.audit}
	nw.files = []native.FileMount{{Source: bundlePath, Target: bundleInside}}
	for _, b := range systemBundles {
		if st, err := os.Stat(b); err == nil && st.Mode().IsRegular() {
			nw.files = append(nw.files, native.FileMount{Source: bundlePath, Target: b})
		}
	}
	nw.env = append(set.Env(),
		"SSL_CERT_FILE="+bundleInside, "NODE_EXTRA_CA_CERTS="+bundleInside, "REQUESTS_CA_BUNDLE="+bundleInside,
		"CURL_CA_BUNDLE="+bundleInside, "GIT_SSL_CAINFO="+bundleInside)

	if n.Mode == ModeTransparent {
		nw.net = &tapNet
		nw.dns = &dnsserver.Server{Policy: p.policy, Pool: dnsserver.NewPool(namePool), Audit: p.audit}
		for _, f := range []struct{ name, target, text string }{
			{"resolv.conf", "/etc/resolv.conf", "# airlock: the gateway answers DNS for the names policy allows\nnameserver " + dnsIP.String() + "\noptions edns0\n"},
			{"hosts", "/etc/hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t" + native.Hostname(id) + "\n"},
		} {
			p := filepath.Join(dir, f.name)
			if err := os.WriteFile(p, []byte(f.text), 0o644); err != nil {
				return nil, err
			}
			nw.files = append(nw.files, native.FileMount{Source: p, Target: hostTarget(f.target)})
		}
		return nw, nil
	}
	os.Remove(sock)
	if nw.ln, err = net.Listen("unix", sock); err != nil {
		return nil, fmt.Errorf("gateway socket: %w", err)
	}
	go gw.ServeProxy(nw.ln)
	nw.relay = &proto.Relay{Listen: relayListen, Socket: proxyInside}
	nw.files = append(nw.files, native.FileMount{Source: sock, Target: proxyInside})
	proxy := "http://airlock:" + token + "@" + relayListen
	nw.env = append(nw.env,
		"HTTPS_PROXY="+proxy, "HTTP_PROXY="+proxy, "https_proxy="+proxy, "http_proxy="+proxy,
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1")
	return nw, nil
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

// attach starts the transparent door on the sandbox's TAP device: its
// netstack takes every packet, DNS is answered at dnsIP, and every TCP
// connection goes to the gateway under the name its address stands for.
func (nw *network) attach(tap *os.File) error {
	var mu sync.Mutex
	udpSeen := map[netip.AddrPort]bool{}
	st, err := netstack.New(netstack.Config{
		Link: link.Link{Kind: link.TAP, File: tap}, MTU: uint32(tapNet.MTU), Addrs: []netip.Addr{gatewayIP, dnsIP},
		Connect: func(ctx context.Context, dst netip.AddrPort) func(net.Conn) {
			host := dst.Addr().String()
			if name, ok := nw.dns.Pool.Name(dst.Addr()); ok {
				host = name
			}
			return nw.gw.Accept(ctx, host, dst.Port())
		},
		DroppedUDP: func(_, dst netip.AddrPort) {
			mu.Lock()
			defer mu.Unlock()
			if udpSeen[dst] || len(udpSeen) > maxUDPLogs {
				return
			}
			udpSeen[dst] = true
			r := audit.Record{Kind: "network", IP: dst.Addr().String(), Port: int(dst.Port()), Decision: "deny", Rule: "udp",
				Reason: "UDP is not forwarded; only DNS to " + dnsIP.String() + " is answered"}
			if len(udpSeen) > maxUDPLogs {
				r.Reason += fmt.Sprintf("; more than %d destinations, further ones not recorded", maxUDPLogs)
			}
			nw.audit.Write(r)
		},
	})
	if err != nil {
		return err
	}
	nw.stack = st
	dnsAddr := netip.AddrPortFrom(dnsIP, 53)
	pc, err := st.ListenPacket(dnsAddr)
	if err != nil {
		return fmt.Errorf("DNS over UDP: %w", err)
	}
	ln, err := st.Listen(dnsAddr)
	if err != nil {
		pc.Close()
		return fmt.Errorf("DNS over TCP: %w", err)
	}
	nw.dnsUDP, nw.dnsTCP = pc, ln
	go (&dns.Server{PacketConn: pc, Handler: nw.dns}).ActivateAndServe()
	go (&dns.Server{Listener: ln, Handler: nw.dns, ReadTimeout: 10 * time.Second, IdleTimeout: func() time.Duration { return 10 * time.Second }}).ActivateAndServe()
	return nil
}

func (nw *network) Close() {
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
	nw.audit.Close()
}

// Network is a sandbox's running gateway for callers other than the CLI's
// supervisor (the programmatic API): the same assembly, behind exported
// accessors.
type Network struct{ nw *network }

// StartNetwork resolves n's mode (transparent where this user can have it)
// and builds the gateway as a supervised sandbox gets it; see startNetwork.
// In transparent mode call Attach with the sandbox's TAP device.
func StartNetwork(n NetworkSpec, id, dir, sock string) (*Network, error) {
	var err error
	if n.Mode, _, err = NetworkMode(n.Mode); err != nil {
		return nil, err
	}
	nw, err := startNetwork(n, id, dir, sock)
	if err != nil {
		return nil, err
	}
	return &Network{nw}, nil
}

// Env is what the sandbox needs in its environment: placeholders, CA paths
// and, in proxy mode, the proxy variables.
func (n *Network) Env() []string { return n.nw.env }

// Files are the host files to bind inside (CA bundle, gateway socket, resolv.conf).
func (n *Network) Files() []native.FileMount { return n.nw.files }

// Relay is the guest's relay to the front door (proxy mode), or nil.
func (n *Network) Relay() *proto.Relay { return n.nw.relay }

// Net is the sandbox's interface plan (transparent mode), or nil.
func (n *Network) Net() *proto.Net { return n.nw.net }

// Audit is the gateway's log; Subscribe to it for live network records.
func (n *Network) Audit() *audit.Log { return n.nw.audit }

// Attach serves the transparent door on the sandbox's TAP device.
func (n *Network) Attach(tap *os.File) error { return n.nw.attach(tap) }

// Close stops the gateway and closes its audit log.
func (n *Network) Close() { n.nw.Close() }
