package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/policy"
)

// connect answers CONNECT host:port: refused, intercepted (TLS terminated
// here with a leaf from the local CA), or tunnelled raw (host:port rules).
func (g *Gateway) connect(w http.ResponseWriter, r *http.Request) {
	host, port, err := splitHostPort(r.Host, 0)
	if err != nil {
		http.Error(w, "airlock: "+err.Error(), http.StatusBadRequest)
		return
	}
	t, d, err := g.route(r.Context(), host, port, nil)
	if err != nil || d.Verdict != policy.Allow {
		g.refuse(w, host, port, d, err, "")
		return
	}
	var upstream net.Conn
	if !t.intercept {
		// Dial first: a refusal or a dead upstream is an HTTP error the client
		// can show, not a tunnel that closes at once.
		if upstream, err = g.dialTunnel(r.Context(), t); err != nil {
			http.Error(w, fmt.Sprintf("airlock: %s:%d: %v", host, port, err), http.StatusBadGateway)
			return
		}
	}
	closeUpstream := func() {
		if upstream != nil {
			upstream.Close()
		}
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		closeUpstream()
		http.Error(w, "airlock: cannot take over this connection", http.StatusInternalServerError)
		return
	}
	conn, brw, err := hj.Hijack()
	if err != nil {
		closeUpstream()
		return
	}
	conn.SetDeadline(time.Time{})
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		closeUpstream()
		conn.Close()
		return
	}
	// Bytes the client sent after its CONNECT head belong to the tunnel.
	var early []byte
	if n := brw.Reader.Buffered(); n > 0 {
		p, _ := brw.Reader.Peek(n)
		early = append([]byte(nil), p...)
	}
	if t.intercept {
		client := net.Conn(conn)
		if early != nil {
			client = &prefixConn{Conn: conn, prefix: early}
		}
		g.intercept(client, t)
		return
	}
	g.tunnel(conn, early, upstream, t)
}

// dialTunnel dials a raw tunnel's upstream (the address policy checked),
// auditing a failure.
func (g *Gateway) dialTunnel(ctx context.Context, t target) (net.Conn, error) {
	c, err := g.dial(ctx, t.dialAddr())
	if err != nil {
		g.record(audit.Record{Kind: "network", Host: t.host, IP: t.addr.String(), Port: int(t.port), Decision: "error", Rule: t.rule, Reason: err.Error()})
	}
	return c, err
}

// tunnel copies both ways until either side is done, then audits the bytes.
// early are bytes the client sent before the tunnel began (after a CONNECT
// head). For a tunnel rule (t.tunnel) the client's ClientHello must first
// name the host: the SNI is what a TLS server routes by, so a hello naming
// another name behind the same address, or none, is refused and audited.
func (g *Gateway) tunnel(client net.Conn, early []byte, upstream net.Conn, t target) {
	start := time.Now()
	rec := audit.Record{Kind: "network", Host: t.host, IP: t.addr.String(), Port: int(t.port), Decision: "allow", Rule: t.rule, Reason: "raw tunnel"}
	var rest []byte // for a tunnel rule: early bytes after the ClientHello
	if t.tunnel {
		client.SetReadDeadline(start.Add(headerTimeout))
		hello, sni, err := readClientHello(io.MultiReader(bytes.NewReader(early), client))
		client.SetReadDeadline(time.Time{})
		if err == nil && !sameHost(sni, t.host) {
			err = fmt.Errorf("SNI %q does not name the host %s", sni, t.host)
		}
		if err != nil {
			client.Close()
			upstream.Close()
			rec.Decision, rec.Reason, rec.Duration = "deny", "blind tunnel: "+err.Error(), audit.Millis(time.Since(start))
			g.record(rec)
			return
		}
		// readClientHello read exactly the hello's records, all of early's
		// bytes first: whatever early held beyond them is still to check.
		if len(hello) < len(early) {
			rest = early[len(hello):]
		}
		early = hello
		rec.Reason = "blind TLS tunnel: SNI checked, not intercepted"
	}
	var out, in int64
	var refused error
	if len(early) > 0 {
		n, err := upstream.Write(early)
		out += int64(n)
		if err != nil {
			client.Close()
			upstream.Close()
			return
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if t.tunnel {
			// Here, not before: a second hello only follows the server's
			// answer, which flows the other way meanwhile.
			lr := bytes.NewReader(rest)
			more, err := afterHello(io.MultiReader(lr, client), t.host)
			if err != nil {
				refused = err
				client.Close()
				upstream.Close()
				return
			}
			more = append(more, rest[len(rest)-lr.Len():]...)
			n, err := upstream.Write(more)
			out += int64(n)
			if err != nil {
				client.Close()
				return
			}
		}
		n, _ := pipe(upstream, client)
		out += n
		closeWrite(upstream)
	}()
	in, _ = pipe(client, upstream)
	closeWrite(client)
	wg.Wait()
	client.Close()
	upstream.Close()
	rec.BytesOut, rec.BytesIn, rec.Duration = out, in, audit.Millis(time.Since(start))
	if refused != nil {
		rec.Decision, rec.Reason = "deny", "blind tunnel: "+refused.Error()
	}
	g.record(rec)
}

// pipe copies src to dst. Between two kernel sockets io.Copy splices (the
// net package's TCPConn.ReadFrom/WriteTo use splice(2) for TCP and Unix
// stream sockets); a gVisor connection is copied through a large buffer
// rather than io.Copy's 32 KiB.
func pipe(dst, src net.Conn) (int64, error) {
	_, ks := src.(syscall.Conn)
	_, kd := dst.(syscall.Conn)
	if ks && kd {
		return io.Copy(dst, src)
	}
	buf := copyBuffers.Get()
	defer copyBuffers.Put(buf)
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, buf)
}

