package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

// acceptPair serves the sandbox end of a real loopback TCP connection with
// serve and returns the other end, as the netstack door does.
func acceptPair(t *testing.T, serve func(net.Conn)) net.Conn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		close(accepted)
		if err == nil {
			serve(c)
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	<-accepted // closing the listener first would reset a connection not yet accepted
	return c
}

func TestAcceptInterceptsAllowedHTTPS(t *testing.T) {
	up := upstreamTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "transparent %s", r.URL.Path)
	}))
	f := newFixture(t, options{policy: allowExample(), static: map[string]netip.Addr{"example.com": loopback}, ports: map[uint16]string{443: up.Listener.Addr().String()}}, up.Certificate())
	serve := f.gw.Accept(context.Background(), "example.com", 443)
	if serve == nil {
		t.Fatalf("allowed host refused: %+v", f.lastRecord("network"))
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(f.ca.CertPEM())
	tc := tls.Client(acceptPair(t, serve), &tls.Config{ServerName: "example.com", RootCAs: roots})
	fmt.Fprintf(tc, "GET /x HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "transparent /x" {
		t.Errorf("body = %q", body)
	}
}

func TestAcceptRefusesBeforeConnecting(t *testing.T) {
	echo := echoServer(t)
	port := netip.MustParseAddrPort(echo.Addr().String()).Port()
	f := newFixture(t, options{policy: allowExample("db.example.com:5432", "meta.example.com", fmt.Sprintf("ok.test:%d", port)),
		dns:    fakeDNS{"db.example.com": {netip.MustParseAddr("10.1.2.3")}, "meta.example.com": {netip.MustParseAddr("169.254.169.254")}},
		static: map[string]netip.Addr{"ok.test": loopback}})
	for _, c := range []struct {
		host   string
		port   uint16
		reason string // what the reason must name, if anything
	}{
		{"other.test", 443, ""},               // no rule
		{"example.com", 22, ""},               // bare rule covers 80 and 443 only
		{"db.example.com", 5432, "private"},   // allowed, but resolves to private space
		{"127.0.0.1", 80, ""},                 // a direct address needs a rule naming it
		{"169.254.169.254", 80, ""},           // cloud metadata
		{"meta.example.com", 443, "metadata"}, // allowed, but resolves to the metadata address
	} {
		if f.gw.Accept(context.Background(), c.host, c.port) != nil {
			t.Errorf("%s:%d accepted", c.host, c.port)
		}
		if r := f.recordFor("network", c.host, int(c.port)); r.Decision != "deny" || r.Reason == "" || !strings.Contains(r.Reason, c.reason) {
			t.Errorf("%s:%d: audit = %+v, want a deny with a reason naming %q", c.host, c.port, r, c.reason)
		}
	}
	if n := f.dials.Load(); n != 0 {
		t.Errorf("the gateway dialled %d times before refusing, want none", n)
	}
	// Positive control: an allowed host:port is accepted, and dialled.
	serve := f.gw.Accept(context.Background(), "ok.test", port)
	if serve == nil {
		t.Fatalf("ok.test:%d refused: %+v", port, f.recordFor("network", "ok.test", int(port)))
	}
	c := acceptPair(t, serve)
	fmt.Fprint(c, "ping\n")
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "ping\n" {
		t.Errorf("echo = %q, %v", line, err)
	}
	if n := f.dials.Load(); n != 1 {
		t.Errorf("dials after the allowed host = %d, want 1", n)
	}
}

func TestAcceptTunnelsHostPortRules(t *testing.T) {
	echo := echoServer(t)
	port := netip.MustParseAddrPort(echo.Addr().String()).Port()
	f := newFixture(t, options{policy: allowExample(fmt.Sprintf("db.test:%d", port)), static: map[string]netip.Addr{"db.test": loopback}})
	serve := f.gw.Accept(context.Background(), "db.test", port)
	if serve == nil {
		t.Fatalf("tunnel refused: %+v", f.lastRecord("network"))
	}
	c := acceptPair(t, serve)
	fmt.Fprint(c, "ping\n")
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "ping\n" {
		t.Errorf("echo = %q, %v", line, err)
	}
}
