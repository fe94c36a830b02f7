// Package asker is one sandbox's approvals: the decisions remembered for
// it (saved for the project or everywhere, and the session's), in force in
// its gateway, and the queue where what they do not cover waits for a
// human. It meets the gateway through Gate and the audit stream through a
// function: it knows no engine.
package asker

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
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

// Asker holds a sandbox's remembered decisions and, when something may
// ask, its queue. The saved decisions (approval.Store, in the user's config
// dir) are in force in every sandbox with a network, whether or not it
// asks: a saved deny wins over an allow from any source (config, flags,
// agent profiles, the session), a saved allow admits its host without
// asking, and a change (another supervisor's decision, a revoke) takes
// effect at once in every running sandbox. A deny wins across every
// source: config, saved, session.
type Asker struct {
	saved  *saved
	record func(audit.Record)
	gate   Gate // nil until Enforce

	q *approval.Queue // nil unless something may ask
	// nobody: no surface can answer (a headless run with a prepared
	// decisions file): what the rules do not cover is denied at once.
	nobody bool

	mu      sync.Mutex
	session []approval.Rule
}

// Gate is where remembered decisions are put in force: the sandbox's
// gateway and DNS (egress.Egress).
type Gate interface {
	SetRules(allow, deny []string) error
}

// saved are the decisions saved for every sandbox and for this project.
type saved struct {
	store   *approval.Store // nil without a config dir
	project string
	// enclosing are the repositories around the project, whose saved
	// project denies hold here too (config.EnclosingRepos).
	enclosing []string
	stop      context.CancelFunc

	mu   sync.Mutex
	seen map[string]approval.Rule // the saved rules last seen, to notice revokes
}

// Open reads the saved decisions for workspace ws; record is the audit
// stream's. A malformed decisions file stops the start: its saved denies
// must never be dropped silently.
func Open(ws string, record func(audit.Record)) (*Asker, error) {
	v, err := openSaved(ws)
	if err != nil {
		return nil, err
	}
	return &Asker{saved: v, record: record}, nil
}

func openSaved(ws string) (*saved, error) {
	dir, err := config.Dir()
	if err != nil {
		return &saved{project: config.ProjectDir(ws)}, nil
	}
	v := &saved{project: config.ProjectOf(dir, ws)}
	v.enclosing = config.EnclosingRepos(v.project)
	if v.store, err = approval.OpenStore(dir); err != nil {
		return nil, err
	}
	return v, nil
}

// rules are the saved rules in force for the project: the global ones,
// the project's, and the project denies of the repositories around it.
func (v *saved) rules() []approval.Rule {
	if v == nil || v.store == nil {
		return nil
	}
	out := v.store.Rules(v.project)
	for _, a := range v.enclosing {
		for _, r := range v.store.Rules(a) {
			if r.Scope == approval.Project && !r.Allow {
				out = append(out, r)
			}
		}
	}
	return out
}

// Admits reports whether some saved rule allows a host: the sandbox then
// needs its network even when nothing else asks for one.
func (a *Asker) Admits() bool {
	for _, r := range a.saved.rules() {
		if r.Allow {
			return true
		}
	}
	return false
}

// Enforce puts the remembered decisions in force in gate from the first
// packet and follows the saved ones; the gateway exists by now.
func (a *Asker) Enforce(gate Gate) error {
	a.gate = gate
	a.noteSaved()
	if err := a.applyRules(); err != nil {
		return err
	}
	if a.saved.store != nil {
		ctx, cancel := context.WithCancel(context.Background())
		a.saved.stop = cancel
		go a.saved.store.Watch(ctx, watchEvery, a.savedChanged)
	}
	return nil
}

// savedChanged runs when saved decisions changed (this or another
// supervisor): the policy is rebuilt and what waits is decided if a rule
// now covers it.
func (a *Asker) savedChanged() {
	a.noteSaved()
	a.applyRules()
	if a.q != nil {
		a.q.Recheck(a.match)
	}
}

// rules are every remembered decision in force for this sandbox: the
// session's (when it asks) and the saved ones.
func (a *Asker) rules() []approval.Rule {
	a.mu.Lock()
	out := append([]approval.Rule(nil), a.session...)
	a.mu.Unlock()
	return append(out, a.saved.rules()...)
}

// applyRules puts the remembered decisions in force in the gateway and DNS.
func (a *Asker) applyRules() error {
	if a.gate == nil {
		return nil
	}
	allow, deny := approval.HostRules(a.rules(), time.Now())
	return a.gate.SetRules(allow, deny)
}

