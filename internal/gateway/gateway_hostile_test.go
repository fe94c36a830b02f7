package gateway

// Hostile-input tests: everything the sandbox sends is treated as an attack.
// Each test checks that the gateway refuses cleanly, in bounded time (and
// memory where it matters), audits where it should, and that a normal request
// through the same gateway still works afterwards. Real sockets on loopback,
// no mocks.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/ca"
	"github.com/airlock-dev/airlock/internal/policy"
)

// seenRequests counts what an upstream actually received.
type seenRequests struct {
	mu    sync.Mutex
	paths []string
}

func (s *seenRequests) add(r *http.Request) {
	s.mu.Lock()
	s.paths = append(s.paths, r.Method+" "+r.URL.Path)
	s.mu.Unlock()
}

func (s *seenRequests) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.paths...)
}

// exampleGateway is a fixture allowing example.com (static 127.0.0.1, port 443
// mapped to a real HTTPS upstream that records every request it serves).
func exampleGateway(t *testing.T, endpoints ...string) (*fixture, *seenRequests) {
	t.Helper()
	seen := &seenRequests{}
	up := upstreamTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.add(r)
		io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "upstream %s %s", r.Method, r.URL.Path)
	}))
	f := newFixture(t, options{policy: policy.Config{AllowHosts: []string{"example.com"}, Endpoints: endpoints},
		static: map[string]netip.Addr{"example.com": loopback}, ports: map[uint16]string{443: up.Listener.Addr().String()}}, up.Certificate())
	return f, seen
}

// stillServes checks that a normal request through the gateway works, on a
// fresh connection (idle ones are closed first).
func stillServes(t *testing.T, f *fixture) {
	t.Helper()
	if err := normalRequest(f); err != nil {
		t.Fatalf("a normal request after the hostile one: %v", err)
	}
}

func normalRequest(f *fixture) error {
	f.client.Transport.(*http.Transport).CloseIdleConnections()
	resp, err := f.client.Get("https://example.com/still-ok")
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(string(body), "upstream GET /still-ok") {
		return fmt.Errorf("%d %q", resp.StatusCode, body)
	}
	return nil
}

func connectHead(target string) string {
	return fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n", target, target, b64("airlock:"+token))
}

