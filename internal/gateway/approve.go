package gateway

import (
	"context"
	"net/http"
	"time"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/policy"
)

// Approver answers what policy left to a human (policy.Ask). Decide is
// called before anything is resolved or dialled for the host, once per
// connection (or absolute-URI request) that needs it; coalescing several
// connections to one host into one question is the approver's job. It must
// return when ctx is done; the gateway stops waiting then in any case and
// denies. It must be safe for concurrent use.
type Approver interface {
	Decide(ctx context.Context, q Question) Answer
}

// ApproverFunc lets a plain function be an Approver.
type ApproverFunc func(ctx context.Context, q Question) Answer

// Decide calls f.
func (f ApproverFunc) Decide(ctx context.Context, q Question) Answer { return f(ctx, q) }

// Question is one thing a human is asked about.
type Question struct {
	Sandbox string // Config.Sandbox
	Kind    string // "network"
	Host    string // normalised name, or an address for a direct connection
	Port    uint16
	// Method and Path are set for a plain-HTTP request through the proxy
	// door, the one case where the request is known before the connection
	// is decided; CONNECT and the transparent door decide the connection.
	Method, Path string
	// Reason is why policy asked (policy.Decision.Reason).
	Reason string
}

// Answer is an approver's decision. The zero Answer denies. Scope (once,
// session, saved) is the approver's business; the gateway only needs this
// connection's outcome.
type Answer struct {
	Allow  bool
	Reason string // one human sentence, recorded in the audit log
}

// Rules recorded for what the ask path decided.
const (
	ruleApprover   = "approver"
	ruleNoApprover = "no approver"
)

// askTimeout stops the gateway waiting for an approver that never answers.
// The approver's own timeout (a human's, typically a minute) comes first.
const askTimeout = 5 * time.Minute

// ask turns policy's Ask into Allow or Deny. Without an approver the answer
// is an immediate deny; otherwise the question is audited as "ask" and the
// answer becomes the decision, with rule "approver". Nothing is resolved
// before the answer: an unanswered name must not reach the host's DNS.
func (g *Gateway) ask(ctx context.Context, t target, d policy.Decision, r *http.Request) policy.Decision {
	if g.cfg.Approver == nil {
		return policy.Decision{Verdict: policy.Deny, Rule: ruleNoApprover, Reason: "ask: nobody to ask, so denied (" + d.Reason + ")"}
	}
	q := Question{Sandbox: g.cfg.Sandbox, Kind: "network", Host: t.host, Port: t.port, Reason: d.Reason}
	if r != nil {
		q.Method, q.Path = r.Method, r.URL.Path
	}
	g.record(audit.Record{Kind: "network", Host: t.host, Port: int(t.port), Method: q.Method, Path: q.Path, Decision: "ask", Rule: d.Rule, Reason: d.Reason})
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	got := make(chan Answer, 1) // buffered: a late answer must not block the approver
	go func() { got <- g.cfg.Approver.Decide(ctx, q) }()
	var a Answer
	select {
	case a = <-got:
	case <-ctx.Done():
		return policy.Decision{Verdict: policy.Deny, Rule: ruleApprover, Reason: "ask: no answer before " + ctxEnd(ctx) + ", so denied"}
	}
	if !a.Allow {
		return policy.Decision{Verdict: policy.Deny, Rule: ruleApprover, Reason: "ask: denied: " + a.Reason}
	}
	return policy.Decision{Verdict: policy.Allow, Rule: ruleApprover, Intercept: d.Intercept, Reason: "ask: allowed: " + a.Reason}
}

func ctxEnd(ctx context.Context) string {
	if ctx.Err() == context.DeadlineExceeded {
		return "the time ran out"
	}
	return "the connection was given up"
}
