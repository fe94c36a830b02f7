package gateway

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/ca"
	"github.com/airlock-dev/airlock/internal/llmusage"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/secrets"
	"github.com/airlock-dev/airlock/internal/testutil"
)

const token = "test-token-0123456789abcdefghijklmnopqrstuv"

// fakeDNS answers names from a table: the real DNS of the public internet
// cannot exist here.
type fakeDNS map[string][]netip.Addr

func (f fakeDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, fmt.Errorf("no such host %s", host)
}

type fixture struct {
	t        *testing.T
	gw       *Gateway
	proxy    string // host:port of the front door
	client   *http.Client
	auditLog string
	ca       *ca.CA
	dials    *atomic.Int64 // connections the gateway opened toward upstreams
}

type options struct {
	policy  policy.Config
	static  map[string]netip.Addr
	dns     fakeDNS
	secrets *secrets.Set
	// ports maps the port the gateway dials (443, 80, ...) to a test server's.
	ports    map[uint16]string
	approver Approver
	broker   http.Handler
	resolver Resolver // instead of dns
	meter    *llmusage.Meter
}

// newFixture runs a gateway on 127.0.0.1:0 with a real CA, policy and audit
// log, and an http.Client that uses it as its proxy and trusts the CA.
func newFixture(t *testing.T, o options, upstreamRoots ...*x509.Certificate) *fixture {
	t.Helper()
	dir := t.TempDir()
	c, err := ca.Load(filepath.Join(dir, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.New(o.policy)
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "audit.jsonl")
	var redact func(string) string
	if o.secrets != nil {
		redact = o.secrets.RedactString
	}
	al, err := audit.OpenWith(logPath, "test", redact, audit.Options{Interval: -1}) // every record, as the tests count them
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	roots := x509.NewCertPool()
	for _, r := range upstreamRoots {
		roots.AddCert(r)
	}
	var resolver Resolver = o.dns
	if o.resolver != nil {
		resolver = o.resolver
	}
	gw, err := New(Config{Policy: pol, CA: c, Secrets: o.secrets, Audit: al, StaticHosts: o.static, Resolver: resolver, Upstream: roots, Token: token,
		Sandbox: "sb-test", Approver: o.approver, Broker: o.broker, Meter: o.meter})
	if err != nil {
		t.Fatal(err)
	}
	real := gw.dial
	dials := new(atomic.Int64)
	gw.dial = func(ctx context.Context, addr string) (net.Conn, error) {
		dials.Add(1)
		ap := netip.MustParseAddrPort(addr)
		if to, ok := o.ports[ap.Port()]; ok {
			addr = netip.AddrPortFrom(ap.Addr(), netip.MustParseAddrPort(to).Port()).String()
		}
		return real(ctx, addr)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gw.ServeProxy(ln)
	t.Cleanup(func() { ln.Close() })
	sandboxRoots := x509.NewCertPool()
	sandboxRoots.AppendCertsFromPEM(c.CertPEM())
	tr := &http.Transport{
		Proxy:             http.ProxyURL(&url.URL{Scheme: "http", User: url.UserPassword("airlock", token), Host: ln.Addr().String()}),
		TLSClientConfig:   &tls.Config{RootCAs: sandboxRoots},
		ForceAttemptHTTP2: true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &fixture{t: t, gw: gw, proxy: ln.Addr().String(), client: &http.Client{Transport: tr, Timeout: 20 * time.Second}, auditLog: logPath, ca: c, dials: dials}
}

// upstreamTLS is a real HTTPS server on loopback whose certificate is for
// example.com and 127.0.0.1 (httptest's), with HTTP/2 on.
func upstreamTLS(t *testing.T, h http.Handler) *httptest.Server {
	s := httptest.NewUnstartedServer(h)
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

func (f *fixture) records() []audit.Record {
	f.t.Helper()
	return testutil.AuditRecords(f.t, f.auditLog)
}

// recordFor is the last record of kind about host:port, failing the test if
// there is none (so a check never reads the previous case's record).
func (f *fixture) recordFor(kind, host string, port int) audit.Record {
	f.t.Helper()
	var last *audit.Record
	recs := f.records()
	for i, r := range recs {
		if r.Kind == kind && r.Host == host && r.Port == port {
			last = &recs[i]
		}
	}
	if last == nil {
		f.t.Fatalf("no %s record for %s:%d in %+v", kind, host, port, recs)
	}
	return *last
}

func (f *fixture) lastRecord(kind string) audit.Record {
	f.t.Helper()
	var last audit.Record
	for _, r := range f.records() {
		if r.Kind == kind {
			last = r
		}
	}
	return last
}

var loopback = netip.MustParseAddr("127.0.0.1")

func allowExample(extra ...string) policy.Config {
	return policy.Config{AllowHosts: append([]string{"example.com"}, extra...)}
}

func TestAllowedHTTPSIsInterceptedAndAudited(t *testing.T) {
	up := upstreamTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s %s %s", r.Method, r.URL.Path, r.Proto)
	}))
	f := newFixture(t, options{policy: allowExample(), static: map[string]netip.Addr{"example.com": loopback}, ports: map[uint16]string{443: up.Listener.Addr().String()}}, up.Certificate())
	h2only := f.client.Transport.(*http.Transport).Clone()
	h2only.Protocols = new(http.Protocols)
	h2only.Protocols.SetHTTP2(true)
	t.Cleanup(h2only.CloseIdleConnections)
	// A client that speaks both gets HTTP/1.1 (the cheaper path through the
	// gateway) and so does the upstream; one that speaks only HTTP/2 (gRPC)
	// gets HTTP/2 both ways.
	for _, c := range []struct {
		name   string
		client *http.Client
		proto  int
		want   string
	}{
		{"both offered", f.client, 1, "hello GET /hi HTTP/1.1"},
		{"h2 only", &http.Client{Transport: h2only, Timeout: 20 * time.Second}, 2, "hello GET /hi HTTP/2.0"},
	} {
		resp, err := c.client.Get("https://example.com/hi")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != c.want {
			t.Errorf("%s: body = %q, want %q", c.name, body, c.want)
		}
		if resp.ProtoMajor != c.proto {
			t.Errorf("%s: protocol toward the sandbox = %s", c.name, resp.Proto)
		}
		if issuer := resp.TLS.PeerCertificates[0].Issuer.CommonName; issuer != f.ca.Certificate().Subject.CommonName {
			t.Errorf("leaf issued by %q, want the local CA", issuer)
		}
		r := f.lastRecord("http")
		if r.Decision != "allow" || r.Status != 200 || r.Method != "GET" || r.Path != "/hi" || r.Host != "example.com" || r.BytesIn != int64(len(body)) {
			t.Errorf("audit record = %+v", r)
		}
	}
}

func TestHostsOutsidePolicyAreRefusedWithAReason(t *testing.T) {
	up := upstreamTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	f := newFixture(t, options{policy: policy.Config{AllowHosts: []string{"example.com"}, DenyHosts: []string{"*.evil.test"}},
		static: map[string]netip.Addr{"example.com": loopback}, ports: map[uint16]string{443: up.Listener.Addr().String()}}, up.Certificate())
	for _, c := range []struct {
		host string
		port int
	}{{"other.test", 443}, {"x.evil.test", 443}, {"example.com", 8443}} {
		_, err := f.client.Get(fmt.Sprintf("https://%s:%d/", c.host, c.port))
		if err == nil || !strings.Contains(err.Error(), "Forbidden") {
			t.Errorf("GET %s:%d: err = %v, want a 403 from the proxy", c.host, c.port, err)
		}
		if r := f.recordFor("network", c.host, c.port); r.Decision != "deny" || r.Reason == "" {
			t.Errorf("%s:%d: audit = %+v, want a deny with a reason", c.host, c.port, r)
		}
	}
	if n := f.dials.Load(); n != 0 {
		t.Errorf("the gateway dialled %d times for refused hosts, want none", n)
	}
	// Positive control: the allowed host is dialled and answers.
	resp, err := f.client.Get("https://example.com/")
	if err != nil {
		t.Fatalf("allowed host: %v", err)
	}
	resp.Body.Close()
	if f.dials.Load() != 1 || f.recordFor("http", "example.com", 443).Decision != "allow" {
		t.Errorf("allowed host: %d dials, records %+v", f.dials.Load(), f.records())
	}
}

func TestWrongOrMissingTokenGets407(t *testing.T) {
	f := newFixture(t, options{policy: allowExample()})
	for _, auth := range []string{"", "Basic " + b64("airlock:wrong"), "Bearer " + token} {
		conn, err := net.Dial("tcp", f.proxy)
		if err != nil {
			t.Fatal(err)
		}
		req := "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n"
		if auth != "" {
			req += "Proxy-Authorization: " + auth + "\r\n"
		}
		fmt.Fprint(conn, req+"\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		conn.Close()
		if err != nil || resp.StatusCode != http.StatusProxyAuthRequired {
			t.Errorf("auth %q: %v %v, want 407", auth, resp, err)
		}
	}
}

func TestPrivateAddressesNeedAnExplicitRuleSoRebindingFails(t *testing.T) {
	// An allowed name that resolves to loopback (DNS rebinding) is refused;
	// the same address through --add-host is explicit and allowed.
	up := upstreamTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "inside") }))
	f := newFixture(t, options{policy: allowExample(), dns: fakeDNS{"example.com": {loopback}}, ports: map[uint16]string{443: up.Listener.Addr().String()}}, up.Certificate())
	_, err := f.client.Get("https://example.com/")
	if err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Fatalf("rebinding to loopback: err = %v, want 403", err)
	}
	if r := f.recordFor("network", "example.com", 443); !strings.Contains(r.Reason, "loopback") {
		t.Errorf("reason %q should name the loopback class", r.Reason)
	}
	if n := f.dials.Load(); n != 0 {
		t.Errorf("the gateway dialled %d times for a rebound name, want none", n)
	}
	f = newFixture(t, options{policy: allowExample(), static: map[string]netip.Addr{"example.com": loopback}, ports: map[uint16]string{443: up.Listener.Addr().String()}}, up.Certificate())
	if resp, err := f.client.Get("https://example.com/"); err != nil {
		t.Fatalf("--add-host address: %v", err)
	} else {
		resp.Body.Close()
	}
}