func dialFront(t testing.TB, proxy string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxy, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// outcome is what the gateway did with one hostile connection.
type outcome struct {
	status int  // status code of the first response, 0 if none
	closed bool // the gateway closed the connection (EOF or reset)
	took   time.Duration
	head   string
}

// readOutcome reads until the first response line or until the gateway
// closes, for at most d; neither within d means the gateway hung.
func readOutcome(c net.Conn, d time.Duration) outcome {
	start := time.Now()
	c.SetReadDeadline(start.Add(d))
	defer c.SetReadDeadline(time.Time{})
	var buf []byte
	tmp := make([]byte, 4096)
	for {
		n, err := c.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if i := bytes.Index(buf, []byte("\r\n")); i > 0 && bytes.HasPrefix(buf, []byte("HTTP/1.")) {
			o := outcome{took: time.Since(start), head: string(buf[:i])}
			if f := strings.Fields(o.head); len(f) >= 2 {
				o.status, _ = strconv.Atoi(f[1])
			}
			return o
		}
		if err != nil {
			var ne net.Error
			timeout := errors.As(err, &ne) && ne.Timeout()
			return outcome{closed: !timeout, took: time.Since(start), head: string(buf)}
		}
		if len(buf) > 1<<20 {
			return outcome{took: time.Since(start), head: "more than 1 MiB without a status line"}
		}
	}
}

// readUntilClosed reads and discards until the gateway closes c; false if it
// has not within d.
func readUntilClosed(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// waitRecord polls the audit log until a record matches, for up to 3 s: the
// gateway audits a failed handshake just after it closes the connection.
func waitRecord(t *testing.T, f *fixture, match func(audit.Record) bool) audit.Record {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		for _, r := range f.records() {
			if match(r) {
				return r
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(f.auditLog)
			t.Fatalf("no matching audit record; log:\n%s", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// clientHello captures the ClientHello a Go client sends for sni ("" sends none).
func clientHello(t testing.TB, sni string) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go tls.Client(a, &tls.Config{ServerName: sni, InsecureSkipVerify: sni == ""}).Handshake()
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(b, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(b, body); err != nil {
		t.Fatal(err)
	}
	return append(hdr, body...)
}

// connectThrough sends CONNECT target on a fresh front-door connection and
// requires 200; the returned reader holds whatever followed.
func connectThrough(t *testing.T, proxy, target string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c := dialFront(t, proxy)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, connectHead(target))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %v %v", target, resp, err)
	}
	c.SetDeadline(time.Time{})
	return c, br
}

// bufConn reads through a bufio.Reader that may hold bytes read ahead.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func caRoots(f *fixture) *x509.CertPool {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(f.ca.CertPEM())
	return roots
}

// 1. Garbage on the front door.

func TestGarbageOnTheFrontDoorIsRefusedOrClosedWithinSeconds(t *testing.T) {
	f, seen := exampleGateway(t)
	rnd := rand.New(rand.NewSource(1))
	random := make([]byte, 4096)
	rnd.Read(random)
	h2Preface := "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + "\x00\x00\x00\x04\x00\x00\x00\x00\x00" // preface + empty SETTINGS
	cases := map[string][]byte{
		"random bytes": random,
		// Garbage with no line end at all is a head still arriving: that is
		// the slowloris case, bounded by headerTimeout (tested below).
		"NUL bytes":                append(make([]byte, 1024), "\r\n\r\n"...),
		"a TLS ClientHello":        clientHello(t, "example.com"),
		"a TLS ClientHello no SNI": clientHello(t, ""),
		"an HTTP/2 preface":        []byte(h2Preface),
		"a request line alone":     []byte("CONNECT\r\n\r\n"),
		"a bare LF request":        []byte("GET / HTTP/1.1\nHost: x\n\n"),
		"HTTP/0.9":                 []byte("GET /\r\n\r\n"),
		"a header without colon":   []byte("CONNECT example.com:443 HTTP/1.1\r\nHost example.com\r\n\r\n"),
		"a space before colon":     []byte("CONNECT example.com:443 HTTP/1.1\r\nProxy-Authorization : Basic " + b64("airlock:"+token) + "\r\n\r\n"),
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			c := dialFront(t, f.proxy)
			go c.Write(in) // the gateway may answer before reading it all
			o := readOutcome(c, 5*time.Second)
			if o.status == 0 && !o.closed {
				t.Fatalf("neither an answer nor a close after %v: %q", o.took, o.head)
			}
			if o.status != 0 && o.status != 400 && o.status != 407 && o.status != 505 {
				// 407: a well-formed request (PRI * HTTP/2.0, which net/http
				// accepts for h2c upgrades) reaches the token check and fails it.
				t.Fatalf("status %d (%s), want 400, 407, 505 or a close", o.status, o.head)
			}
			t.Logf("%d closed=%v after %v", o.status, o.closed, o.took)
		})
	}
	if got := seen.list(); len(got) != 0 {
		t.Errorf("garbage reached the upstream: %v", got)
	}
	stillServes(t, f)
}

// 2. Slowloris: bounded by headerTimeout in each of the three places a head is read.

// dribble writes p one byte every 500 ms until the write fails or stop closes.
func dribble(w io.Writer, p []byte, stop <-chan struct{}) {
	for _, b := range p {
		if _, err := w.Write([]byte{b}); err != nil {
			return
		}
		select {
		case <-stop:
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// closedWithinHeaderTimeout runs dribble on c and requires the gateway to
// close c after about headerTimeout, never much before (it was not refused
// for an unrelated reason) nor after headerTimeout + 2 s.
func closedWithinHeaderTimeout(t *testing.T, w io.Writer, r io.Reader, p []byte) []byte {
	t.Helper()
	stop := make(chan struct{})
	defer close(stop)
	start := time.Now()
	go dribble(w, p, stop)
	got := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(r); got <- b }()
	select {
	case b := <-got:
		if took := time.Since(start); took < headerTimeout-time.Second {
			t.Fatalf("closed after %v, before the header timeout: %q", took, b)
		}
		return b
	case <-time.After(headerTimeout + 2*time.Second):
		t.Fatalf("a slow client still holds its connection after %v", headerTimeout+2*time.Second)
	}
	return nil
}

// The three slowloris cases take headerTimeout each, so they run at once.
// They are subtests started from goroutines rather than t.Parallel tests:
// -parallel defaults to GOMAXPROCS, which would serialise them on small machines.
func TestSlowClientsAreCutAtTheHeaderTimeoutWhereverTheyStall(t *testing.T) {
	t.Parallel()
	var wg sync.WaitGroup
	for name, fn := range map[string]func(*testing.T){
		"a slow request head on the front door":   slowlorisOnTheFrontDoorIsCutAtTheHeaderTimeout,
		"a slow TLS handshake after CONNECT":      slowlorisTLSHandshakeAfterConnectIsCutAndAudited,
		"a slow request head inside interception": slowlorisInsideAnInterceptedConnectionIsCutAtTheHeaderTimeout,
	} {
		wg.Add(1)
		go func() { defer wg.Done(); t.Run(name, fn) }()
	}
	wg.Wait()
}

func slowlorisOnTheFrontDoorIsCutAtTheHeaderTimeout(t *testing.T) {
	f, seen := exampleGateway(t)
	c := dialFront(t, f.proxy)
	// The head never completes: ~100 bytes at 2 bytes per second.
	meanwhile := make(chan error, 1)
	go func() {
		time.Sleep(time.Second)
		meanwhile <- normalRequest(f) // other connections are undisturbed meanwhile
	}()
	if b := closedWithinHeaderTimeout(t, c, c, []byte(connectHead("example.com:443"))); bytes.Contains(b, []byte(" 200 ")) {
		t.Fatalf("the slow client was served: %q", b)
	}
	if err := <-meanwhile; err != nil {
		t.Fatalf("a normal request during the slowloris: %v", err)
	}
	if n := len(seen.list()); n != 1 {
		t.Errorf("upstream saw %d requests, want only the normal one", n)
	}
	stillServes(t, f)
}

func slowlorisTLSHandshakeAfterConnectIsCutAndAudited(t *testing.T) {
	f, _ := exampleGateway(t)
	c, br := connectThrough(t, f.proxy, "example.com:443")
	closedWithinHeaderTimeout(t, c, br, clientHello(t, "example.com"))
	waitRecord(t, f, func(r audit.Record) bool {
		return r.Decision == "deny" && strings.HasPrefix(r.Reason, "TLS handshake with the sandbox failed")
	})
	stillServes(t, f)
}

func slowlorisInsideAnInterceptedConnectionIsCutAtTheHeaderTimeout(t *testing.T) {
	f, seen := exampleGateway(t)
	c, br := connectThrough(t, f.proxy, "example.com:443")
	tc := tls.Client(bufConn{c, br}, &tls.Config{ServerName: "example.com", RootCAs: caRoots(f), NextProtos: []string{"http/1.1"}})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	b := closedWithinHeaderTimeout(t, tc, tc, []byte("GET /slow HTTP/1.1\r\nHost: example.com\r\nX-Pad: "+strings.Repeat("p", 64)+"\r\n\r\n"))
	if len(b) != 0 {
		t.Errorf("the slow client got an answer: %q", b)
	}
	if got := seen.list(); len(got) != 0 {
		t.Errorf("the slow request reached the upstream: %v", got)
	}
	stillServes(t, f)
}

// 3. Header flood.

func TestHeaderFloodIsRefusedWithBoundedMemory(t *testing.T) {
	f, seen := exampleGateway(t)
	flood := func(head string) outcome {
		c := dialFront(t, f.proxy)
		defer c.Close()
		go io.WriteString(c, head) // the gateway answers (and resets) before reading it all
		return readOutcome(c, 5*time.Second)
	}
	auth := "Proxy-Authorization: Basic " + b64("airlock:"+token) + "\r\n"
	oneLine := "CONNECT example.com:443 HTTP/1.1\r\n" + auth + "X-Flood: " + strings.Repeat("a", 2*maxHeaderBytes) + "\r\n\r\n"
	var many strings.Builder
	many.WriteString("CONNECT example.com:443 HTTP/1.1\r\n" + auth)
	for i := 0; many.Len() < 2*maxHeaderBytes; i++ {
		fmt.Fprintf(&many, "X-H%d: v\r\n", i)
	}
	many.WriteString("\r\n")
	heads := []string{oneLine, many.String(), "GET http://example.com/" + strings.Repeat("x", 2*maxHeaderBytes) + " HTTP/1.1\r\n" + auth + "\r\n"}
	check := func(i int, o outcome) {
		if o.status == 0 && !o.closed {
			t.Errorf("flood %d: neither answered nor closed after %v", i, o.took)
		} else if o.status != 0 && o.status != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("flood %d: %s, want 431 or a close", i, o.head)
		}
	}
	for i, h := range heads { // warm up: the server's buffer pools, TLS state
		check(i, flood(h))
	}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	for batch := 0; batch < 5; batch++ { // 50 floods, 10 at a time (each costs net/http's 500 ms RST-avoidance wait)
		for i := 0; i < 10; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				check(i, flood(heads[i%len(heads)]))
			}(batch*10 + i)
		}
		wg.Wait()
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 4<<20 {
		t.Errorf("heap grew by %d KiB over 50 header floods, want < 4 MiB", grew>>10)
	}
	if got := seen.list(); len(got) != 0 {
		t.Errorf("a flood reached the upstream: %v", got)
	}

	// The same bound holds inside an intercepted connection.
	c, br := connectThrough(t, f.proxy, "example.com:443")
	tc := tls.Client(bufConn{c, br}, &tls.Config{ServerName: "example.com", RootCAs: caRoots(f), NextProtos: []string{"http/1.1"}})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	go io.WriteString(tc, "GET / HTTP/1.1\r\nHost: example.com\r\nX-Flood: "+strings.Repeat("a", 2*maxHeaderBytes)+"\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err == nil && resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("intercepted flood: %d, want 431 or a close", resp.StatusCode)
	}
	if got := seen.list(); len(got) != 0 {
		t.Errorf("an intercepted flood reached the upstream: %v", got)
	}
	stillServes(t, f)
}

// 4. Request smuggling on an intercepted connection.

// interceptedH1 is CONNECT example.com:443 then TLS (HTTP/1.1) with the local CA as root.
func interceptedH1(t *testing.T, f *fixture) (*tls.Conn, *bufio.Reader) {
	t.Helper()
	c, br := connectThrough(t, f.proxy, "example.com:443")
	tc := tls.Client(bufConn{c, br}, &tls.Config{ServerName: "example.com", RootCAs: caRoots(f), NextProtos: []string{"http/1.1"}})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	return tc, bufio.NewReader(tc)
}

func TestSmuggledRequestsNeverReachTheUpstreamUnchecked(t *testing.T) {
	// An HTTP/1.1-only upstream: the framing the gateway sends is what it parses.
	seen := &seenRequests{}
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.add(r)
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "upstream %s %s body=%q", r.Method, r.URL.Path, body)
	}))
	up.StartTLS()
	t.Cleanup(up.Close)
	f := newFixture(t, options{policy: policy.Config{AllowHosts: []string{"example.com"}, Endpoints: []string{"example.com POST /ok", "example.com GET /still-ok"}},
		static: map[string]netip.Addr{"example.com": loopback}, ports: map[uint16]string{443: up.Listener.Addr().String()}}, up.Certificate())
	const smuggled = "GET /admin HTTP/1.1\r\nHost: example.com\r\n\r\n"

	t.Run("Content-Length and Transfer-Encoding", func(t *testing.T) {
		// A front end trusting Content-Length would forward the trailing
		// request inside this one's body; one trusting chunked sees two.
		tc, br := interceptedH1(t, f)
		body := "0\r\n\r\n" + smuggled
		fmt.Fprintf(tc, "POST /ok HTTP/1.1\r\nHost: example.com\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%s", len(body), body)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case 400: // refused outright: nothing may have reached the upstream
			if got := seen.list(); len(got) != 0 {
				t.Fatalf("upstream saw %v after a 400", got)
			}
		case 200:
			// net/http follows RFC 9112 §6.3: chunked wins, Content-Length is
			// dropped. The rest is then the gateway's own next request, which
			// must be policy-checked (403 here) and audited like any other.
			if string(b) != `upstream POST /ok body=""` {
				t.Fatalf("first response body %q", b)
			}
			resp2, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("the trailing request got no answer of its own: %v", err)
			}
			resp2.Body.Close()
			if resp2.StatusCode != 403 {
				t.Fatalf("trailing GET /admin: %d, want the endpoint rule's 403", resp2.StatusCode)
			}
			waitRecord(t, f, func(r audit.Record) bool { return r.Kind == "http" && r.Path == "/admin" && r.Decision == "deny" })
		default:
			t.Fatalf("status %d", resp.StatusCode)
		}
		for _, p := range seen.list() {
			if p != "POST /ok" {
				t.Fatalf("upstream saw %q: a smuggled request got through", p)
			}
		}
	})

	t.Run("a request hidden in a chunked body", func(t *testing.T) {
		before := len(seen.list())
		tc, br := interceptedH1(t, f)
		chunk := smuggled
		fmt.Fprintf(tc, "POST /ok HTTP/1.1\r\nHost: example.com\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(chunk), chunk)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got := seen.list()[before:]
		if resp.StatusCode == 200 && (len(got) != 1 || got[0] != "POST /ok") || resp.StatusCode != 200 && len(got) != 0 {
			t.Fatalf("status %d, upstream saw %v: want exactly the one POST (the rest is its body)", resp.StatusCode, got)
		}
	})

	for name, head := range map[string]string{
		"two different Content-Lengths": "POST /ok HTTP/1.1\r\nHost: example.com\r\nContent-Length: 0\r\nContent-Length: 44\r\n\r\n",
		"a list in Content-Length":      "POST /ok HTTP/1.1\r\nHost: example.com\r\nContent-Length: 0, 44\r\n\r\n",
		"a signed Content-Length":       "POST /ok HTTP/1.1\r\nHost: example.com\r\nContent-Length: +0\r\n\r\n",
		"two Transfer-Encodings":        "POST /ok HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"an unknown Transfer-Encoding":  "POST /ok HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: xchunked\r\nContent-Length: 0\r\n\r\n",
		"chunked then identity":         "POST /ok HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			before := len(seen.list())
			tc, br := interceptedH1(t, f)
			io.WriteString(tc, head+smuggled)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 400 && resp.StatusCode != 501 {
				t.Fatalf("status %d, want 400 (or 501 for a transfer coding)", resp.StatusCode)
			}
			if _, err := http.ReadResponse(br, nil); err == nil {
				t.Fatal("the connection stayed open after the refusal: the trailing request was served")
			}
			if got := seen.list()[before:]; len(got) != 0 {
				t.Fatalf("upstream saw %v", got)
			}
		})
	}
	stillServes(t, f)
}

