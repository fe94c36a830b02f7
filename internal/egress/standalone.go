package egress

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/ca"
	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/gateway"
)

// GatewayOptions run the gateway's explicit front door on its own, for any
// client that honours HTTP(S)_PROXY.
type GatewayOptions struct {
	Listen  string         // unix:PATH or tcp:127.0.0.1:PORT (loopback only; port 0 picks one)
	Network config.Network // policy, secrets, hosts, upstream CA
	Dir     string         // where the audit log and CA bundle go (created, private)
	Out     io.Writer      // the client's settings, one NAME=VALUE a line
}

// ReadGatewayConfig reads a JSON file with config.Network's fields
// (allow_hosts, deny_hosts, endpoints, secrets, add_hosts, upstream_ca,
// policy_script).
func ReadGatewayConfig(path string) (config.Network, error) {
	var n config.Network
	f, err := os.Open(path)
	if err != nil {
		return n, fmt.Errorf("--config: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20+1))
	if err != nil {
		return n, fmt.Errorf("--config %s: %w", path, err)
	}
	if len(b) > 1<<20 {
		return n, fmt.Errorf("--config %s: larger than 1 MiB", path)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&n); err != nil {
		return n, fmt.Errorf("--config %s: %v (expected JSON such as {\"allow_hosts\": [\"api.example.com\"], \"secrets\": [\"API_KEY@api.example.com\"]})", path, err)
	}
	if n.UpstreamCA != "" && !filepath.IsAbs(n.UpstreamCA) {
		n.UpstreamCA = filepath.Join(filepath.Dir(path), n.UpstreamCA)
	}
	if n.PolicyScript != "" && !filepath.IsAbs(n.PolicyScript) {
		n.PolicyScript = filepath.Join(filepath.Dir(path), n.PolicyScript)
	}
	return n, nil
}

// parseListen checks a --listen value. TCP is refused off loopback: the
// token would cross the network in clear.
func parseListen(spec string) (network, addr string, err error) {
	kind, addr, ok := strings.Cut(spec, ":")
	switch {
	case ok && kind == "unix" && addr != "":
		return "unix", addr, nil
	case ok && kind == "tcp":
		host, _, err := net.SplitHostPort(addr)
		ip, perr := netip.ParseAddr(host)
		if err != nil || perr != nil || !ip.IsLoopback() {
			return "", "", fmt.Errorf("--listen %s: use tcp:127.0.0.1:PORT; the front door listens on loopback only (its token travels in clear)", spec)
		}
		return "tcp", addr, nil
	}
	return "", "", fmt.Errorf("--listen %q: use unix:PATH or tcp:127.0.0.1:PORT", spec)
}

// listenGateway opens the front door's listener.
func listenGateway(spec string) (net.Listener, error) {
	kind, addr, err := parseListen(spec)
	if err != nil {
		return nil, err
	}
	switch kind {
	case "unix":
		os.Remove(addr)
		ln, err := net.Listen("unix", addr)
		if err != nil {
			return nil, fmt.Errorf("--listen %s: %w", spec, err)
		}
		os.Chmod(addr, 0o600)
		return ln, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--listen %s: %w", spec, err)
	}
	return ln, nil
}

// ServeGateway runs the front door until ctx ends: the same pipeline (policy,
// host-side resolution, interception, secret swap, audit) a sandbox gets.
func ServeGateway(ctx context.Context, o GatewayOptions) error {
	if _, _, err := parseListen(o.Listen); err != nil {
		return err
	}
	if !o.Network.Enabled() {
		return errors.New("the gateway would refuse everything: allow something with --allow-host or --secret (or in --config)")
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return fmt.Errorf("gateway dir: %w", err)
	}
	idb := make([]byte, 6)
	rand.Read(idb)
	id := "gw-" + hex.EncodeToString(idb)
	auditPath := filepath.Join(o.Dir, id+".audit.jsonl")
	set, stop, err := LoadSecrets(o.Network, nil, nil)
	if err != nil {
		return err
	}
	defer stop()
	log, err := audit.Open(auditPath, id, set.RedactString)
	if err != nil {
		return err
	}
	defer log.Close()
	p, err := newPipeline(id, o.Network, config.ModeProxy, set, log, gateway.Hooks{}, nil, nil, NewMeter(config.Budget{}))
	if err != nil {
		return err
	}
	bundlePath, err := p.authority.BundleFile(o.Dir)
	if err != nil {
		return err
	}
	trustStore, err := ca.TrustStoreFile(bundlePath)
	if err != nil {
		return err
	}
	ln, err := listenGateway(o.Listen)
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- p.gw.ServeProxy(ln) }()

	env := set.Env()
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok {
		proxy := "http://airlock:" + p.token + "@" + tcp.String()
		env = append(env, "HTTPS_PROXY="+proxy, "HTTP_PROXY="+proxy, "https_proxy="+proxy, "http_proxy="+proxy,
			"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1")
	} else {
		auth := base64.StdEncoding.EncodeToString([]byte("airlock:" + p.token))
		env = append(env, "AIRLOCK_PROXY_SOCKET="+ln.Addr().String(), "AIRLOCK_PROXY_AUTHORIZATION=Basic "+auth)
	}
	env = append(append(env, CAEnv(bundlePath, trustStore)...), "AIRLOCK_GATEWAY_AUDIT="+auditPath)
	fmt.Fprintln(o.Out, strings.Join(env, "\n"))

	select {
	case <-ctx.Done():
		ln.Close()
		<-served
		if u, ok := ln.Addr().(*net.UnixAddr); ok {
			os.Remove(u.Name)
		}
		return nil
	case err := <-served:
		return fmt.Errorf("gateway: %w", err)
	}
}
