package proto

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// ErrConnClosed is returned for requests on a Router whose connection ended.
var ErrConnClosed = errors.New("proto: connection closed")

// Inbound is one received message with the descriptors it carried.
type Inbound struct {
	*Msg
	Files []*os.File
}

// Router is the requesting side of a Conn: it numbers requests and routes
// each reply to the channel of its request ID, so many requests can be in
// flight on one connection. Replies for IDs nobody waits on are dropped.
type Router struct {
	c      *Conn
	nextID atomic.Uint32

	mu      sync.Mutex
	pending map[uint32]chan Inbound
	err     error // why the connection ended
}

// routeBuffer bounds the replies queued per request: a slow reader slows the
// peer (backpressure) rather than losing output.
const routeBuffer = 256

// NewRouter starts routing the messages c receives. Nothing else may Recv on c.
func NewRouter(c *Conn) *Router {
	r := &Router{c: c, pending: map[uint32]chan Inbound{}}
	go r.run()
	return r
}

func (r *Router) run() {
	for {
		m, files, err := r.c.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				r.c.Close() // a peer that broke the protocol is not heard again
			}
			r.mu.Lock()
			r.err = err
			for id, ch := range r.pending {
				close(ch)
				delete(r.pending, id)
			}
			r.mu.Unlock()
			return
		}
		r.mu.Lock()
		ch := r.pending[m.ID]
		r.mu.Unlock()
		if ch == nil {
			for _, f := range files {
				f.Close()
			}
			continue
		}
		ch <- Inbound{m, files}
	}
}

// Request sends m under a fresh ID and returns the ID and the channel its
// replies arrive on; the channel is closed if the connection ends. Call Done
// when no more replies are wanted.
func (r *Router) Request(m *Msg, files ...*os.File) (uint32, <-chan Inbound, error) {
	id := r.nextID.Add(1)
	ch := make(chan Inbound, routeBuffer)
	r.mu.Lock()
	if r.err != nil {
		r.mu.Unlock()
		return 0, nil, ErrConnClosed
	}
	r.pending[id] = ch
	r.mu.Unlock()
	m.ID = id
	if err := r.c.Send(m, files...); err != nil {
		r.Done(id)
		if errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
			err = ErrConnClosed
		}
		return 0, nil, err
	}
	return id, ch, nil
}

// Expect routes the messages that come with id, a number Request never
// gives (0: what the peer sends unasked, as a guest's Ready), to the
// returned channel, which is closed if the connection ends. Call Done when
// no more are wanted: later ones are dropped.
func (r *Router) Expect(id uint32) (<-chan Inbound, error) {
	ch := make(chan Inbound, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return nil, ErrConnClosed
	}
	if r.pending[id] != nil {
		return nil, fmt.Errorf("proto: replies with id %d are routed already", id)
	}
	r.pending[id] = ch
	return ch, nil
}

// Send sends a message about an existing request (stdin, a signal) under its ID.
func (r *Router) Send(id uint32, m *Msg) error {
	m.ID = id
	return r.c.Send(m)
}

// Done stops routing replies for id.
func (r *Router) Done(id uint32) {
	r.mu.Lock()
	delete(r.pending, id)
	r.mu.Unlock()
}

// Err says why the connection ended (io.EOF when the peer closed it
// cleanly), or nil while it is up.
func (r *Router) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Close closes the connection; waiting requests see their channels closed.
func (r *Router) Close() error { return r.c.Close() }