// 5. TLS garbage after CONNECT.

func TestTLSGarbageAfterConnectClosesTheConnectionAndIsAudited(t *testing.T) {
	f, seen := exampleGateway(t)
	for name, in := range map[string][]byte{
		"plain HTTP":               []byte("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"),
		"zero bytes":               make([]byte, 64),
		"a bad handshake message":  []byte("\x16\x03\x01\x00\x04\xff\x00\x00\x00"),
		"an alert first":           []byte("\x15\x03\x03\x00\x02\x02\x28"),
		"SSLv2-style hello header": []byte("\x80\x2e\x01\x00\x02\x00\x15\x00\x00\x00\x10" + strings.Repeat("\x00", 37)),
	} {
		t.Run(name, func(t *testing.T) {
			c, _ := connectThrough(t, f.proxy, "example.com:443")
			start := time.Now()
			c.Write(in)
			if !readUntilClosed(c, 5*time.Second) {
				t.Fatalf("still open after %v", time.Since(start))
			}
		})
	}
	n := 0
	for _, r := range f.records() {
		if r.Kind == "network" && r.Decision == "deny" && r.Host == "example.com" && strings.HasPrefix(r.Reason, "TLS handshake with the sandbox failed") {
			n++
		}
	}
	if n < 5 {
		// The record is written just after the close: give it a moment.
		time.Sleep(500 * time.Millisecond)
		n = 0
		for _, r := range f.records() {
			if r.Kind == "network" && r.Decision == "deny" && strings.HasPrefix(r.Reason, "TLS handshake with the sandbox failed") {
				n++
			}
		}
		if n < 5 {
			t.Errorf("%d handshake-failure deny records, want 5", n)
		}
	}
	if got := seen.list(); len(got) != 0 {
		t.Errorf("upstream saw %v", got)
	}
	stillServes(t, f)
}