func TestEndpointRulesLimitMethodsAndPaths(t *testing.T) {
	up := upstreamTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	f := newFixture(t, options{policy: policy.Config{AllowHosts: []string{"example.com"}, Endpoints: []string{"example.com GET /v1/*"}},
		static: map[string]netip.Addr{"example.com": loopback}, ports: map[uint16]string{443: up.Listener.Addr().String()}}, up.Certificate())
	for _, c := range []struct {
		method, path string
		want         int
	}{{"GET", "/v1/models", 200}, {"POST", "/v1/models", 403}, {"GET", "/admin", 403}, {"GET", "/v1/../admin", 403}} {
		req, _ := http.NewRequest(c.method, "https://example.com"+c.path, nil)
		req.URL.RawPath = c.path // keep "..": clients can send it raw
		resp, err := f.client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", c.method, c.path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s %s = %d, want %d", c.method, c.path, resp.StatusCode, c.want)
		}
	}
}

func TestSecretsAreSwappedTowardTheirHostAndRedactedOnTheWayBack(t *testing.T) {
	const real = "sk-real-value-never-in-sandbox-1234"
	sec, err := secrets.New("API_KEY", []byte(real), []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	set, err := secrets.NewSet(sec)
	if err != nil {
		t.Fatal(err)
	}
	var seen struct {
		sync.Mutex
		auth, query string
	}
	up := upstreamTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Lock()
		seen.auth, seen.query = r.Header.Get("Authorization"), r.URL.Query().Get("key")
		seen.Unlock()
		// An upstream that echoes what it received (an error quoting the request).
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		fmt.Fprintf(w, "you sent %s and %s", r.Header.Get("Authorization"), r.URL.Query().Get("key"))
	}))
	f := newFixture(t, options{policy: allowExample(), secrets: set, static: map[string]netip.Addr{"example.com": loopback}, ports: map[uint16]string{443: up.Listener.Addr().String()}}, up.Certificate())
	req, _ := http.NewRequest("GET", "https://example.com/v1?key="+sec.Placeholder, nil)
	req.Header.Set("Authorization", "Bearer "+sec.Placeholder)
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	seen.Lock()
	if seen.auth != "Bearer "+real || seen.query != real {
		t.Errorf("upstream saw %q and %q, want the real value in both", seen.auth, seen.query)
	}
	seen.Unlock()
	if strings.Contains(string(body), real) || strings.Contains(resp.Header.Get("X-Echo"), real) {
		t.Fatalf("the real value reached the sandbox: %q / %q", body, resp.Header.Get("X-Echo"))
	}
	if !strings.Contains(string(body), sec.Placeholder) {
		t.Errorf("echo should show the placeholder: %q", body)
	}
	log, _ := os.ReadFile(f.auditLog)
	if strings.Contains(string(log), real) {
		t.Fatal("the real value is in the audit log")
	}
}

