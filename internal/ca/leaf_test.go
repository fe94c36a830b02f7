package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func rootsOf(tb testing.TB, c *CA) *x509.CertPool {
	tb.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.CertPEM()) {
		tb.Fatal("CertPEM does not parse")
	}
	return pool
}

// serveTLS runs a TLS server on loopback that greets every client with "ok".
func serveTLS(t *testing.T, getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: getCert})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(10 * time.Second))
				if conn.(*tls.Conn).Handshake() == nil {
					io.WriteString(conn, "ok")
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// dialTLS handshakes as a client verifying against roots and reads the greeting.
func dialTLS(addr, serverName string, roots *x509.CertPool) (*x509.Certificate, error) {
	d := &net.Dialer{Timeout: 10 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{ServerName: serverName, RootCAs: roots, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 2)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "ok" {
		return nil, errors.Join(errors.New("no greeting"), err)
	}
	return conn.ConnectionState().PeerCertificates[0], nil
}

func TestTLSHandshake(t *testing.T) {
	c := newTestCA(t)
	roots := rootsOf(t, c)

	t.Run("DNS name via SNI", func(t *testing.T) {
		addr := serveTLS(t, c.GetCertificate)
		peer, err := dialTLS(addr, "example.test", roots)
		if err != nil {
			t.Fatal(err)
		}
		if len(peer.DNSNames) != 1 || peer.DNSNames[0] != "example.test" {
			t.Fatalf("peer DNSNames = %v", peer.DNSNames)
		}
	})

	t.Run("IP literal via default host", func(t *testing.T) {
		// Clients send no SNI for an IP, so the gateway names the host.
		addr := serveTLS(t, c.WithDefaultHost("127.0.0.1").GetCertificate)
		peer, err := dialTLS(addr, "127.0.0.1", roots)
		if err != nil {
			t.Fatal(err)
		}
		if len(peer.IPAddresses) != 1 || !peer.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) || len(peer.DNSNames) != 0 {
			t.Fatalf("peer SANs = %v %v", peer.IPAddresses, peer.DNSNames)
		}
		_, err = dialTLS(addr, "127.0.0.2", roots)
		var he x509.HostnameError
		if !errors.As(err, &he) {
			t.Fatalf("dial 127.0.0.2 against a 127.0.0.1 leaf: err = %v, want a HostnameError", err)
		}
	})

	t.Run("different ServerName rejected", func(t *testing.T) {
		// A gateway that mints for the host it believes the connection is
		// for (from its DNS mapping), whatever SNI says.
		addr := serveTLS(t, func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			h := *hello
			h.ServerName = "example.test"
			return c.GetCertificate(&h)
		})
		if _, err := dialTLS(addr, "example.test", roots); err != nil {
			t.Fatalf("control: %v", err)
		}
		_, err := dialTLS(addr, "other.test", roots)
		var he x509.HostnameError
		if !errors.As(err, &he) {
			t.Fatalf("err = %v, want a HostnameError", err)
		}
	})

	t.Run("untrusted CA rejected", func(t *testing.T) {
		addr := serveTLS(t, c.GetCertificate)
		_, err := dialTLS(addr, "example.test", rootsOf(t, newTestCA(t)))
		var ua x509.UnknownAuthorityError
		if !errors.As(err, &ua) {
			t.Fatalf("err = %v, want UnknownAuthorityError", err)
		}
	})

	t.Run("no SNI refused", func(t *testing.T) {
		addr := serveTLS(t, c.GetCertificate)
		if _, err := dialTLS(addr, "127.0.0.1", roots); err == nil {
			t.Fatal("handshake without SNI succeeded")
		}
	})
}

func TestGetCertificateNoSNI(t *testing.T) {
	c := newTestCA(t)
	if _, err := c.GetCertificate(&tls.ClientHelloInfo{}); err == nil {
		t.Fatal("no SNI: want an error")
	}
	if _, err := c.GetCertificate(nil); err == nil {
		t.Fatal("nil hello: want an error")
	}
	cert, err := c.WithDefaultHost("fallback.test").GetCertificate(&tls.ClientHelloInfo{})
	if err != nil || cert.Leaf.DNSNames[0] != "fallback.test" {
		t.Fatalf("default host: %v", err)
	}
	// The view shares the cache with its parent.
	again, err := c.Leaf("fallback.test")
	if err != nil || again != cert {
		t.Fatal("WithDefaultHost view does not share the leaf cache")
	}
	if _, err := c.WithDefaultHost("*.bad").GetCertificate(&tls.ClientHelloInfo{}); err == nil {
		t.Fatal("invalid default host: want an error")
	}
}