// 6. SNI: the certificate is only ever for the CONNECT host.

func TestClientHelloWithoutSNIGetsTheConnectHostsCertificateOnly(t *testing.T) {
	f, seen := exampleGateway(t)
	c, br := connectThrough(t, f.proxy, "example.com:443")
	// No ServerName: Go sends no SNI; verification is done by hand below.
	tc := tls.Client(bufConn{c, br}, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		// Refusing is safe too; the code mints for the CONNECT host, so expect success.
		t.Fatalf("handshake without SNI: %v", err)
	}
	leaf := tc.ConnectionState().PeerCertificates[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: caRoots(f), DNSName: "example.com"}); err != nil {
		t.Fatalf("the leaf does not verify for example.com: %v", err)
	}
	if len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "example.com" || len(leaf.IPAddresses) != 0 || len(leaf.URIs) != 0 || len(leaf.EmailAddresses) != 0 {
		t.Fatalf("leaf names: DNS %v IP %v URI %v email %v, want example.com alone", leaf.DNSNames, leaf.IPAddresses, leaf.URIs, leaf.EmailAddresses)
	}
	for _, other := range []string{"evil.test", "www.example.com", "127.0.0.1", "localhost"} {
		if err := leaf.VerifyHostname(other); err == nil {
			t.Errorf("the leaf is valid for %s", other)
		}
	}
	io.WriteString(tc, "GET /no-sni HTTP/1.1\r\nHost: example.com\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("request after a handshake without SNI: %v %v", resp, err)
	}
	resp.Body.Close()
	if got := seen.list(); len(got) != 1 || got[0] != "GET /no-sni" {
		t.Errorf("upstream saw %v", got)
	}
	stillServes(t, f)
}