func TestARotatedSecretIsSwappedAtItsNewValueAndTheOldOneStaysRedacted(t *testing.T) {
	const old, cur = "access-OLD-value-1111", "access-NEW-value-2222"
	sec, rot, err := secrets.NewRotating("LOGIN", []byte(old), []string{"example.com"}, "sk-ant-oat01-")
	if err != nil {
		t.Fatal(err)
	}
	set, err := secrets.NewSet(sec)
	if err != nil {
		t.Fatal(err)
	}
	var seen struct {
		sync.Mutex
		auth string
	}
	up := upstreamTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Lock()
		seen.auth = r.Header.Get("Authorization")
		seen.Unlock()
		// An upstream that quotes the token it got, and an older one.
		fmt.Fprintf(w, "you sent %s; before that %s", r.Header.Get("Authorization"), old)
	}))
	f := newFixture(t, options{policy: allowExample(), secrets: set, static: map[string]netip.Addr{"example.com": loopback}, ports: map[uint16]string{443: up.Listener.Addr().String()}}, up.Certificate())
	// The gateway runs; the refresher rotates the value under it.
	if err := rot.Rotate([]byte(cur)); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "https://example.com/v1", nil)
	req.Header.Set("Authorization", "Bearer "+sec.Placeholder)
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	seen.Lock()
	if seen.auth != "Bearer "+cur {
		t.Errorf("upstream saw %q, want the rotated value", seen.auth)
	}
	seen.Unlock()
	if strings.Contains(string(body), cur) || strings.Contains(string(body), old) {
		t.Fatalf("a real value reached the sandbox: %q", body)
	}
}

