package gateway

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/policy"
)

const ruleBroker = "broker"

// route decides where a connection to host:port goes: to the broker when
// host is airlock.internal (in any case, with or without the trailing dot),
// otherwise through policy (decide). The broker is only ever reached by that
// name: an address, another name or a Host header naming it on another
// host's connection never is.
func (g *Gateway) route(ctx context.Context, host string, port uint16, r *http.Request) (target, policy.Decision, error) {
	if !policy.IsBroker(host) {
		return g.decide(ctx, host, port, r)
	}
	t := target{host: policy.BrokerHost, port: port, intercept: true, rule: ruleBroker, broker: true}
	switch {
	case g.cfg.Broker == nil:
		return t, policy.Decision{Verdict: policy.Deny, Rule: ruleBroker, Reason: policy.BrokerHost + " is not served by this gateway (no broker)"}, nil
	case port != 80 && port != 443:
		return t, policy.Decision{Verdict: policy.Deny, Rule: ruleBroker, Reason: fmt.Sprintf("%s serves ports 80 and 443, not %d", policy.BrokerHost, port)}, nil
	}
	return t, policy.Decision{Verdict: policy.Allow, Rule: ruleBroker, Intercept: true, Reason: policy.BrokerHost + " is served by the gateway's broker"}, nil
}

// brokerHandler serves the requests of one connection to the broker, each
// audited as kind http. A request whose Host header names anything but the
// broker is refused, so a page in the sandbox that rebinds its own name
// cannot talk to the broker as itself.
func (g *Gateway) brokerHandler(t target) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := audit.Record{Kind: "http", Host: policy.BrokerHost, Port: int(t.port), Method: r.Method, Path: r.URL.Path, Rule: ruleBroker}
		if h, _, err := splitHostPort(r.Host, t.port); err != nil || !policy.IsBroker(h) {
			reason := fmt.Sprintf("Host header %q does not name %s", r.Host, policy.BrokerHost)
			http.Error(w, "airlock: "+reason, http.StatusForbidden)
			rec.Status, rec.Decision, rec.Reason = http.StatusForbidden, "deny", reason
			rec.Duration = audit.Millis(time.Since(start))
			g.record(rec)
			return
		}
		// The proxy credential is the gateway's, not the broker's business.
		r.Header.Del("Proxy-Authorization")
		r.Header.Del("Proxy-Connection")
		cw := &countingWriter{ResponseWriter: w}
		g.cfg.Broker.ServeHTTP(cw, r)
		rec.Status, rec.BytesIn, rec.Decision = cw.status, cw.n, "allow"
		if rec.Status == 0 {
			rec.Status = http.StatusOK
		}
		rec.Duration = audit.Millis(time.Since(start))
		g.record(rec)
	})
}
