package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/airlock-dev/airlock/internal/approval"
	"github.com/airlock-dev/airlock/internal/proto"
)

// call sends m and waits for its one reply: the reply's Data, or its error.
func (cl *Client) call(m *proto.Msg) ([]byte, error) {
	id, ch, err := cl.r.Request(m)
	if err != nil {
		return nil, err
	}
	defer cl.r.Done(id)
	r, ok := <-ch
	if !ok {
		return nil, ErrNotRunning
	}
	if r.Op == proto.OpError {
		if r.Err != nil {
			return nil, errors.New(r.Err.Message)
		}
		return nil, errors.New("the sandbox refused the request")
	}
	return r.Data, nil
}

// Approvals lists the sandbox's pending requests.
func (cl *Client) Approvals() ([]approval.Request, error) {
	b, err := cl.call(&proto.Msg{Op: proto.OpApprovals})
	if err != nil {
		return nil, err
	}
	var out []approval.Request
	if len(b) > 0 {
		if err := json.Unmarshal(b, &out); err != nil {
			return nil, fmt.Errorf("approvals: %w", err)
		}
	}
	return out, nil
}

// Decide answers request id.
func (cl *Client) Decide(id string, d approval.Decision) error {
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	_, err = cl.call(&proto.Msg{Op: proto.OpDecide, Path: id, Data: b})
	return err
}

// WatchApprovals delivers the sandbox's approval events until ctx ends or
// the sandbox stops (then the channel closes).
func (cl *Client) WatchApprovals(ctx context.Context) (<-chan approval.Event, error) {
	id, ch, err := cl.r.Request(&proto.Msg{Op: proto.OpWatchApprovals})
	if err != nil {
		return nil, err
	}
	out := make(chan approval.Event, 64)
	go func() {
		defer close(out)
		defer cl.r.Done(id)
		for {
			select {
			case <-ctx.Done():
				return
			case m, ok := <-ch:
				if !ok || m.Op != proto.OpOutput {
					return
				}
				var e approval.Event
				if json.Unmarshal(m.Data, &e) != nil {
					continue
				}
				select {
				case out <- e:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}
