package approval

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder collects Observe's events.
type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) observe(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) list() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// clock is a settable Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// waitPending waits until q has n pending requests with want waiters in all.
func waitPending(t *testing.T, q *Queue, n, waiters int) []Request {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p := q.Pending()
		w := 0
		for _, r := range p {
			w += r.Waiting
		}
		if len(p) == n && w == waiters {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("Pending() = %d requests with %d waiters, want %d with %d: %+v", len(p), w, n, waiters, p)
		}
		time.Sleep(time.Millisecond)
	}
}

// ask runs q.Ask in a goroutine and returns where its decision arrives.
func ask(ctx context.Context, q *Queue, host string, port uint16) <-chan Decision {
	ch := make(chan Decision, 1)
	go func() { ch <- q.Ask(ctx, Request{Host: host, Port: port, Reason: "no rule covers it"}) }()
	return ch
}

func get(t *testing.T, ch <-chan Decision) Decision {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(5 * time.Second):
		t.Fatal("Ask did not return within 5 s")
	}
	return Decision{}
}

func TestTenConnectionsToOneHostMakeOneRequestAndAllGetTheDecision(t *testing.T) {
	rec := &recorder{}
	q := NewQueue(QueueConfig{Sandbox: "sb1", Observe: rec.observe})
	defer q.Close()
	var chs []<-chan Decision
	for range 10 {
		chs = append(chs, ask(context.Background(), q, "example.com", 443))
	}
	p := waitPending(t, q, 1, 10)
	if p[0].ID != "sb1-1" || p[0].Sandbox != "sb1" || p[0].Kind != KindNetwork || p[0].Subject != "example.com" {
		t.Errorf("Pending()[0] = %+v, want ID sb1-1, sandbox sb1, kind network, subject example.com", p[0])
	}
	if got := p[0].Expires.Sub(p[0].Created); got != DefaultTimeout {
		t.Errorf("Expires - Created = %v, want %v", got, DefaultTimeout)
	}
	want := Decision{Allow: true, Scope: Session, By: "cli"}
	if err := q.Decide(p[0].ID, want); err != nil {
		t.Fatalf("Decide(%s) = %v", p[0].ID, err)
	}
	for i, ch := range chs {
		if d := get(t, ch); d != want {
			t.Errorf("waiter %d got %+v, want %+v", i, d, want)
		}
	}
	ev := rec.list()
	if len(ev) != 2 || ev[0].Type != "request" || ev[1].Type != "resolved" || *ev[1].Decision != want {
		t.Errorf("Observe saw %+v, want one request and one resolved with %+v", ev, want)
	}
	if ev[1].Request.Waiting != 10 {
		t.Errorf("resolved event's Waiting = %d, want 10", ev[1].Request.Waiting)
	}
}

func TestDecide(t *testing.T) {
	tests := map[string]struct {
		before func(q *Queue, id string) // what happened to the request first
		id     string                    // "" for the request's own
		d      Decision
		want   error
	}{
		"the first answer wins":                     {d: Decision{Allow: true}},
		"an unknown id is ErrUnknown":               {id: "sb-99", want: ErrUnknown},
		"a second answer is ErrDecided":             {before: func(q *Queue, id string) { q.Decide(id, Decision{By: "ui"}) }, want: ErrDecided},
		"an answer after a timeout is ErrExpired":   {before: func(q *Queue, id string) { q.expire(id) }, want: ErrExpired},
		"an answer after Close is ErrDecided":       {before: func(q *Queue, id string) { q.Close() }, want: ErrDecided},
		"an answer with a made-up scope is refused": {d: Decision{Scope: "forever"}, want: errors.New("scope")},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			q := NewQueue(QueueConfig{Sandbox: "sb"})
			defer q.Close()
			ch := ask(context.Background(), q, "example.com", 443)
			id := waitPending(t, q, 1, 1)[0].ID
			if tc.before != nil {
				tc.before(q, id)
			}
			if tc.id != "" {
				id = tc.id
			}
			err := q.Decide(id, tc.d)
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("Decide = %v, want nil", err)
			case tc.want != nil && err == nil:
				t.Fatalf("Decide = nil, want %v", tc.want)
			case tc.want != nil && !errors.Is(err, tc.want) && !strings.Contains(err.Error(), tc.want.Error()):
				t.Fatalf("Decide = %v, want %v", err, tc.want)
			}
			if tc.want == nil {
				if d := get(t, ch); d.Allow != tc.d.Allow || d.Scope != Once {
					t.Errorf("Ask = %+v, want allow %v once", d, tc.d.Allow)
				}
			}
		})
	}
}

