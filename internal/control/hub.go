package control

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/internal/approval"
	"github.com/airlock-dev/airlock/internal/state"
)

// hubScan is how often Watch looks for sandboxes that started.
const hubScan = 250 * time.Millisecond

// Hub is every running sandbox's approvals for a surface (airlock
// approvals, the web page): found through the state dir and each sandbox's
// control socket, no daemon. Saved decisions come from Decisions.
type Hub struct {
	State     *state.Store
	Decisions *approval.Store // nil: no config dir, nothing saved
}

var _ approval.Hub = (*Hub)(nil)

func (h *Hub) running() ([]state.Entry, error) {
	all, err := h.State.List()
	if err != nil {
		return nil, err
	}
	var out []state.Entry
	for _, e := range all {
		if e.Status.State == state.Running {
			out = append(out, e)
		}
	}
	return out, nil
}

// Pending lists what waits in every running sandbox, newest first. A
// sandbox that stops meanwhile is skipped.
func (h *Hub) Pending(ctx context.Context) ([]approval.Request, error) {
	es, err := h.running()
	if err != nil {
		return nil, err
	}
	var out []approval.Request
	for _, e := range es {
		cl, err := Dial(e.SocketPath())
		if err != nil {
			continue
		}
		rs, _ := cl.Approvals()
		cl.Close()
		out = append(out, rs...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Created.After(out[j].Created) })
	return out, nil
}

// sandboxOf is the sandbox id a request id starts with (ID "-" counter).
func sandboxOf(id string) string {
	if i := strings.LastIndexByte(id, '-'); i > 0 {
		return id[:i]
	}
	return ""
}

// Decide answers request id in its sandbox.
func (h *Hub) Decide(ctx context.Context, id string, d approval.Decision) error {
	sb := sandboxOf(id)
	if sb == "" {
		return fmt.Errorf("%q: %w", id, approval.ErrUnknown)
	}
	e, err := h.State.Resolve(sb)
	if err != nil || e.Record.ID != sb || e.Status.State != state.Running {
		return fmt.Errorf("%q: %w", id, approval.ErrUnknown)
	}
	cl, err := Dial(e.SocketPath())
	if err != nil {
		return fmt.Errorf("%q: %w", id, approval.ErrUnknown)
	}
	defer cl.Close()
	return cl.Decide(id, d)
}

// Watch delivers every running sandbox's events, and those of sandboxes
// that start later, until ctx ends.
func (h *Hub) Watch(ctx context.Context) (<-chan approval.Event, error) {
	if _, err := h.running(); err != nil {
		return nil, err
	}
	out := make(chan approval.Event, 256)
	go func() {
		var wg sync.WaitGroup
		defer func() { wg.Wait(); close(out) }()
		watched := map[string]bool{}
		var mu sync.Mutex
		t := time.NewTicker(hubScan)
		defer t.Stop()
		for {
			es, _ := h.running()
			for _, e := range es {
				id := e.Record.ID
				mu.Lock()
				seen := watched[id]
				watched[id] = true
				mu.Unlock()
				if seen {
					continue
				}
				cl, err := Dial(e.SocketPath())
				if err != nil {
					continue
				}
				events, err := cl.WatchApprovals(ctx)
				if err != nil {
					cl.Close()
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer cl.Close()
					for ev := range events {
						select {
						case out <- ev:
						case <-ctx.Done():
							return
						}
					}
				}()
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return out, nil
}

// Rules lists the saved decisions.
func (h *Hub) Rules(ctx context.Context) ([]approval.Rule, error) {
	if h.Decisions == nil {
		return nil, nil
	}
	return h.Decisions.All(), nil
}

// Revoke removes a saved decision; every running sandbox follows within
// moments.
func (h *Hub) Revoke(ctx context.Context, id string) (approval.Rule, error) {
	if h.Decisions == nil {
		return approval.Rule{}, errors.New("no saved decisions here (no config dir)")
	}
	return h.Decisions.Revoke(id)
}