// noteSaved records in the audit stream every saved decision that was
// revoked (or lapsed) since it last looked.
func (a *Asker) noteSaved() {
	v := a.saved
	if v == nil || v.store == nil {
		return
	}
	now := map[string]approval.Rule{}
	for _, r := range v.rules() {
		now[r.ID] = r
	}
	v.mu.Lock()
	before := v.seen
	v.seen = now
	v.mu.Unlock()
	for id, r := range before {
		if _, ok := now[id]; !ok {
			a.record(audit.Record{Kind: audit.KindApproval, Subject: r.Host, Decision: "revoke", Rule: string(r.Scope),
				Reason: "a saved decision is no longer in force (revoked, or it lapsed)", Extra: map[string]string{"rule": id}})
		}
	}
}

// Queue says what a sandbox's approval queue is made from.
type Queue struct {
	Sandbox   string // its id
	Approvals config.Approvals
	// Nobody says no surface can answer (a headless run with a prepared
	// decisions file): what it does not cover is denied.
	Nobody bool
	// Writable are the host paths the sandbox can write: a decisions file
	// there is refused.
	Writable []string
}

// StartQueue makes the queue where what the remembered decisions do not
// cover waits, with the prepared decisions file's rules for the session.
// Call it before Enforce, which follows the saved decisions from then on.
func (a *Asker) StartQueue(c Queue) (err error) {
	a.nobody = c.Nobody
	timeout := c.Approvals.Timeout
	if timeout <= 0 {
		timeout = defaultAskTimeout
	}
	if c.Approvals.Decisions != "" {
		rules, err := readDecisions(c.Approvals.Decisions, c.Writable)
		if err != nil {
			return err
		}
		a.mu.Lock()
		a.session = rules
		a.mu.Unlock()
	}
	a.q = approval.NewQueue(approval.QueueConfig{Sandbox: c.Sandbox, Timeout: timeout, Observe: a.observe})
	return nil
}

// Asking says whether the sandbox has a queue (StartQueue).
func (a *Asker) Asking() bool { return a != nil && a.q != nil }

// readDecisions reads a prepared decisions file: its rules hold for the
// session. A file the sandbox could rewrite (under its workspace, a --rw
// path or a writable bind) would let one run decide what the next may
// reach, so it is refused; it is read as a regular file only (a FIFO
// there would hang the start), size-bounded.
func readDecisions(path string, writable []string) ([]approval.Rule, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, fmt.Errorf("--decisions: %w", err)
	}
	for _, w := range writable {
		if wr, err := filepath.EvalSymlinks(w); err == nil && (real == wr || strings.HasPrefix(real, wr+"/") || wr == "/") {
			return nil, fmt.Errorf("--decisions %s: the file is inside %s, which the sandbox can write, so a run could rewrite the answers of the next; keep it outside", path, w)
		}
	}
	b, err := config.ReadRegular(real, maxDecisionsFile)
	if err != nil {
		return nil, fmt.Errorf("--decisions: %w", err)
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

func (a *Asker) match(r approval.Request) (approval.Decision, bool) {
	return approval.Match(a.rules(), r.Host, r.Port, time.Now())
}

// Decide is the gateway's approver: the connection waits in the queue.
func (a *Asker) Decide(ctx context.Context, q gateway.Question) gateway.Answer {
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

// Ask queues a request from a broker service (an MCP tool call, a host
// command) and waits for its decision; nobody to ask is a deny, and so is
// a request too long to show whole.
func (a *Asker) Ask(ctx context.Context, r approval.Request) approval.Decision {
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
func (a *Asker) decide(id string, d approval.Decision) error {
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
		v := a.saved
		rule := approval.RuleFor(*req, d, v.project, time.Now())
		if d.Scope.Saved() && v.store != nil {
			if _, saveErr = v.store.Add(rule); saveErr != nil {
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
		a.applyRules()
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
func (a *Asker) observe(e approval.Event) {
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
	a.record(r)
}

// Close stops following the saved decisions and closes the queue: what
// waits in it is denied. A nil Asker's Close does nothing.
func (a *Asker) Close() {
	if a == nil {
		return
	}
	if a.saved.stop != nil {
		a.saved.stop()
	}
	if a.q != nil {
		a.q.Close()
	}
}

// queueView is the asker as the control socket serves it.
type queueView struct{ a *Asker }

func (v queueView) Pending() []approval.Request                 { return v.a.q.Pending() }
func (v queueView) Decide(id string, d approval.Decision) error { return v.a.decide(id, d) }
func (v queueView) Subscribe(buf int) (<-chan approval.Event, func()) {
	return v.a.q.Subscribe(buf)
}

// Control is the approval queue as the control socket and hosts serve it,
// or nil when the sandbox asks nobody.
func (a *Asker) Control() control.Approvals {
	if !a.Asking() {
		return nil
	}
	return queueView{a}
}