func TestEchoedSecretsAreRedactedEvenWhenTheSandboxAsksForGzip(t *testing.T) {
	const real = "sk-real-value-gzip-check-98765"
	sec, _ := secrets.New("API_KEY", []byte(real), []string{"example.com"})
	set, _ := secrets.NewSet(sec)
	up := upstreamTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		echo := []byte("echo " + r.Header.Get("Authorization"))
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			zw.Write(echo)
			zw.Close()
			return
		}
		w.Write(echo)
	}))
	f := newFixture(t, options{policy: allowExample(), secrets: set, static: map[string]netip.Addr{"example.com": loopback}, ports: map[uint16]string{443: up.Listener.Addr().String()}}, up.Certificate())
	req, _ := http.NewRequest("GET", "https://example.com/", nil)
	req.Header.Set("Authorization", "Bearer "+sec.Placeholder)
	req.Header.Set("Accept-Encoding", "gzip") // explicit: the client will not decompress
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	body := raw
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(zr)
	}
	if strings.Contains(string(body), real) || !strings.Contains(string(body), sec.Placeholder) {
		t.Fatalf("body toward the sandbox = %q: want the placeholder, never the value", body)
	}
}

func TestPlaceholderTowardAnotherHostIsBlocked(t *testing.T) {
	sec, _ := secrets.New("API_KEY", []byte("real-value-for-other-host"), []string{"api.other.test"})
	set, _ := secrets.NewSet(sec)
	called := false
	up := upstreamTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { called = true }))
	f := newFixture(t, options{policy: allowExample(), secrets: set, static: map[string]netip.Addr{"example.com": loopback}, ports: map[uint16]string{443: up.Listener.Addr().String()}}, up.Certificate())
	req, _ := http.NewRequest("POST", "https://example.com/exfil", nil)
	req.Header.Set("X-Stolen", sec.Placeholder)
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(body), "API_KEY") || called {
		t.Fatalf("status %d body %q called %v: want 403 naming the secret, upstream untouched", resp.StatusCode, body, called)
	}
	if r := f.lastRecord("http"); r.Decision != "secret_blocked" {
		t.Errorf("audit decision = %q, want secret_blocked", r.Decision)
	}
}