func TestARequestNobodyAnswersIsDeniedAsATimeout(t *testing.T) {
	rec := &recorder{}
	q := NewQueue(QueueConfig{Sandbox: "sb", Timeout: 20 * time.Millisecond, Observe: rec.observe})
	defer q.Close()
	d := q.Ask(context.Background(), Request{Host: "example.com", Port: 443})
	if d.Allow || d.By != "timeout" {
		t.Fatalf("Ask = %+v, want a deny by timeout", d)
	}
	if err := q.Decide("sb-1", Decision{Allow: true}); !errors.Is(err, ErrExpired) {
		t.Errorf("Decide after the timeout = %v, want ErrExpired", err)
	}
	ev := rec.list()
	if len(ev) != 2 || ev[1].Decision == nil || ev[1].Decision.By != "timeout" {
		t.Errorf("Observe saw %+v, want request then resolved by timeout", ev)
	}
}

func TestAWaiterWhoseContextEndsIsDeniedAndTheLastOneWithdrawsTheRequest(t *testing.T) {
	rec := &recorder{}
	q := NewQueue(QueueConfig{Sandbox: "sb", Observe: rec.observe})
	defer q.Close()
	ctx1, cancel1 := context.WithCancel(context.Background())
	ctx2, cancel2 := context.WithCancel(context.Background())
	ch1, ch2 := ask(ctx1, q, "example.com", 443), ask(ctx2, q, "example.com", 443)
	waitPending(t, q, 1, 2)
	cancel1()
	if d := get(t, ch1); d.Allow || d.By != "canceled" {
		t.Errorf("canceled Ask = %+v, want a deny by canceled", d)
	}
	p := waitPending(t, q, 1, 1)
	cancel2()
	if d := get(t, ch2); d.Allow || d.By != "canceled" {
		t.Errorf("canceled Ask = %+v, want a deny by canceled", d)
	}
	waitPending(t, q, 0, 0)
	if err := q.Decide(p[0].ID, Decision{Allow: true}); !errors.Is(err, ErrGone) {
		t.Errorf("Decide of a withdrawn request = %v, want ErrGone", err)
	}
	ev := rec.list()
	if len(ev) != 2 || ev[1].Decision.By != "canceled" {
		t.Errorf("Observe saw %+v, want request then resolved by canceled", ev)
	}
	if d := q.Ask(ctx1, Request{Host: "example.com", Port: 443}); d.By != "canceled" {
		t.Errorf("Ask with an ended context = %+v, want a deny by canceled at once", d)
	}
}

func TestLimits(t *testing.T) {
	tests := map[string]struct {
		cfg   QueueConfig
		hosts []string        // asked in order, each waiting
		step  time.Duration   // clock advance after each
		want  map[string]bool // host → denied at once by the limit
	}{
		"a new subject beyond MaxPending is denied at once": {
			cfg:   QueueConfig{MaxPending: 2},
			hosts: []string{"a.com", "b.com", "c.com"},
			want:  map[string]bool{"c.com": true},
		},
		"a connection to a subject already waiting joins it even at the limit": {
			cfg:   QueueConfig{MaxPending: 2},
			hosts: []string{"a.com", "b.com", "a.com"},
			want:  map[string]bool{},
		},
		"beyond the burst new subjects are denied at once": {
			cfg:   QueueConfig{Rate: 1, Burst: 2},
			hosts: []string{"a.com", "b.com", "c.com"},
			want:  map[string]bool{"c.com": true},
		},
		"the rate refills the burst": {
			cfg:   QueueConfig{Rate: 1, Burst: 2},
			hosts: []string{"a.com", "b.com", "c.com", "d.com"},
			step:  400 * time.Millisecond,
			want:  map[string]bool{"c.com": true},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			clk := &clock{t: t0}
			tc.cfg.Sandbox, tc.cfg.Now = "sb", clk.now
			q := NewQueue(tc.cfg)
			waiting, subjects := 0, map[string]bool{}
			var chs []<-chan Decision
			for _, h := range tc.hosts {
				ch := ask(context.Background(), q, h, 443)
				if tc.want[h] {
					if d := get(t, ch); d.Allow || d.By != "limit" {
						t.Errorf("Ask(%s) = %+v, want a deny by limit", h, d)
					}
				} else {
					waiting++
					chs = append(chs, ch)
					subjects[h] = true
					waitPending(t, q, len(subjects), waiting)
				}
				clk.add(tc.step)
			}
			q.Close()
			for _, ch := range chs {
				if d := get(t, ch); d.By != "stop" {
					t.Errorf("Ask after Close = %+v, want a deny by stop", d)
				}
			}
		})
	}
}

