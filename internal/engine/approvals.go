package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/internal/approval"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/control"
	"github.com/airlock-dev/airlock/internal/gateway"
)

// Approval defaults.
const (
	defaultAskTimeout = 60 * time.Second
	// watchEvery is how often saved decisions are checked for another
	// process's change: a decision reaches every supervisor within it.
	watchEvery       = 50 * time.Millisecond
	maxDecisionsFile = 1 << 20
)

// asker is one sandbox's approvals: its queue, the rules remembered for
// the session, the saved ones in force, and the policy they make with the
// config's. A deny wins across every source: config, saved, session.
type asker struct {
	s       *Sandbox
	q       *approval.Queue
	store   *approval.Store // nil without a config dir
	project string
	// nobody: no surface can answer (a headless run with a prepared
	// decisions file): what the rules do not cover is denied at once.
	nobody bool
	stop   context.CancelFunc

	mu      sync.Mutex
	session []approval.Rule
	saved   map[string]approval.Rule // the saved rules last seen, to notice revokes
}

func newAsker(s *Sandbox, c config.Approvals, nobody bool) (_ *asker, err error) {
	a := &asker{s: s, nobody: nobody, project: config.ProjectDir(s.spec.Config.Workspace.Path)}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = defaultAskTimeout
	}
	if dir, derr := config.Dir(); derr == nil {
		// A malformed decisions file stops the start: its saved denies must
		// never be dropped silently.
		if a.store, err = approval.OpenStore(dir); err != nil {
			return nil, err
		}
	}
	if c.Decisions != "" {
		if a.session, err = readDecisions(c.Decisions); err != nil {
			return nil, err
		}
	}
	a.q = approval.NewQueue(approval.QueueConfig{Sandbox: s.h.ID(), Timeout: timeout, Observe: a.observe})
	return a, nil
}

// start puts the remembered decisions in force and follows the saved ones
// (another supervisor may add some); the gateway exists by now.
func (a *asker) start() error {
	a.noteSaved()
	if err := a.apply(); err != nil {
		return err
	}
	if a.store != nil {
		ctx, cancel := context.WithCancel(context.Background())
		a.stop = cancel
		go a.store.Watch(ctx, watchEvery, a.changed)
	}
	return nil
}

// readDecisions reads a prepared decisions file: its rules hold for the session.
func readDecisions(path string) ([]approval.Rule, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--decisions: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxDecisionsFile+1))
	if err != nil {
		return nil, fmt.Errorf("--decisions: %w", err)
	}
	if len(b) > maxDecisionsFile {
		return nil, fmt.Errorf("--decisions %s: larger than 1 MiB", path)
	}
	rules, err := approval.ParseRules(path, b)
	if err != nil {
		return nil, err
	}
	for i := range rules {
		rules[i].Scope, rules[i].By = approval.Session, "file"
	}
	return rules, nil
}

// rules are every remembered decision in force for this sandbox.
func (a *asker) rules() []approval.Rule {
	a.mu.Lock()
	out := append([]approval.Rule(nil), a.session...)
	a.mu.Unlock()
	if a.store != nil {
		out = append(out, a.store.Rules(a.project)...)
	}
	return out
}

// apply puts the remembered decisions in force in the gateway and DNS.
func (a *asker) apply() error {
	var allow, deny []string
	now := time.Now()
	for _, r := range a.rules() {
		if !r.Expires.IsZero() && now.After(r.Expires) {
			continue
		}
		if r.Allow {
			allow = append(allow, r.Host)
		} else {
			deny = append(deny, r.Host)
		}
	}
	return a.s.eg.SetRules(allow, deny)
}

// changed runs when saved decisions changed (this or another supervisor):
// the policy is rebuilt and what waits is decided if a rule now covers it.
func (a *asker) changed() {
	a.noteSaved()
	a.apply()
	a.q.Recheck(a.match)
}

// noteSaved records in the audit stream every saved decision that was
// revoked (or lapsed) since it last looked.
func (a *asker) noteSaved() {
	if a.store == nil {
		return
	}
	now := map[string]approval.Rule{}
	for _, r := range a.store.Rules(a.project) {
		now[r.ID] = r
	}
	a.mu.Lock()
	before := a.saved
	a.saved = now
	a.mu.Unlock()
	for id, r := range before {
		if _, ok := now[id]; !ok {
			a.s.record(audit.Record{Kind: audit.KindApproval, Subject: r.Host, Decision: "revoke", Rule: string(r.Scope),
				Reason: "a saved decision is no longer in force (revoked, or it lapsed)", Extra: map[string]string{"rule": id}})
		}
	}
}

func (a *asker) match(r approval.Request) (approval.Decision, bool) {
	return approval.Match(a.rules(), r.Host, r.Port, time.Now())
}

