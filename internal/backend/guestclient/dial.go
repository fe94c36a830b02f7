package guestclient

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/airlock-dev/airlock/internal/proto"
)

// Dial connects to port on the sandbox's own loopback, from inside: the
// guest makes the connection and hands its socket over, so the caller
// reads and writes the sandbox's end itself (a published port without a
// network interface). What comes back is the guest's and so untrusted: it
// is accepted only as one TCP socket.
func (c *Client) Dial(ctx context.Context, port uint16) (net.Conn, error) {
	if c == nil {
		return nil, ErrClosed
	}
	if c.relay {
		return nil, errors.New("dial: this channel carries no descriptors")
	}
	id, replies, err := c.router.Request(&proto.Msg{Op: proto.OpDial, Port: port})
	if err != nil {
		return nil, closedOr(err)
	}
	defer c.router.Done(id)
	select {
	case r, ok := <-replies:
		if !ok {
			return nil, ErrClosed
		}
		defer proto.CloseFiles(r.Files)
		if r.Op == proto.OpError {
			return nil, r.Err
		}
		if r.Op != proto.OpResult || len(r.Files) != 1 {
			return nil, fmt.Errorf("dial: the guest answered %s with %d descriptors", r.Op, len(r.Files))
		}
		conn, err := net.FileConn(r.Files[0]) // a duplicate: the deferred close is of the original
		if err != nil {
			return nil, fmt.Errorf("dial: the guest's descriptor: %w", err)
		}
		if _, ok := conn.(*net.TCPConn); !ok {
			conn.Close()
			return nil, errors.New("dial: the guest's descriptor is not a TCP socket")
		}
		return conn, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