func TestAFloodOfLimitedRequestsIsAuditedAtMostOnceASecond(t *testing.T) {
	clk := &clock{t: t0}
	rec := &recorder{}
	q := NewQueue(QueueConfig{Sandbox: "sb", Rate: 1, Burst: 1, Timeout: time.Millisecond, Observe: rec.observe, Now: clk.now})
	defer q.Close()
	q.Ask(context.Background(), Request{Host: "first.com", Port: 443}) // takes the token, times out
	for i := range 1000 {
		if d := q.Ask(context.Background(), Request{Host: fmt.Sprintf("h%d.com", i), Port: 443}); d.By != "limit" {
			t.Fatalf("Ask %d = %+v, want a deny by limit", i, d)
		}
	}
	clk.add(500 * time.Millisecond)
	q.Ask(context.Background(), Request{Host: "late.com", Port: 443})
	clk.add(600 * time.Millisecond)
	q.Ask(context.Background(), Request{Host: "x.com", Port: 443}) // a token again: waits, times out
	q.Ask(context.Background(), Request{Host: "y.com", Port: 443})
	var limits []Event
	for _, e := range rec.list() {
		if e.Decision != nil && e.Decision.By == "limit" {
			limits = append(limits, e)
		}
	}
	if len(limits) != 2 {
		t.Fatalf("Observe saw %d limit events, want 2: %+v", len(limits), limits)
	}
	if !strings.Contains(limits[1].Request.Reason, "1000 more denied") {
		t.Errorf("second limit event's reason = %q, want it to count the 1000 unreported", limits[1].Request.Reason)
	}
}

func TestPendingIsNewestFirst(t *testing.T) {
	q := NewQueue(QueueConfig{Sandbox: "sb"})
	defer q.Close()
	for i, h := range []string{"a.com", "b.com", "c.com"} {
		ask(context.Background(), q, h, 443)
		waitPending(t, q, i+1, i+1)
	}
	p := q.Pending()
	if p[0].Subject != "c.com" || p[1].Subject != "b.com" || p[2].Subject != "a.com" {
		t.Errorf("Pending() subjects = %s %s %s, want c.com b.com a.com", p[0].Subject, p[1].Subject, p[2].Subject)
	}
}

func TestOtherPortsAndKindsAreOtherSubjects(t *testing.T) {
	q := NewQueue(QueueConfig{Sandbox: "sb"})
	defer q.Close()
	ask(context.Background(), q, "example.com", 443)
	ask(context.Background(), q, "example.com", 80) // the same subject as 443
	ask(context.Background(), q, "example.com", 8443)
	go q.Ask(context.Background(), Request{Kind: "mcp", Subject: "example.com"})
	p := waitPending(t, q, 3, 4)
	subjects := map[string]bool{}
	for _, r := range p {
		subjects[r.Kind+" "+r.Subject] = true
	}
	for _, s := range []string{"network example.com", "network example.com:8443", "mcp example.com"} {
		if !subjects[s] {
			t.Errorf("Pending() lacks %q: %v", s, subjects)
		}
	}
}

func TestRecheckResolvesWhatTheRulesNowCover(t *testing.T) {
	rec := &recorder{}
	q := NewQueue(QueueConfig{Sandbox: "sb", Observe: rec.observe})
	defer q.Close()
	a, b := ask(context.Background(), q, "api.example.com", 443), ask(context.Background(), q, "other.org", 443)
	waitPending(t, q, 2, 2)
	rules := []Rule{{ID: "r-00000001", Host: "*.example.com", Allow: true, Scope: Global}}
	q.Recheck(func(r Request) (Decision, bool) { return Match(rules, r.Host, r.Port, t0) })
	if d := get(t, a); !d.Allow || d.By != "rule r-00000001" || d.Scope != Global {
		t.Errorf("rechecked Ask = %+v, want allowed by rule r-00000001", d)
	}
	p := waitPending(t, q, 1, 1)
	if p[0].Subject != "other.org" {
		t.Errorf("still pending: %+v, want other.org", p)
	}
	q.Close()
	if d := get(t, b); d.By != "stop" {
		t.Errorf("Ask after Close = %+v, want a deny by stop", d)
	}
}

