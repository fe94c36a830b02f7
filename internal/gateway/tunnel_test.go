package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/policy"
)

// tunnelFixture allows example.com through a blind tunnel to a real HTTPS
// server whose certificate only the test's client trusts.
func tunnelFixture(t *testing.T) (*fixture, *x509.CertPool) {
	up := upstreamTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "upstream itself")
	}))
	f := newFixture(t, options{policy: policy.Config{Tunnels: []string{"example.com"}},
		static: map[string]netip.Addr{"example.com": loopback}, ports: map[uint16]string{443: up.Listener.Addr().String()}})
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	return f, roots
}

func TestATunnelRuleCarriesTheUpstreamsOwnTLSAndIsAudited(t *testing.T) {
	f, roots := tunnelFixture(t)
	c, br := connectThrough(t, f.proxy, "example.com:443")
	defer c.Close()
	// The upstream's own certificate verifies: nothing in between terminated TLS.
	tc := tls.Client(bufConn{c, br}, &tls.Config{ServerName: "example.com", RootCAs: roots, NextProtos: []string{"http/1.1"}})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(tc, "GET / HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n")
	body, err := io.ReadAll(tc)
	if err != nil || !strings.Contains(string(body), "upstream itself") {
		t.Fatalf("through the tunnel: %q, %v", body, err)
	}
	if _, err := tc.ConnectionState().PeerCertificates[0].Verify(x509.VerifyOptions{Roots: caRoots(f), DNSName: "example.com"}); err == nil {
		t.Fatal("the tunnel presented a certificate from airlock's CA")
	}
	tc.Close()
	r := waitRecord(t, f, func(r audit.Record) bool {
		return r.Kind == "network" && r.Host == "example.com" && r.Decision == "allow"
	})
	if r.Port != 443 || r.BytesOut == 0 || r.BytesIn == 0 || r.Rule != "example.com" || !strings.Contains(r.Reason, "blind TLS tunnel") {
		t.Errorf("audit record: %+v", r)
	}
	if recs := f.records(); len(recs) != 1 {
		t.Errorf("want one record for the connection, no per-request ones (nothing was seen): %+v", recs)
	}
}

func TestATunnelRefusesAHelloNamingAnotherHostOrNone(t *testing.T) {
	for name, hello := range map[string][]byte{
		"another host":   clientHello(t, "other.example.org"),
		"no SNI":         clientHello(t, ""),
		"not TLS at all": []byte("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"),
	} {
		t.Run(name, func(t *testing.T) {
			f, _ := tunnelFixture(t)
			c, br := connectThrough(t, f.proxy, "example.com:443")
			defer c.Close()
			c.Write(hello)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if n, _ := io.Copy(io.Discard, br); n != 0 {
				t.Errorf("the upstream answered %d bytes", n)
			}
			r := waitRecord(t, f, func(r audit.Record) bool { return r.Kind == "network" && r.Host == "example.com" })
			if r.Decision != "deny" || !strings.Contains(r.Reason, "blind tunnel") {
				t.Errorf("audit record: %+v", r)
			}
		})
	}
}

func TestATunnelHostOnlyCoversPort443(t *testing.T) {
	f, _ := tunnelFixture(t)
	if s := connectStatus(t, f.proxy, "example.com:80"); s != http.StatusForbidden {
		t.Errorf("CONNECT example.com:80 = %d, want 403", s)
	}
}

// helloRecords splits a captured ClientHello's handshake message over records of n bytes.
func helloRecords(hello []byte, n int) []byte {
	var out []byte
	msg := hello[5:]
	for len(msg) > 0 {
		k := min(n, len(msg))
		out = append(out, 22, 3, 1, 0, 0)
		binary.BigEndian.PutUint16(out[len(out)-2:], uint16(k))
		out = append(out, msg[:k]...)
		msg = msg[k:]
	}
	return out
}

func TestReadClientHelloReadsExactlyTheHello(t *testing.T) {
	hello := clientHello(t, "Example.COM.")
	for _, split := range []int{1 << 14, 100, 3} {
		in := append(helloRecords(hello, split), "next"...)
		r := bytes.NewReader(in)
		raw, sni, err := readClientHello(r)
		if err != nil || sni != "example.com" {
			t.Fatalf("split %d: %q, %v", split, sni, err)
		}
		if rest, _ := io.ReadAll(r); string(rest) != "next" || !bytes.Equal(raw, in[:len(in)-4]) {
			t.Fatalf("split %d: read %d bytes, left %q", split, len(raw), rest)
		}
	}
}

