package ui

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/internal/approval"
)

// fakeHub is an approval.Hub in memory: Decide records what it was told
// and tells every watcher the request was resolved.
type fakeHub struct {
	mu        sync.Mutex
	pending   []approval.Request
	rules     []approval.Rule
	decisions []decided
	watchers  []chan approval.Event
	watching  chan struct{} // gets a value each time Watch is called
}

type decided struct {
	ID string
	approval.Decision
}

func newFakeHub(reqs ...approval.Request) *fakeHub {
	return &fakeHub{pending: reqs, watching: make(chan struct{}, 100)}
}

func request(id, host string, life time.Duration) approval.Request {
	now := time.Now()
	return approval.Request{
		ID: id, Sandbox: "sb1", Kind: approval.KindNetwork, Subject: host, Host: host, Port: 443,
		Reason: "no rule covers " + host, Waiting: 1, Created: now, Expires: now.Add(life),
	}
}

func (h *fakeHub) Pending(context.Context) ([]approval.Request, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]approval.Request(nil), h.pending...), nil
}

func (h *fakeHub) Decide(_ context.Context, id string, d approval.Decision) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, r := range h.pending {
		if r.ID != id {
			continue
		}
		h.pending = append(h.pending[:i:i], h.pending[i+1:]...)
		h.decisions = append(h.decisions, decided{id, d})
		if d.Scope.Saved() {
			host := r.Host
			if d.Wildcard {
				host = "*" + host[strings.Index(host, "."):]
			}
			h.rules = append(h.rules, approval.Rule{ID: "r-" + id, Host: host, Allow: d.Allow, Scope: d.Scope, Created: time.Now(), By: d.By})
		}
		h.emitLocked(approval.Event{Type: "resolved", Request: r, Decision: &d})
		return nil
	}
	for _, d := range h.decisions {
		if d.ID == id {
			return approval.ErrDecided
		}
	}
	return approval.ErrUnknown
}

// add makes a request wait and announces it.
func (h *fakeHub) add(r approval.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pending = append([]approval.Request{r}, h.pending...)
	h.emitLocked(approval.Event{Type: "request", Request: r})
}

func (h *fakeHub) emitLocked(e approval.Event) {
	for _, w := range h.watchers {
		select {
		case w <- e:
		default:
		}
	}
}

func (h *fakeHub) Watch(ctx context.Context) (<-chan approval.Event, error) {
	ch := make(chan approval.Event, 16)
	h.mu.Lock()
	h.watchers = append(h.watchers, ch)
	h.mu.Unlock()
	go func() {
		<-ctx.Done()
		h.mu.Lock()
		defer h.mu.Unlock()
		for i, w := range h.watchers {
			if w == ch { // else drop closed it
				h.watchers = append(h.watchers[:i:i], h.watchers[i+1:]...)
				close(ch)
				break
			}
		}
	}()
	select {
	case h.watching <- struct{}{}:
	default:
	}
	return ch, nil
}

// drop ends every watch, as a hub whose sandboxes went away might.
func (h *fakeHub) drop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.watchers {
		close(w)
	}
	h.watchers = nil
}

func (h *fakeHub) Rules(context.Context) ([]approval.Rule, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]approval.Rule(nil), h.rules...), nil
}

func (h *fakeHub) Revoke(_ context.Context, id string) (approval.Rule, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, r := range h.rules {
		if r.ID == id {
			h.rules = append(h.rules[:i:i], h.rules[i+1:]...)
			return r, nil
		}
	}
	return approval.Rule{}, approval.ErrUnknown
}

func (h *fakeHub) decided() []decided {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]decided(nil), h.decisions...)
}