func TestServerSentEventsStreamWithoutBuffering(t *testing.T) {
	release := make(chan struct{})
	up := upstreamTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-release // the stream stays open until the client saw the first event
		io.WriteString(w, "data: second\n\n")
	}))
	f := newFixture(t, options{policy: allowExample(), static: map[string]netip.Addr{"example.com": loopback}, ports: map[uint16]string{443: up.Listener.Addr().String()}}, up.Certificate())
	resp, err := f.client.Get("https://example.com/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	got := make(chan string, 1)
	go func() { l, _ := br.ReadString('\n'); got <- l }()
	select {
	case l := <-got:
		if l != "data: first\n" {
			t.Fatalf("first line = %q", l)
		}
	case <-time.After(5 * time.Second):
		close(release)
		t.Fatal("the first event did not arrive before the stream ended: buffered")
	}
	close(release)
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), "second") {
		t.Fatalf("rest = %q", rest)
	}
}

// echoServer is a TCP server on loopback that sends back what it gets,
// closed when the test ends.
func echoServer(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return ln
}

// An upstream may answer before it has read the whole request (a streamed
// upload, an API that starts its event stream once the prompt is parsed).
// Over HTTP/1.1 the gateway used to read away what was left of the
// sandbox's request as the answer's headers went out, racing its own
// forwarding of it; the Gemini CLI saw its connection cut. Here the client
// sends the rest only after it has the answer's first line.
func TestTheRequestStillFlowsUpstreamWhileTheResponseStreamsBack(t *testing.T) {
	up := upstreamTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		rc.EnableFullDuplex()
		rc.SetReadDeadline(time.Now().Add(5 * time.Second)) // a broken gateway must not hang the test
		first := make([]byte, 5)
		if _, err := io.ReadFull(r.Body, first); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "got %s\n", first)
		w.(http.Flusher).Flush()
		rest, err := io.ReadAll(r.Body)
		fmt.Fprintf(w, "rest %q %v\n", rest, err)
	}))
	f := newFixture(t, options{policy: allowExample(), static: map[string]netip.Addr{"example.com": loopback}, ports: map[uint16]string{443: up.Listener.Addr().String()}}, up.Certificate())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pr, pw := io.Pipe()
	go func() { <-ctx.Done(); pw.CloseWithError(ctx.Err()) }() // a stuck exchange ends
	go pw.Write([]byte("first"))
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://example.com/upload", pr)
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatalf("no answer while the request was still open: %v", err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 1 {
		t.Fatalf("the sandbox's side spoke %s: this is about HTTP/1.1", resp.Proto)
	}
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "got first\n" {
		t.Fatalf("first line = %q, %v", line, err)
	}
	pw.Write([]byte(" and the rest"))
	pw.Close()
	if line, err := br.ReadString('\n'); err != nil || line != "rest \" and the rest\" <nil>\n" {
		t.Fatalf("second line = %q, %v: the rest of the request did not reach the upstream", line, err)
	}
	// The answer ends when the gateway's handler returns, after it has
	// written its audit record: read to the end before looking for it.
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Fatalf("after the two lines: %q, %v", rest, err)
	}
	if r := f.lastRecord("http"); r.Decision != "allow" || r.BytesOut != int64(len("first and the rest")) {
		t.Errorf("audit record = %+v", r)
	}
}

// An upstream that fails in the middle of a body ends the sandbox's
// request in an error, and the gateway audits it as one: before, the
// proxy's panic on the cut-off copy skipped the record altogether.
func TestAResponseCutOffUpstreamIsAuditedAsAnError(t *testing.T) {
	up := upstreamTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		io.WriteString(w, "ten bytes.")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the upstream's connection ends, 990 bytes short
	}))
	up.Config.ErrorLog = discardLogger
	f := newFixture(t, options{policy: allowExample(), static: map[string]netip.Addr{"example.com": loopback}, ports: map[uint16]string{443: up.Listener.Addr().String()}}, up.Certificate())
	// The sandbox sees its connection end: before the headers (a sized
	// body's are still in the server's buffer) or within the body.
	if resp, err := f.client.Get("https://example.com/cut"); err == nil {
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Fatalf("the sandbox read the whole body (%q) of a response cut off upstream", body)
		}
	}
	r := f.lastRecord("http")
	if r.Decision != "error" || r.Path != "/cut" || r.Status != 200 || !strings.Contains(r.Reason, "cut off") || !strings.Contains(r.Reason, "upstream") {
		t.Errorf("audit record = %+v, want an error saying the upstream cut the response off", r)
	}
}

