package approval

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"
)

// ErrGone is Decide's answer for a request withdrawn because every
// connection waiting on it ended first.
var ErrGone = errors.New("the request was withdrawn: every connection waiting on it ended")

// Defaults for QueueConfig.
const (
	DefaultTimeout    = 60 * time.Second
	DefaultMaxPending = 32
	DefaultRate       = 5
	DefaultBurst      = 20
	// recentDecided is how many decided request IDs a Queue remembers, so a
	// late answer gets ErrDecided or ErrExpired rather than ErrUnknown.
	recentDecided = 1024
)

// QueueConfig configures one sandbox's Queue.
type QueueConfig struct {
	Sandbox    string
	Timeout    time.Duration // default 60 s: a request nobody answers is denied (Decision{By: "timeout"})
	MaxPending int           // default 32 distinct pending subjects; beyond: denied at once (By: "limit")
	Rate       float64       // new requests per second (default 5); beyond Burst: denied at once (By: "limit")
	Burst      int           // default 20
	// Observe is called synchronously for every event (request, resolved),
	// in order, for the audit log. It runs under the queue's lock: it must
	// not call back into the Queue. Requests denied by a limit are never
	// pending; at most one "resolved" event a second reports them (its
	// Request.Reason counts the ones not reported), so a flood cannot grow
	// the audit log without bound. Those go to Observe only, not to
	// subscribers.
	Observe func(Event)
	Now     func() time.Time // for tests; default time.Now
}

// Queue is one sandbox's pending requests. It is safe for concurrent use,
// starts no goroutines of its own (a timer per pending request) and holds
// memory bounded by MaxPending and a fixed number of recent IDs.
type Queue struct {
	c QueueConfig

	mu      sync.Mutex
	seq     uint64
	closed  bool
	pending map[string]*entry // by ID
	byKey   map[string]*entry // by Kind and Subject: connections coalesce
	recent  map[string]error  // decided IDs → what a late Decide gets
	order   []string          // recent in decision order, a ring of recentDecided
	next    int               // next slot in order
	subs    map[*sub]struct{}
	tokens  float64
	last    time.Time // of the token refill
	// Limit reporting: one event a second, counting the rest.
	limitAt   time.Time
	limitMore int
}

type entry struct {
	seq   uint64
	key   string
	req   Request
	done  chan struct{}
	d     Decision
	timer *time.Timer
}

type sub struct {
	ch chan Event
}