// FuzzClientHello: the parsers (readClientHello, afterHello) never panic,
// never read past what they return, stay within their bounds, and name only
// valid host names.
//
//	go test ./internal/gateway -run '^$' -fuzz FuzzClientHello -fuzztime 30s
func FuzzClientHello(f *testing.F) {
	hello := clientHello(f, "example.com")
	f.Add(hello)
	f.Add(helloRecords(hello, 7))
	f.Add(clientHello(f, ""))
	f.Add(hello[:40])
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		raw, sni, err := readClientHello(r)
		if len(raw) != len(in)-r.Len() || !bytes.Equal(raw, in[:len(raw)]) {
			t.Fatalf("returned %d bytes, read %d", len(raw), len(in)-r.Len())
		}
		if len(raw) > maxHello+5*(maxHello) {
			t.Fatalf("read %d bytes", len(raw))
		}
		if err == nil {
			if n, nerr := policy.NormalizeName(sni); nerr != nil || n != sni {
				t.Fatalf("accepted server name %q", sni)
			}
		}
		// What follows a hello is read the same way: only whole records
		// passed on, a second hello only if it names the host.
		r = bytes.NewReader(in)
		more, err := afterHello(r, "example.com")
		if err == nil && !bytes.Equal(more, in[:len(in)-r.Len()]) {
			t.Fatalf("afterHello returned %d bytes, read %d", len(more), len(in)-r.Len())
		}
	})
}

// A client may send its ClientHello right behind the CONNECT head, before
// the 200: those bytes are checked and passed on like any other hello.
func TestATunnelChecksAHelloSentWithTheConnectHead(t *testing.T) {
	f, _ := tunnelFixture(t)
	c := dialFront(t, f.proxy)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write(append([]byte(connectHead("example.com:443")), clientHello(t, "example.com")...))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	// The upstream answers the hello: a handshake record (its ServerHello).
	if b, err := br.Peek(1); err != nil || b[0] != 22 {
		t.Fatalf("after a hello sent early: %v %v", b, err)
	}
}

// A server that answers with a HelloRetryRequest gets a second ClientHello:
// it must name the host too. An honest client's passes; a second hello
// naming another host (sent at once, as a client expecting the retry would)
// is refused and audited.
func TestATunnelChecksTheSecondClientHelloToo(t *testing.T) {
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "after a retry") }))
	s.TLS = &tls.Config{CurvePreferences: []tls.CurveID{tls.CurveP256}} // the client's first key share is X25519: a retry
	s.StartTLS()
	t.Cleanup(s.Close)
	f := newFixture(t, options{policy: policy.Config{Tunnels: []string{"example.com"}},
		static: map[string]netip.Addr{"example.com": loopback}, ports: map[uint16]string{443: s.Listener.Addr().String()}})
	roots := x509.NewCertPool()
	roots.AddCert(s.Certificate())

	c, br := connectThrough(t, f.proxy, "example.com:443")
	tc := tls.Client(bufConn{c, br}, &tls.Config{ServerName: "example.com", RootCAs: roots, CurvePreferences: []tls.CurveID{tls.X25519, tls.CurveP256}})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatalf("handshake with a retry through the tunnel: %v", err)
	}
	if cs := tc.ConnectionState(); cs.CurveID != tls.CurveP256 {
		t.Errorf("key exchange %v: the server did not ask for a retry", cs.CurveID)
	}
	tc.Close()

	c, br = connectThrough(t, f.proxy, "example.com:443")
	defer c.Close()
	c.Write(append(clientHello(t, "example.com"), clientHello(t, "other.example.org")...))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	io.Copy(io.Discard, br)
	r := waitRecord(t, f, func(r audit.Record) bool { return r.Kind == "network" && r.Decision == "deny" })
	if !strings.Contains(r.Reason, `second ClientHello: SNI "other.example.org"`) {
		t.Errorf("audit record: %+v", r)
	}
}