func TestLeafVerifies(t *testing.T) {
	c := newTestCA(t)
	roots := rootsOf(t, c)
	before := time.Now()
	for _, host := range []string{"example.test", "Mixed.Case.Example", "trailing.dot.", "localhost", "under_score.example", "a-b.c-d", "::1", "2001:db8::7", "192.0.2.1", "::ffff:192.0.2.2"} {
		leaf, err := c.Leaf(host)
		if err != nil {
			t.Fatalf("Leaf(%q): %v", host, err)
		}
		cert := leaf.Leaf
		chains, err := cert.Verify(x509.VerifyOptions{DNSName: host, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		if err != nil {
			t.Fatalf("Leaf(%q) does not verify: %v", host, err)
		}
		if len(chains) != 1 || len(chains[0]) != 2 || !chains[0][1].Equal(c.Certificate()) {
			t.Errorf("Leaf(%q): unexpected chain", host)
		}
		if k, ok := leaf.PrivateKey.(*ecdsa.PrivateKey); !ok || k.Curve != elliptic.P256() || !k.PublicKey.Equal(cert.PublicKey) {
			t.Errorf("Leaf(%q): key is not the leaf's P-256 key", host)
		}
		if len(leaf.Certificate) != 1 {
			t.Errorf("Leaf(%q): chain of %d certificates, want the leaf alone", host, len(leaf.Certificate))
		}
		if cert.IsCA || len(cert.ExtKeyUsage) != 1 || cert.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
			t.Errorf("Leaf(%q): IsCA=%v EKU=%v", host, cert.IsCA, cert.ExtKeyUsage)
		}
		if d := before.Add(-time.Hour).Sub(cert.NotBefore); d < -time.Minute || d > time.Minute {
			t.Errorf("Leaf(%q): NotBefore %v, want an hour ago", host, cert.NotBefore)
		}
		if d := cert.NotAfter.Sub(before.Add(7 * 24 * time.Hour)); d < -time.Minute || d > time.Minute {
			t.Errorf("Leaf(%q): NotAfter %v, want 7 days from now", host, cert.NotAfter)
		}
	}
}

func TestCACannotSignIntermediates(t *testing.T) {
	c := newTestCA(t)
	roots := rootsOf(t, c)
	interKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial, _ := randSerial()
	interTmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "rogue intermediate"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		BasicConstraintsValid: true, IsCA: true, KeyUsage: x509.KeyUsageCertSign,
	}
	interDER, err := x509.CreateCertificate(rand.Reader, interTmpl, c.cert, interKey.Public(), c.key)
	if err != nil {
		t.Fatal(err)
	}
	inter, _ := x509.ParseCertificate(interDER)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial, _ = randSerial()
	leafTmpl := &x509.Certificate{
		SerialNumber: serial, DNSNames: []string{"victim.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, inter, leafKey.Public(), interKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(leafDER)
	inters := x509.NewCertPool()
	inters.AddCert(inter)
	_, err = leaf.Verify(x509.VerifyOptions{DNSName: "victim.test", Roots: roots, Intermediates: inters})
	var ce x509.CertificateInvalidError
	if !errors.As(err, &ce) || ce.Reason != x509.TooManyIntermediates {
		t.Fatalf("chain through an intermediate: err = %v, want TooManyIntermediates", err)
	}
}

func TestLeafCached(t *testing.T) {
	c := newTestCA(t)
	a, err := c.Leaf("cache.test")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"cache.test", "CACHE.test", "cache.test."} {
		b, err := c.Leaf(h)
		if err != nil || b != a {
			t.Fatalf("Leaf(%q) = %p, %v; want the cached %p", h, b, err, a)
		}
	}
	if n := c.leaves.mints.Load(); n != 1 {
		t.Fatalf("%d mints, want 1", n)
	}
	// An IPv4-mapped address is the same host as its IPv4 form.
	ip, _ := c.Leaf("10.1.2.3")
	if mapped, _ := c.Leaf("::ffff:10.1.2.3"); mapped != ip {
		t.Fatal("::ffff:10.1.2.3 not cached as 10.1.2.3")
	}
}

func TestLeafConcurrentMintsOnce(t *testing.T) {
	c := newTestCA(t)
	const n = 100
	got := make([]*tls.Certificate, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			cert, err := c.Leaf("same.test")
			if err != nil {
				t.Error(err)
			}
			got[i] = cert
		})
	}
	close(start)
	wg.Wait()
	for i := range got {
		if got[i] == nil || got[i] != got[0] {
			t.Fatalf("caller %d got a different leaf", i)
		}
	}
	if m := c.leaves.mints.Load(); m != 1 {
		t.Fatalf("%d mints for one host, want 1", m)
	}
}