func TestClientHelloNamingAnotherHostIsRefusedAndAudited(t *testing.T) {
	f, _ := exampleGateway(t)
	for _, sni := range []string{"evil.test", "www.example.com", "example.com.evil.test", "localhost"} {
		c, br := connectThrough(t, f.proxy, "example.com:443")
		var got *x509.Certificate
		tc := tls.Client(bufConn{c, br}, &tls.Config{ServerName: sni, InsecureSkipVerify: true,
			VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
				got, _ = x509.ParseCertificate(raw[0])
				return nil
			}})
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err == nil {
			t.Errorf("SNI %s after CONNECT example.com:443: the handshake succeeded with a leaf for %v", sni, got.DNSNames)
		} else if got != nil {
			t.Errorf("SNI %s: a certificate was presented (%v) before the refusal", sni, got.DNSNames)
		}
		tc.Close()
		waitRecord(t, f, func(r audit.Record) bool {
			return r.Decision == "deny" && strings.Contains(r.Reason, "TLS handshake with the sandbox failed") && strings.Contains(r.Reason, strconv.Quote(sni))
		})
	}
	// The CONNECT host in other spellings is the same host.
	for _, sni := range []string{"EXAMPLE.com", "example.com."} {
		c, br := connectThrough(t, f.proxy, "example.com:443")
		tc := tls.Client(bufConn{c, br}, &tls.Config{ServerName: sni, RootCAs: caRoots(f)})
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err != nil {
			t.Errorf("SNI %s: %v", sni, err)
		}
		tc.Close()
	}
	stillServes(t, f)
}

