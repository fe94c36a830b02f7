// Package guestclient is the host's end of a guest agent's control channel
// once the sandbox is ready: exec requests, their processes, and file calls.
// Every backend (native, docker) speaks to its guest through it.
package guestclient

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/airlock-dev/airlock/internal/proto"
	"github.com/airlock-dev/airlock/internal/trace"
)

// ErrClosed is returned for requests to a sandbox that has ended.
var ErrClosed = errors.New("sandbox is not running")

// Client sends requests to one ready guest.
type Client struct {
	router *proto.Router
	relay  bool // the channel carries no descriptors: relay.go stands in for them
}

// New routes requests over conn, on which the guest has sent Ready. Nothing
// else may read from conn afterwards.
func New(conn *proto.Conn) *Client {
	return &Client{router: proto.NewRouter(conn), relay: !conn.PassesFiles()}
}

// Starting is New for a guest still setting up: its Ready, or the Error
// that ended its setup, arrives on setup (Done(0) once it has), and
// requests may be sent at once: a guest reads none before its lockdown
// (and serves them from then on, while its Ready is on its way).
func Starting(conn *proto.Conn) (c *Client, setup <-chan proto.Inbound, err error) {
	c = New(conn)
	if setup, err = c.router.Expect(0); err != nil {
		return nil, nil, closedOr(err)
	}
	return c, setup, nil
}

// Done stops routing what comes with id (see Starting).
func (c *Client) Done(id uint32) { c.router.Done(id) }

// Call sends one file request and waits for its result.
func (c *Client) Call(ctx context.Context, m *proto.Msg) (*proto.Msg, error) {
	if c == nil {
		return nil, ErrClosed
	}
	id, replies, err := c.router.Request(m)
	if err != nil {
		return nil, closedOr(err)
	}
	defer c.router.Done(id)
	select {
	case r, ok := <-replies:
		if !ok {
			return nil, ErrClosed
		}
		proto.CloseFiles(r.Files)
		if r.Op == proto.OpError {
			return nil, r.Err
		}
		return r.Msg, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Process is a command running in the sandbox.
type Process struct {
	PID int
	PTY *os.File // the pty master when the Exec asked for a TTY; the caller closes it

	c       *Client
	id      uint32
	replies <-chan proto.Inbound
	output  func(stream uint8, data []byte)
	exit    *proto.Exit
	relayed chan struct{} // when set, closed once relay has the exit (or the channel ended)
}

// Exec starts req. In proto.StdioFDs mode, files are the process's stdin,
// stdout and stderr; in stream mode output goes to output as it arrives.
func (c *Client) Exec(req *proto.Exec, output func(stream uint8, data []byte), files ...*os.File) (*Process, error) {
	if c == nil {
		return nil, ErrClosed
	}
	if c.relay && req.TTY {
		files = nil // a TTY's stdio is its pty (the guest would close them)
	} else if c.relay && req.Stdio == proto.StdioFDs {
		return c.execFDs(req, files)
	}
	trace.Mark("exec: sending the request")
	id, replies, err := c.router.Request(&proto.Msg{Op: proto.OpExec, Exec: req}, files...)
	if err != nil {
		return nil, closedOr(err)
	}
	trace.Mark("exec: request sent")
	p := &Process{c: c, id: id, replies: replies, output: output}
	for {
		r, ok := <-replies
		if !ok {
			return nil, ErrClosed
		}
		switch r.Op {
		case proto.OpStarted:
			p.PID = r.PID
			if len(r.Files) > 0 {
				p.PTY, r.Files = r.Files[0], r.Files[1:]
			} else if req.TTY && c.relay {
				if err := p.relayTTY(req); err != nil {
					p.Signal(syscall.SIGKILL)
					c.router.Done(id)
					return nil, fmt.Errorf("exec %s: a pty to relay its terminal: %w", req.Argv[0], err)
				}
			}
			proto.CloseFiles(r.Files)
			return p, nil
		case proto.OpExit: // never started: not found, not executable
			p.exit = r.Exit
			c.router.Done(id)
			return p, nil
		case proto.OpError:
			c.router.Done(id)
			return nil, fmt.Errorf("exec %s: %w", req.Argv[0], r.Err)
		case proto.OpOutput:
			p.deliver(r.Msg)
		}
		proto.CloseFiles(r.Files)
	}
}

func (p *Process) deliver(m *proto.Msg) {
	if p.output != nil {
		p.output(m.Stream, m.Data)
	}
}

// Wait returns the process's exit. If the sandbox ends first, it returns ErrClosed.
func (p *Process) Wait() (*proto.Exit, error) {
	if p.relayed != nil {
		<-p.relayed
		if p.exit == nil {
			return nil, ErrClosed
		}
		return p.exit, nil
	}
	if p.exit != nil {
		return p.exit, nil
	}
	defer p.c.router.Done(p.id)
	for r := range p.replies {
		proto.CloseFiles(r.Files)
		switch r.Op {
		case proto.OpOutput:
			p.deliver(r.Msg)
		case proto.OpExit:
			p.exit = r.Exit
			return p.exit, nil
		}
	}
	return nil, ErrClosed
}

// Signal delivers sig to the process.
func (p *Process) Signal(sig syscall.Signal) error {
	return p.c.router.Send(p.id, &proto.Msg{Op: proto.OpSignal, Signal: int(sig)})
}

// Write sends stdin to a stream-mode process; CloseStdin ends it.
func (p *Process) Write(b []byte) (int, error) {
	for off := 0; off < len(b); off += 32 << 10 {
		end := min(off+32<<10, len(b))
		if err := p.c.router.Send(p.id, &proto.Msg{Op: proto.OpStdin, Data: b[off:end]}); err != nil {
			return off, err
		}
	}
	return len(b), nil
}

func (p *Process) CloseStdin() error {
	return p.c.router.Send(p.id, &proto.Msg{Op: proto.OpStdinClose})
}

// closedOr maps a dead connection to ErrClosed and keeps other errors (an
// oversized request, say) as they are.
func closedOr(err error) error {
	if errors.Is(err, proto.ErrConnClosed) {
		return ErrClosed
	}
	return err
}