// Decide is the gateway's approver: the connection waits in the queue.
func (a *asker) Decide(ctx context.Context, q gateway.Question) gateway.Answer {
	if a.nobody {
		return gateway.Answer{Reason: "nobody to ask, and the decisions file does not cover it"}
	}
	subject := q.Host
	if q.Port != 80 && q.Port != 443 {
		subject = fmt.Sprintf("%s:%d", q.Host, q.Port)
	}
	d := a.q.Ask(ctx, approval.Request{Kind: approval.KindNetwork, Subject: subject, Host: q.Host, Port: q.Port,
		Method: q.Method, Path: q.Path, Reason: q.Reason})
	verdict := "denied"
	if d.Allow {
		verdict = "allowed"
	}
	scope := d.Scope
	if scope == "" {
		scope = approval.Once
	}
	return gateway.Answer{Allow: d.Allow, Reason: fmt.Sprintf("%s by %s (%s)", verdict, d.By, scope)}
}

// maxShown bounds a request from a service (its subject and detail
// together): a human is shown the whole of what they approve, so a longer
// one is denied without asking rather than shown in part.
const maxShown = 64 << 10

// ask queues a request from a broker service (an MCP tool call, a host
// command) and waits for its decision; nobody to ask is a deny, and so is
// a request too long to show whole.
func (a *asker) ask(ctx context.Context, r approval.Request) approval.Decision {
	if a.nobody {
		return approval.Decision{Scope: approval.Once, By: "nobody"}
	}
	if n := len(r.Subject) + len(r.Detail); n > maxShown {
		return approval.Decision{Scope: approval.Once, By: fmt.Sprintf("nobody: the request is %d bytes, more than the %d an approval shows whole", n, maxShown)}
	}
	return a.q.Ask(ctx, r)
}

// decide answers request id from a surface: a rule is remembered first (for
// the session, or saved for the project or everywhere), then every waiter is
// released. Saving that fails still applies the decision to the session,
// and the error says so.
func (a *asker) decide(id string, d approval.Decision) error {
	if d.Scope == "" {
		d.Scope = approval.Once
	}
	if !d.Scope.Valid() {
		return fmt.Errorf("scope %q: use once, session, project or global", d.Scope)
	}
	var req *approval.Request
	for _, r := range a.q.Pending() {
		if r.ID == id {
			req = &r
			break
		}
	}
	var saveErr error
	// Host rules are for network requests; a service (MCP, host commands)
	// remembers a session decision itself from the Decision's scope.
	if req != nil && d.Scope != approval.Once && req.Kind == approval.KindNetwork {
		rule := approval.RuleFor(*req, d, a.project, time.Now())
		if d.Scope.Saved() && a.store != nil {
			if _, saveErr = a.store.Add(rule); saveErr != nil {
				rule.Scope = approval.Session
			}
		} else if d.Scope.Saved() {
			saveErr, rule.Scope = errors.New("no config dir to save decisions in"), approval.Session
		}
		if rule.Scope == approval.Session {
			a.mu.Lock()
			a.session = append(a.session, rule)
			a.mu.Unlock()
		}
		a.apply()
	}
	if err := a.q.Decide(id, d); err != nil {
		return err
	}
	a.q.Recheck(a.match)
	if saveErr != nil {
		return fmt.Errorf("applied to this sandbox's session only: saving the decision failed: %w", saveErr)
	}
	return nil
}

// observe puts every request and resolution in the audit stream.
func (a *asker) observe(e approval.Event) {
	r := audit.Record{Kind: audit.KindApproval, Subject: e.Request.Subject, Host: e.Request.Host, Port: int(e.Request.Port),
		Method: e.Request.Method, Path: e.Request.Path, Extra: map[string]string{"request": e.Request.ID}}
	switch {
	case e.Decision == nil:
		r.Decision, r.Reason = audit.Ask, e.Request.Reason
	default:
		d := e.Decision
		r.Decision = audit.Deny
		if d.Allow {
			r.Decision = audit.Allow
		}
		r.Rule = string(d.Scope)
		r.Extra["by"] = d.By
		if d.Wildcard {
			r.Extra["wildcard"] = "true"
		}
		if d.By == "timeout" {
			r.Reason = "nobody answered in time"
		}
	}
	a.s.record(r)
}

func (a *asker) close() {
	if a.stop != nil {
		a.stop()
	}
	a.q.Close()
}

// queueView is the asker as the control socket serves it.
type queueView struct{ a *asker }

func (v queueView) Pending() []approval.Request                 { return v.a.q.Pending() }
func (v queueView) Decide(id string, d approval.Decision) error { return v.a.decide(id, d) }
func (v queueView) Subscribe(buf int) (<-chan approval.Event, func()) {
	return v.a.q.Subscribe(buf)
}

// Approvals is the sandbox's approval queue, or nil when it asks nobody.
func (s *Sandbox) Approvals() control.Approvals {
	if s.ask == nil {
		return nil
	}
	return queueView{s.ask}
}

func (t *controlTarget) Approvals() control.Approvals { return (*Sandbox)(t).Approvals() }