func TestHostPortRuleIsARawTunnel(t *testing.T) {
	echo := echoServer(t)
	f := newFixture(t, options{policy: policy.Config{AllowHosts: []string{"db.test:5432"}}, static: map[string]netip.Addr{"db.test": loopback}, ports: map[uint16]string{5432: echo.Addr().String()}})
	conn, err := net.Dial("tcp", f.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT db.test:5432 HTTP/1.1\r\nHost: db.test:5432\r\nProxy-Authorization: Basic %s\r\n\r\nearly", b64("airlock:"+token))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	fmt.Fprint(conn, "-bytes")
	buf := make([]byte, len("early-bytes"))
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "early-bytes" {
		t.Fatalf("echo through tunnel = %q, %v", buf, err)
	}
}

func TestPlainHTTPThroughAbsoluteURI(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "plain") }))
	defer up.Close()
	f := newFixture(t, options{policy: allowExample(), static: map[string]netip.Addr{"example.com": loopback}, ports: map[uint16]string{80: up.Listener.Addr().String()}})
	resp, err := f.client.Get("http://example.com/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "plain" {
		t.Fatalf("body %q", body)
	}
}

func TestHostHeaderMustMatchTheConnection(t *testing.T) {
	up := upstreamTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "fronted") }))
	f := newFixture(t, options{policy: allowExample(), static: map[string]netip.Addr{"example.com": loopback}, ports: map[uint16]string{443: up.Listener.Addr().String()}}, up.Certificate())
	req, _ := http.NewRequest("GET", "https://example.com/", nil)
	req.Host = "evil.test" // domain fronting: allowed connection, other Host
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("status %d, want 403", resp.StatusCode)
	}
}

// TestWebSocketUpgradeIsRelayed: whether the upstream speaks HTTP/2 or only
// HTTP/1.1, the upgrade reaches it over HTTP/1.1 and the bytes flow.
func TestWebSocketUpgradeIsRelayed(t *testing.T) {
	for _, h2 := range []bool{true, false} {
		t.Run(fmt.Sprintf("upstream HTTP/2 %v", h2), func(t *testing.T) { testWebSocketUpgrade(t, h2) })
	}
}

func testWebSocketUpgrade(t *testing.T, h2 bool) {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "want upgrade", 400)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		line, _ := brw.ReadString('\n')
		io.WriteString(c, "echo:"+line)
	}))
	up.EnableHTTP2 = h2 // before StartTLS, which reads it
	up.StartTLS()
	t.Cleanup(up.Close)
	if got := slices.Contains(up.TLS.NextProtos, "h2"); got != h2 {
		t.Fatalf("upstream offers h2: %v, want %v", got, h2)
	}
	f := newFixture(t, options{policy: allowExample(), static: map[string]netip.Addr{"example.com": loopback}, ports: map[uint16]string{443: up.Listener.Addr().String()}}, up.Certificate())
	conn, err := net.Dial("tcp", f.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nProxy-Authorization: Basic %s\r\n\r\n", b64("airlock:"+token))
	br := bufio.NewReader(conn)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v", err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(f.ca.CertPEM())
	tc := tls.Client(conn, &tls.Config{ServerName: "example.com", RootCAs: roots, NextProtos: []string{"http/1.1"}})
	fmt.Fprint(tc, "GET /ws HTTP/1.1\r\nHost: example.com\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	tbr := bufio.NewReader(tc)
	resp, err := http.ReadResponse(tbr, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	fmt.Fprint(tc, "ping\n")
	tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if l, err := tbr.ReadString('\n'); err != nil || l != "echo:ping\n" {
		b, _ := os.ReadFile(f.auditLog)
		t.Fatalf("websocket echo = %q, %v\naudit: %s", l, err, b)
	}
}

func b64(s string) string {
	return base64Std(s)
}

func base64Std(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