// NewQueue returns an empty queue with c's defaults filled in.
func NewQueue(c QueueConfig) *Queue {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxPending <= 0 {
		c.MaxPending = DefaultMaxPending
	}
	if c.Rate <= 0 {
		c.Rate = DefaultRate
	}
	if c.Burst <= 0 {
		c.Burst = DefaultBurst
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return &Queue{
		c:       c,
		pending: make(map[string]*entry),
		byKey:   make(map[string]*entry),
		recent:  make(map[string]error),
		order:   make([]string, recentDecided),
		subs:    make(map[*sub]struct{}),
		tokens:  float64(c.Burst),
		last:    c.Now(),
	}
}

// Ask blocks until r is decided, ctx ends (deny, By "canceled"), or the
// timeout passes (deny, By "timeout"). Requests of the same Kind and
// Subject coalesce: ten connections to one host make one request (Waiting
// counts them) and all get the one decision. Ask fills in ID (Sandbox, "-",
// a counter), Sandbox, Waiting, Created and Expires; Kind defaults to
// KindNetwork and Subject to Subject(Host, Port). When the last waiter's
// ctx ends the request is withdrawn (resolved with By "canceled"). A new
// subject beyond MaxPending or the rate is denied at once (By "limit"),
// and a request with neither Subject nor Host at once (By "invalid").
func (q *Queue) Ask(ctx context.Context, r Request) Decision {
	if r.Kind == "" {
		r.Kind = KindNetwork
	}
	if r.Subject == "" {
		r.Subject = Subject(r.Host, r.Port)
	}
	if r.Subject == "" {
		return Decision{Scope: Once, By: "invalid"} // nothing to show a human
	}
	key := r.Kind + "\x00" + r.Subject
	if ctx.Err() != nil {
		return Decision{Scope: Once, By: "canceled"}
	}

	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return Decision{Scope: Once, By: "stop"}
	}
	e := q.byKey[key]
	if e != nil {
		e.req.Waiting++
	} else {
		now := q.c.Now()
		if why := q.admit(now); why != "" {
			q.limited(r, now, why)
			q.mu.Unlock()
			return Decision{Scope: Once, By: "limit"}
		}
		q.seq++
		r.ID = q.c.Sandbox + "-" + strconv.FormatUint(q.seq, 10)
		r.Sandbox = q.c.Sandbox
		r.Waiting = 1
		r.Created = now
		r.Expires = now.Add(q.c.Timeout)
		e = &entry{seq: q.seq, key: key, req: r, done: make(chan struct{})}
		q.pending[r.ID] = e
		q.byKey[key] = e
		id := r.ID
		e.timer = time.AfterFunc(q.c.Timeout, func() { q.expire(id) })
		q.emit(Event{Type: "request", Request: r}, true)
	}
	q.mu.Unlock()

	select {
	case <-e.done:
		return e.d
	case <-ctx.Done():
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	select {
	case <-e.done: // decided while ctx ended: the decision stands
		return e.d
	default:
	}
	e.req.Waiting--
	if e.req.Waiting <= 0 {
		q.resolve(e, Decision{Scope: Once, By: "canceled"}, ErrGone)
	}
	return Decision{Scope: Once, By: "canceled"}
}

// admit takes a token for a new request, or says why not. Called with q.mu held.
func (q *Queue) admit(now time.Time) string {
	if len(q.pending) >= q.c.MaxPending {
		return fmt.Sprintf("%d requests are already waiting in this sandbox (the limit)", len(q.pending))
	}
	if dt := now.Sub(q.last).Seconds(); dt > 0 {
		q.tokens = min(float64(q.c.Burst), q.tokens+dt*q.c.Rate)
		q.last = now
	}
	if q.tokens < 1 {
		return fmt.Sprintf("more than %g new requests a second (burst %d) in this sandbox", q.c.Rate, q.c.Burst)
	}
	q.tokens--
	return ""
}

// limited reports a request denied by a limit to Observe, at most once a
// second. Called with q.mu held.
func (q *Queue) limited(r Request, now time.Time, why string) {
	if !q.limitAt.IsZero() && now.Sub(q.limitAt) < time.Second {
		q.limitMore++
		return
	}
	r.Sandbox = q.c.Sandbox
	r.Created, r.Expires = now, now
	r.Reason = "denied at once: " + why
	if q.limitMore > 0 {
		r.Reason += fmt.Sprintf(" (and %d more denied by a limit since the last such record)", q.limitMore)
	}
	q.limitAt, q.limitMore = now, 0
	d := Decision{Scope: Once, By: "limit"}
	q.emit(Event{Type: "resolved", Request: r, Decision: &d}, false)
}

// expire is a pending request's timer.
func (q *Queue) expire(id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e, ok := q.pending[id]; ok {
		q.resolve(e, Decision{Scope: Once, By: "timeout"}, ErrExpired)
	}
}

// resolve decides e for every waiter; late is what a later Decide of its
// ID returns. Called with q.mu held.
func (q *Queue) resolve(e *entry, d Decision, late error) {
	if d.Scope == "" {
		d.Scope = Once
	}
	if e.timer != nil {
		e.timer.Stop()
	}
	delete(q.pending, e.req.ID)
	if q.byKey[e.key] == e {
		delete(q.byKey, e.key)
	}
	if old := q.order[q.next]; old != "" {
		delete(q.recent, old)
	}
	q.order[q.next] = e.req.ID
	q.next = (q.next + 1) % len(q.order)
	q.recent[e.req.ID] = late
	e.d = d
	close(e.done)
	q.emit(Event{Type: "resolved", Request: e.req, Decision: &d}, true)
}

// emit sends ev to Observe and, when live, to every subscriber that has
// room. Called with q.mu held.
func (q *Queue) emit(ev Event, live bool) {
	if q.c.Observe != nil {
		q.c.Observe(ev)
	}
	if !live {
		return
	}
	for s := range q.subs {
		select {
		case s.ch <- ev:
		default: // a slow subscriber misses events; the queue never waits
		}
	}
}

// Pending lists the waiting requests, newest first.
func (q *Queue) Pending() []Request {
	q.mu.Lock()
	es := make([]*entry, 0, len(q.pending))
	for _, e := range q.pending {
		es = append(es, e)
	}
	sort.Slice(es, func(i, j int) bool { return es[i].seq > es[j].seq })
	out := make([]Request, len(es))
	for i, e := range es {
		out[i] = e.req
	}
	q.mu.Unlock()
	return out
}

// Decide answers request id. The first answer wins and every waiter gets
// it; Observe sees one "resolved" event. An answer to an id decided
// recently is ErrDecided (ErrExpired after a timeout, ErrGone after a
// withdrawal); to one never seen, or decided long ago, ErrUnknown. An
// empty Scope is Once; By should name the surface.
func (q *Queue) Decide(id string, d Decision) error {
	if d.Scope == "" {
		d.Scope = Once
	}
	if !d.Scope.Valid() {
		return fmt.Errorf("scope %q is not once, session, project or global", d.Scope)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if e, ok := q.pending[id]; ok {
		q.resolve(e, d, ErrDecided)
		return nil
	}
	if err, ok := q.recent[id]; ok {
		return err
	}
	return ErrUnknown
}

// Recheck re-evaluates every pending request after the rules changed
// (another sandbox saved a decision, or a session rule was added): match
// returns a decision for those now covered, which are resolved with it.
// match runs without the queue's lock held; for network requests Compile the
// rules once and call the Matcher's Match with each request's Host and Port.
func (q *Queue) Recheck(match func(Request) (Decision, bool)) {
	reqs := q.Pending()
	type hit struct {
		id string
		d  Decision
	}
	var hits []hit
	for _, r := range reqs {
		if d, ok := match(r); ok {
			hits = append(hits, hit{r.ID, d})
		}
	}
	if len(hits) == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, h := range hits {
		if e, ok := q.pending[h.id]; ok {
			q.resolve(e, h.d, ErrDecided)
		}
	}
}

// Subscribe delivers live events (request, resolved) on a channel of
// buffer buf until the returned cancel is called or the Queue is closed,
// which closes the channel. A subscriber that falls behind misses events;
// the queue never blocks on it, so after a gap a surface should re-read
// Pending.
func (q *Queue) Subscribe(buf int) (<-chan Event, func()) {
	if buf < 1 {
		buf = 1
	}
	s := &sub{ch: make(chan Event, buf)}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		close(s.ch)
		return s.ch, func() {}
	}
	q.subs[s] = struct{}{}
	q.mu.Unlock()
	return s.ch, func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		if _, ok := q.subs[s]; ok {
			delete(q.subs, s)
			close(s.ch)
		}
	}
}

// Close denies everything pending (By "stop"), closes every subscriber's
// channel after its last events, and makes later Asks deny at once.
func (q *Queue) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.closed = true
	es := make([]*entry, 0, len(q.pending))
	for _, e := range q.pending {
		es = append(es, e)
	}
	sort.Slice(es, func(i, j int) bool { return es[i].seq < es[j].seq })
	for _, e := range es {
		q.resolve(e, Decision{Scope: Once, By: "stop"}, ErrDecided)
	}
	for s := range q.subs {
		delete(q.subs, s)
		close(s.ch)
	}
}