// 7. Malformed CONNECT targets.

// hostile is a gateway built without *testing.T (so a fuzz target can use
// it) that counts every dial and serves two front doors on one Gateway: the
// real ServeProxy, and a "watched" copy with the same server settings whose
// handler records panics. net/http recovers a handler's panic and closes the
// connection, which looks like any other refusal: only the watched door can
// tell them apart. Panics inside an intercepted connection's own server
// (serveConn) stay invisible: that server is built inside the non-test code.
type hostile struct {
	gw      *Gateway
	proxy   string // ServeProxy
	watched string // same handler, panics recorded
	roots   *x509.CertPool
	dials   atomic.Int64
	panics  atomic.Int64
	panicAt atomic.Value // string: the latest panic and its stack
	audit   string
}

func newHostile(tb testing.TB, o options, upstreamRoots ...*x509.Certificate) *hostile {
	tb.Helper()
	dir := tb.TempDir()
	c, err := ca.Load(filepath.Join(dir, "ca"))
	if err != nil {
		tb.Fatal(err)
	}
	pol, err := policy.New(o.policy)
	if err != nil {
		tb.Fatal(err)
	}
	h := &hostile{audit: filepath.Join(dir, "audit.jsonl"), roots: x509.NewCertPool()}
	h.roots.AppendCertsFromPEM(c.CertPEM())
	al, err := audit.OpenWith(h.audit, "test", nil, audit.Options{Interval: -1}) // every record, as the tests count them
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { al.Close() })
	roots := x509.NewCertPool()
	for _, r := range upstreamRoots {
		roots.AddCert(r)
	}
	gw, err := New(Config{Policy: pol, CA: c, Audit: al, StaticHosts: o.static, Resolver: o.dns, Upstream: roots, Token: token})
	if err != nil {
		tb.Fatal(err)
	}
	real := gw.dial
	gw.dial = func(ctx context.Context, addr string) (net.Conn, error) {
		h.dials.Add(1)
		ap := netip.MustParseAddrPort(addr)
		if to, ok := o.ports[ap.Port()]; ok {
			addr = netip.AddrPortFrom(ap.Addr(), netip.MustParseAddrPort(to).Port()).String()
		}
		return real(ctx, addr)
	}
	h.gw = gw
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go gw.ServeProxy(ln)
	h.proxy = ln.Addr().String()

	wln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{ // ServeProxy's settings
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          discardLogger,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				if p := recover(); p != nil {
					if p != http.ErrAbortHandler { // ReverseProxy's way to abort a broken stream
						h.panics.Add(1)
						h.panicAt.Store(fmt.Sprintf("%v\n%s", p, debug.Stack()))
					}
					panic(p)
				}
			}()
			gw.front(w, r)
		}),
	}
	go srv.Serve(wln)
	tb.Cleanup(func() { srv.Close() })
	h.watched = wln.Addr().String()
	return h
}

