package gateway

import (
	"context"
	"net"

	"github.com/airlock-dev/airlock/internal/policy"
)

// Accept is the transparent door: the sandbox opened a TCP connection to
// host:port (host is the name its DNS answer stood for, or the address it
// dialled directly). Accept decides before the connection is completed, so a
// refusal reaches the sandbox as a reset, like a closed port: it returns nil
// after auditing. Otherwise it returns the function that serves the accepted
// connection — intercepted (ports 80 and 443 of bare host rules, and hosts
// with endpoint rules), served by the broker (airlock.internal), or
// tunnelled to an upstream already dialled (blindly for tunnel rules, once
// the ClientHello named host). When policy says Ask, the
// approver is asked here, before the handshake completes; ctx bounds the wait.
func (g *Gateway) Accept(ctx context.Context, host string, port uint16) func(net.Conn) {
	t, d, err := g.route(ctx, host, port, nil)
	if err != nil {
		g.recordError(t.host, port, d.Rule, err)
		return nil
	}
	if d.Verdict != policy.Allow {
		g.recordDeny(t.host, port, d.Rule, d.Reason)
		return nil
	}
	if t.intercept {
		return func(c net.Conn) { g.intercept(c, t) }
	}
	upstream, err := g.dialTunnel(ctx, t)
	if err != nil {
		return nil
	}
	return func(c net.Conn) { g.tunnel(c, nil, upstream, t) }
}