func TestSubscribe(t *testing.T) {
	q := NewQueue(QueueConfig{Sandbox: "sb"})
	events, cancel := q.Subscribe(8)
	slow, _ := q.Subscribe(1) // never read: must not block the queue
	ch := ask(context.Background(), q, "example.com", 443)
	if e := <-events; e.Type != "request" || e.Request.Subject != "example.com" {
		t.Errorf("first event = %+v, want the request", e)
	}
	if err := q.Decide("sb-1", Decision{Allow: true, By: "ui"}); err != nil {
		t.Fatal(err)
	}
	get(t, ch)
	if e := <-events; e.Type != "resolved" || e.Decision == nil || e.Decision.By != "ui" {
		t.Errorf("second event = %+v, want resolved by ui", e)
	}
	for i := range 5 { // more than slow's buffer
		ask(context.Background(), q, fmt.Sprintf("h%d.com", i), 443)
	}
	waitPending(t, q, 5, 5)
	cancel()
	cancel() // twice is harmless
	for range events {
	}
	q.Close()
	n := 0
	for range slow {
		n++
	}
	if n != 1 {
		t.Errorf("slow subscriber got %d events, want 1 (its buffer)", n)
	}
	if _, _, _, subs := q.sizes(); subs != 0 {
		t.Errorf("%d subscribers left after cancel and Close", subs)
	}
	late, _ := q.Subscribe(1)
	if _, ok := <-late; ok {
		t.Error("Subscribe after Close delivered an event; want a closed channel")
	}
}

func TestARequestWithNoSubjectIsDeniedAtOnce(t *testing.T) {
	q := NewQueue(QueueConfig{Sandbox: "sb"})
	defer q.Close()
	if d := q.Ask(context.Background(), Request{Kind: KindNetwork}); d.Allow || d.By != "invalid" {
		t.Errorf("Ask with no subject = %+v, want a deny by invalid", d)
	}
}

func TestAfterCloseAsksAreDeniedAtOnce(t *testing.T) {
	q := NewQueue(QueueConfig{Sandbox: "sb"})
	q.Close()
	q.Close()
	if d := q.Ask(context.Background(), Request{Host: "example.com", Port: 443}); d.Allow || d.By != "stop" {
		t.Errorf("Ask after Close = %+v, want a deny by stop", d)
	}
}

// A sandbox that floods distinct unknown hosts cannot grow the queue.
func TestAFloodOfDistinctHostsKeepsTheQueueBounded(t *testing.T) {
	before := runtime.NumGoroutine()
	const total, workers = 100_000, 64
	q := NewQueue(QueueConfig{Sandbox: "sb", Timeout: time.Millisecond, Rate: 1e9, Burst: 1 << 30})
	var maxPending, maxRecent int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < total; i += workers {
				d := q.Ask(context.Background(), Request{Host: fmt.Sprintf("h%d.example", i), Port: 443})
				if d.Allow {
					t.Errorf("Ask(h%d) = %+v, want a deny", i, d)
					return
				}
				if i%997 == 0 {
					p, k, r, _ := q.sizes()
					mu.Lock()
					maxPending, maxRecent = max(maxPending, p, k), max(maxRecent, r)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	p, k, r, _ := q.sizes()
	if maxPending > DefaultMaxPending || p != 0 || k != 0 {
		t.Errorf("pending grew to %d (now %d, by key %d), want at most %d and 0 at the end", maxPending, p, k, DefaultMaxPending)
	}
	if maxRecent > recentDecided || r > recentDecided {
		t.Errorf("recent IDs grew to %d (now %d), want at most %d", maxRecent, r, recentDecided)
	}
	q.Close()
	waitGoroutines(t, before)
}

func TestNoGoroutineOutlivesItsRequest(t *testing.T) {
	before := runtime.NumGoroutine()
	q := NewQueue(QueueConfig{Sandbox: "sb", Timeout: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	var chs []<-chan Decision
	for i := range 20 {
		c := context.Background()
		if i%2 == 0 {
			c = ctx
		}
		chs = append(chs, ask(c, q, fmt.Sprintf("h%d.com", i%5), 443))
	}
	_, stop := q.Subscribe(4)
	cancel()
	for _, ch := range chs {
		get(t, ch)
	}
	stop()
	q.Close()
	waitGoroutines(t, before)
}

func waitGoroutines(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > want {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, want at most %d:\n%s", runtime.NumGoroutine(), want, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sizes reports the lengths of the queue's maps, for tests of boundedness.
func (q *Queue) sizes() (pending, byKey, recent, subs int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending), len(q.byKey), len(q.recent), len(q.subs)
}