// connectStatus sends CONNECT target and returns the status (0: no answer).
func connectStatus(tb testing.TB, proxy, target string) int {
	tb.Helper()
	c, err := net.DialTimeout("tcp", proxy, 5*time.Second)
	if err != nil {
		tb.Fatalf("the front door no longer accepts: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, connectHead(target))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestMalformedConnectTargetsAreRefusedWithoutADial(t *testing.T) {
	echo := echoServer(t)
	h := newHostile(t, options{policy: policy.Config{AllowHosts: []string{"example.com", "db.test:5432"}},
		static: map[string]netip.Addr{"example.com": loopback, "db.test": loopback}, dns: fakeDNS{},
		ports: map[uint16]string{5432: echo.Addr().String()}})
	label := strings.Repeat("a", 63) + "."
	for _, target := range []string{
		"example.com", "db.test", "example.com:0", "db.test:0", "example.com:99999", "db.test:65536", "db.test:-5432",
		"db.test:+5432", "db.test:5432x", "db.test:0x1538", "db.test:5432:5432", "db.test::5432", ":443", ":5432", ":", "[::1",
		"[::1]", "[db.test]:5432", "db.test%00:5432", "db.test%2f:5432", "user@db.test:5432", "db.test/x:5432",
		strings.Repeat("a", 300) + ":443", strings.Repeat(label, 5) + "example.com:443", strings.Repeat(label, 5) + "db.test:5432",
		strings.Repeat("b", 30<<10) + ":5432", // twice in the head (line and Host): just under maxHeaderBytes
		"[::1]:5432", "127.0.0.1:5432", "[::ffff:127.0.0.1]:5432", "[fe80::1%25lo]:5432", "0.0.0.0:5432", "2130706433:5432", "127.1:5432",
		"0x7f.1:5432", "localhost:5432", "db.test.:5433", "*.db.test:5432", "db..test:5432", "-db.test:5432", "db.test\u00ad:5432",
	} {
		st := connectStatus(t, h.proxy, target)
		if st != 400 && st != 403 {
			t.Errorf("CONNECT %.80q: status %d, want 400 or 403", target, st)
		}
		if st := connectStatus(t, h.watched, target); st != 400 && st != 403 {
			t.Errorf("CONNECT %.80q on the watched door: status %d", target, st)
		}
	}
	if n := h.panics.Load(); n != 0 {
		t.Fatalf("%d handler panics, first:\n%v", n, h.panicAt.Load())
	}
	if n := h.dials.Load(); n != 0 {
		t.Fatalf("%d dials for refused targets", n)
	}
	// The hook does count, and the gateway still serves.
	c, br := connectThrough(t, h.proxy, "db.test:5432")
	io.WriteString(c, "ping")
	buf := make([]byte, 4)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("tunnel echo %q %v", buf, err)
	}
	if n := h.dials.Load(); n != 1 {
		t.Fatalf("%d dials for one allowed tunnel", n)
	}
}

// 8. Many concurrent connections.

func TestTwoHundredConcurrentInterceptedRequestsAllSucceed(t *testing.T) {
	f, seen := exampleGateway(t)
	const n = 200
	proxyURL := &url.URL{Scheme: "http", User: url.UserPassword("airlock", token), Host: f.proxy}
	roots := caRoots(f)
	start := time.Now()
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			// A transport each: 200 distinct CONNECTs, not one multiplexed h2 connection.
			tr := &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}
			defer tr.CloseIdleConnections()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("https://example.com/c%d", i), nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				errs <- fmt.Errorf("request %d: %w", i, err)
				return
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if want := fmt.Sprintf("upstream GET /c%d", i); err != nil || resp.StatusCode != 200 || string(body) != want {
				errs <- fmt.Errorf("request %d: %d %q %v", i, resp.StatusCode, body, err)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if failed++; failed <= 5 {
			t.Error(err)
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d concurrent requests failed", failed, n)
	}
	t.Logf("%d concurrent CONNECT+GET in %v", n, time.Since(start))
	if got := len(seen.list()); got != n {
		t.Errorf("upstream saw %d requests, want %d", got, n)
	}
	stillServes(t, f)
}

// Not in the brief's list, found while reading: the proxy token must not be
// forwarded upstream on the absolute-URI path.
func TestTheProxyTokenNeverReachesTheUpstream(t *testing.T) {
	var leaked atomic.Bool
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, vs := range r.Header {
			for _, v := range vs {
				if strings.Contains(v, b64("airlock:"+token)) || strings.Contains(v, token) {
					leaked.Store(true)
				}
			}
		}
		io.WriteString(w, "plain")
	}))
	defer up.Close()
	f := newFixture(t, options{policy: allowExample(), static: map[string]netip.Addr{"example.com": loopback}, ports: map[uint16]string{80: up.Listener.Addr().String()}})
	c := dialFront(t, f.proxy)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	// Connection: names Proxy-Authorization as hop-by-hop, and a second copy hides in another case.
	fmt.Fprintf(c, "GET http://example.com/x HTTP/1.1\r\nHost: example.com\r\nProxy-Authorization: Basic %s\r\nProxy-authorization: Basic %s\r\nConnection: keep-alive, X-Other\r\n\r\n", b64("airlock:"+token), b64("airlock:"+token))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	if leaked.Load() {
		t.Fatal("the upstream received the proxy token")
	}
}