func TestLeafLRU(t *testing.T) {
	c := newTestCA(t)
	c.leaves.max = 3
	leaf := func(h string) *tls.Certificate {
		t.Helper()
		cert, err := c.Leaf(h)
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}
	a := leaf("a.test")
	b := leaf("b.test")
	leaf("c.test")
	if leaf("a.test") != a { // a is now the most recent; b the least
		t.Fatal("a evicted early")
	}
	leaf("d.test")
	if got := c.leaves.lru.Len(); got != 3 || len(c.leaves.byHost) != 3 {
		t.Fatalf("cache holds %d/%d entries, want 3", got, len(c.leaves.byHost))
	}
	if leaf("a.test") != a {
		t.Fatal("recently used a was evicted")
	}
	mints := c.leaves.mints.Load()
	if leaf("b.test") == b || c.leaves.mints.Load() != mints+1 {
		t.Fatal("least recently used b was not evicted")
	}
}

func TestLeafRenewal(t *testing.T) {
	c := newTestCA(t)
	now := time.Now()
	c.leaves.now = func() time.Time { return now }
	first, err := c.Leaf("renew.test")
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(5 * 24 * time.Hour) // 2 days left: still fine
	if again, _ := c.Leaf("renew.test"); again != first {
		t.Fatal("re-minted with 2 days left")
	}
	now = now.Add(24*time.Hour + time.Minute) // under a day left
	renewed, err := c.Leaf("renew.test")
	if err != nil {
		t.Fatal(err)
	}
	if renewed == first || !renewed.Leaf.NotAfter.After(first.Leaf.NotAfter) {
		t.Fatal("not re-minted within a day of expiry")
	}
	if again, _ := c.Leaf("renew.test"); again != renewed {
		t.Fatal("renewed leaf not cached")
	}
}

func TestLeafClampedToCA(t *testing.T) {
	c := newTestCA(t)
	c.leaves.now = func() time.Time { return c.cert.NotAfter.Add(-48 * time.Hour) }
	leaf, err := c.Leaf("late.test")
	if err != nil {
		t.Fatal(err)
	}
	if !leaf.Leaf.NotAfter.Equal(c.cert.NotAfter) {
		t.Fatalf("leaf NotAfter %v outlives CA %v", leaf.Leaf.NotAfter, c.cert.NotAfter)
	}
	c.leaves.now = func() time.Time { return c.cert.NotAfter.Add(time.Hour) }
	if _, err := c.Leaf("after.test"); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("minting after CA expiry: err = %v", err)
	}
}

func TestLeafBadHosts(t *testing.T) {
	c := newTestCA(t)
	for _, h := range []string{
		"", ".", "a..b", ".a", "a.b..", strings.Repeat("a", 300), strings.Repeat("a.", 127) + "ab",
		strings.Repeat("a", 64) + ".test", "*.x.com", "*", "x.*.com", "x y", "x\x00y", "-lead.test",
		"ünïcode.test", "[::1]", "fe80::1%eth0", "1.2.3.999", "010.1.1.1", "1.2.3.4.", "host:443", "a/b",
	} {
		cert, err := c.Leaf(h)
		if err == nil || cert != nil {
			t.Errorf("Leaf(%q) = %v, %v; want an error", h, cert, err)
		}
	}
	if n := c.leaves.mints.Load(); n != 0 {
		t.Errorf("%d mints for bad hosts", n)
	}
	// The longest valid names still mint.
	for _, h := range []string{strings.Repeat("a", 63) + ".test", strings.Repeat("a.", 126) + "a", strings.Repeat("a.", 126) + "a."} {
		if _, err := c.Leaf(h); err != nil {
			t.Errorf("Leaf(%d-byte name): %v", len(h), err)
		}
	}
}

func FuzzLeafHost(f *testing.F) {
	for _, s := range []string{"example.test", "127.0.0.1", "::1", "", "a..b", "*.x.com", "x y", "A.B.", "::ffff:1.2.3.4", "fe80::1%lo", "1.2.3.999", "xn--bcher-kva.example", "_srv.example"} {
		f.Add(s)
	}
	c := newTestCA(f)
	roots := rootsOf(f, c)
	f.Fuzz(func(t *testing.T, host string) {
		leaf, err := c.Leaf(host)
		if err != nil {
			if leaf != nil {
				t.Fatalf("Leaf(%q) returned both a leaf and %v", host, err)
			}
			return
		}
		// Whatever Leaf accepts, a client asking for that host accepts.
		if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Fatalf("Leaf(%q) accepted but does not verify: %v", host, err)
		}
	})
}

func BenchmarkLeafCached(b *testing.B) {
	c := newTestCA(b)
	if _, err := c.Leaf("bench.test"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Leaf("bench.test"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkLeafMint(b *testing.B) {
	c := newTestCA(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		// A new host every time: always a miss, and past 1024 an eviction too.
		i++
		if _, err := c.Leaf("h" + strconv.Itoa(i) + ".test"); err != nil {
			b.Fatal(err)
		}
	}
}
