package control

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/airlock-dev/airlock/internal/proto"
	"github.com/airlock-dev/airlock/internal/term"
	"github.com/airlock-dev/airlock/internal/trace"
)

// exitAirlock is the exit status when airlock itself fails.
const exitAirlock = 125

// Client talks to a running sandbox's supervisor over its control socket.
type Client struct {
	r *proto.Router
}

// Dial connects to the control socket at path.
func Dial(path string) (*Client, error) {
	uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("%w (its supervisor is gone: `airlock ls` shows it as crashed; `airlock prune` cleans up)", ErrNotRunning)
	}
	return &Client{r: proto.NewRouter(proto.NewConn(uc))}, nil
}

// Close ends the connection; processes started through it are killed.
func (cl *Client) Close() error { return cl.r.Close() }

// Kill stops the sandbox.
func (cl *Client) Kill() error {
	_, err := cl.call(&proto.Msg{Op: proto.OpKill})
	return err
}

// Signals starts catching the signals a foreground command gets
// (term.Forwarded) for Exec to pass on, until stop is called. Catching costs
// the runtime one round trip to its signal thread per signal, on Notify and
// again on Stop (~0.2 ms here for the seven): a client that runs many
// commands catches them once, not per command.
func Signals() (sigs <-chan os.Signal, stop func()) {
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, term.Forwarded...)
	return ch, func() { signal.Stop(ch) }
}

// Exec runs argv in the sandbox with stdio (or, with tty, a pty relayed to
// this terminal) and returns the exit code. The signals that arrive on sigs
// while it runs are passed on to the command, SIGWINCH as a resize of its
// terminal (see Signals); sigs may be nil.
func (cl *Client) Exec(req *proto.Exec, stdio term.IO, sigs <-chan os.Signal) (int, error) {
	var files []*os.File
	if req.TTY {
		req.Rows, req.Cols = term.Size(stdio.Stdin)
	} else {
		req.Stdio = proto.StdioFDs
		files = []*os.File{stdio.Stdin, stdio.Stdout, stdio.Stderr}
	}
	id, replies, err := cl.r.Request(&proto.Msg{Op: proto.OpExec, Exec: req}, files...)
	if err != nil {
		return exitAirlock, err
	}
	defer cl.r.Done(id)
	trace.Mark("exec: request sent")

	var (
		t     *term.Terminal
		pty   *os.File
		drain = func() {}
	)
	defer func() {
		if t != nil {
			t.Restore()
		}
		if pty != nil {
			pty.Close()
		}
	}()
	for {
		select {
		case r, ok := <-replies:
			if !ok {
				return exitAirlock, errors.New("the sandbox stopped while the command ran")
			}
			switch r.Op {
			case proto.OpStarted:
				trace.Mark("exec: command started")
				if len(r.Files) > 0 {
					pty = r.Files[0]
					t = term.Open(stdio.Stdin, stdio.Stdout)
					drain = t.Relay(pty)
				}
			case proto.OpExit:
				trace.Mark("exec: command exited")
				drain()
				if pty == nil && req.TTY && r.Exit.Reason != "" { // never started: no terminal got the reason
					fmt.Fprintf(stdio.Stderr, "airlock: %s\n", r.Exit.Reason)
				}
				return r.Exit.Code, nil
			case proto.OpError:
				return exitAirlock, r.Err
			}
		case s := <-sigs:
			if s == syscall.SIGWINCH {
				if t != nil {
					t.Resize(pty)
				}
				continue
			}
			cl.r.Send(id, &proto.Msg{Op: proto.OpSignal, Signal: int(s.(syscall.Signal))})
		}
	}
}