// Found while reading upstream.go: newUpstream builds an http.Transport per
// intercepted connection (connect.go:102,125) and per absolute-URI request
// (gateway.go:136), and nothing ever closes it, so each upstream connection
// used to idle on for IdleConnTimeout (90 s) after the sandbox was done with
// it: a sandbox could pile up upstream sockets and goroutines at will.
func TestUpstreamConnectionsCloseWhenTheSandboxIsDoneWithThem(t *testing.T) {
	var open atomic.Int64
	track := func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") })
	upTLS := httptest.NewUnstartedServer(h)
	upTLS.EnableHTTP2 = true
	upTLS.Config.ConnState = track
	upTLS.StartTLS()
	t.Cleanup(upTLS.Close)
	upPlain := httptest.NewUnstartedServer(h)
	upPlain.Config.ConnState = track
	upPlain.Start()
	t.Cleanup(upPlain.Close)
	f := newFixture(t, options{policy: allowExample(), static: map[string]netip.Addr{"example.com": loopback},
		ports: map[uint16]string{443: upTLS.Listener.Addr().String(), 80: upPlain.Listener.Addr().String()}}, upTLS.Certificate())
	for i := 0; i < 5; i++ {
		tc, br := interceptedH1(t, f) // intercepted HTTPS
		io.WriteString(tc, "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		tc.Close()
		c := dialFront(t, f.proxy) // absolute-URI plain HTTP, connection closed after
		fmt.Fprintf(c, "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\nProxy-Authorization: Basic %s\r\n\r\n", b64("airlock:"+token))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		io.Copy(io.Discard, c)
		c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for open.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := open.Load(); n > 0 {
		t.Fatalf("%d upstream connections still open 5 s after their 10 sandbox connections closed", n)
	}
}