func closeWrite(c net.Conn) {
	type closeWriter interface{ CloseWrite() error }
	if cw, ok := c.(closeWriter); ok {
		cw.CloseWrite()
	} else if pc, ok := c.(*prefixConn); ok {
		closeWrite(pc.Conn)
	}
}

// intercept terminates the client's TLS with a leaf for the CONNECT host and
// serves its requests through the upstream handler (HTTP/1.1 or HTTP/2, as
// ALPN chose; the upstream is spoken to in the same version where it can).
// Each request is audited by the handler; the connection as a whole (bytes
// on the wire each way) when it ends.
func (g *Gateway) intercept(client net.Conn, t target) {
	start := time.Now()
	cc := &countedConn{Conn: client}
	serve := func(c net.Conn, scheme string, h2 bool) {
		rec := audit.Record{Kind: "network", Host: t.host, IP: t.addr.String(), Port: int(t.port), Decision: "allow", Rule: t.rule, Reason: "intercepted"}
		if t.broker {
			serveConn(c, g.brokerHandler(t))
			rec.IP, rec.Reason = "", "served by the broker"
		} else {
			u := newUpstream(g, t, scheme, h2)
			serveConn(c, u)
			u.close()
		}
		rec.BytesOut, rec.BytesIn, rec.Duration = cc.in.Load(), cc.out.Load(), audit.Millis(time.Since(start))
		g.record(rec)
	}
	if t.port == 80 { // plain HTTP: requests come in clear
		serve(cc, "http", false)
		return
	}
	tc := tls.Server(cc, &tls.Config{
		// HTTP/1.1 first: the server's order decides, so a client that
		// speaks both gets HTTP/1.1, whose data path through the gateway is
		// far cheaper (no flow-controlled pipes and frame goroutines on
		// either side: bench/gateway.sh); a client that speaks only h2
		// (gRPC) still gets it.
		NextProtos: []string{"http/1.1", "h2"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			// The certificate is for the host policy allowed and that will be
			// dialled; an SNI naming anything else is refused.
			if hello.ServerName != "" && !sameHost(hello.ServerName, t.host) {
				return nil, fmt.Errorf("SNI %q does not match the host %q", hello.ServerName, t.host)
			}
			return g.cfg.CA.Leaf(t.host)
		},
		MinVersion: tls.VersionTLS12,
	})
	ctx, cancel := context.WithTimeout(context.Background(), headerTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		client.Close()
		g.record(audit.Record{Kind: "network", Host: t.host, Port: int(t.port), Decision: "deny", Rule: t.rule, Reason: "TLS handshake with the sandbox failed: " + err.Error()})
		return
	}
	serve(tc, "https", tc.ConnectionState().NegotiatedProtocol == "h2")
}

// countedConn counts the bytes read from (in) and written to (out) a connection.
type countedConn struct {
	net.Conn
	in, out atomic.Int64
}

func (c *countedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.in.Add(int64(n))
	return n, err
}

func (c *countedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.out.Add(int64(n))
	return n, err
}

func sameHost(a, b string) bool {
	return strings.EqualFold(strings.TrimSuffix(a, "."), strings.TrimSuffix(b, "."))
}

// serveConn serves HTTP on one already-accepted connection until it closes,
// or until a handler hijacks it (a WebSocket upgrade), which then owns it.
func serveConn(c net.Conn, h http.Handler) {
	l := &oneConnListener{conn: c, done: make(chan struct{})}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          discardLogger,
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateClosed || s == http.StateHijacked {
				l.closeOnce.Do(func() { close(l.done) })
			}
		},
	}
	srv.Serve(l)
}

// oneConnListener hands out one connection, then blocks until it is done.
type oneConnListener struct {
	conn      net.Conn
	taken     bool
	done      chan struct{}
	closeOnce sync.Once
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	if !l.taken {
		l.taken = true
		return l.conn, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error   { return nil }
func (l *oneConnListener) Addr() net.Addr { return l.conn.LocalAddr() }

// prefixConn replays bytes read ahead of a hijack before the rest of the stream.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.prefix) > 0 {
		n := copy(b, p.prefix)
		p.prefix = p.prefix[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}
