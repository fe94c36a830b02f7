package supervisor

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/airlock-dev/airlock/internal/proto"
)

// Client talks to a running sandbox's supervisor over its control socket.
type Client struct {
	c      *proto.Conn
	nextID atomic.Uint32
}

// Dial connects to the control socket at path.
func Dial(path string) (*Client, error) {
	uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("%w (its supervisor is gone: `airlock ls` shows it as crashed; `airlock prune` cleans up)", errNotRunning)
	}
	return &Client{c: proto.NewConn(uc)}, nil
}

// Close ends the connection; processes started through it are killed.
func (cl *Client) Close() error { return cl.c.Close() }

// Kill stops the sandbox.
func (cl *Client) Kill() error {
	if err := cl.c.Send(&proto.Msg{ID: cl.nextID.Add(1), Op: proto.OpKill}); err != nil {
		return err
	}
	_, _, err := cl.c.Recv()
	return err
}

// Exec runs argv in the sandbox with this process's stdio (or, with tty, a
// pty relayed to this terminal), forwarding signals, and returns the exit code.
func (cl *Client) Exec(req *proto.Exec, stdio IO) (int, error) {
	id := cl.nextID.Add(1)
	var err error
	if req.TTY {
		req.Rows, req.Cols = termSize(stdio.Stdin)
		err = cl.c.Send(&proto.Msg{ID: id, Op: proto.OpExec, Exec: req})
	} else {
		req.Stdio = proto.StdioFDs
		err = cl.c.Send(&proto.Msg{ID: id, Op: proto.OpExec, Exec: req}, stdio.Stdin, stdio.Stdout, stdio.Stderr)
	}
	if err != nil {
		return ExitAirlock, err
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	type recvd struct {
		m     *proto.Msg
		files []*os.File
		err   error
	}
	msgs := make(chan recvd, 1)
	go func() {
		for {
			m, files, err := cl.c.Recv()
			msgs <- recvd{m, files, err}
			if err != nil {
				return
			}
		}
	}()
	var (
		t     *terminal
		pty   *os.File
		drain = func() {}
	)
	defer func() {
		if t != nil {
			t.restore()
		}
		if pty != nil {
			pty.Close()
		}
	}()
	for {
		select {
		case r := <-msgs:
			if r.err != nil {
				return ExitAirlock, errors.New("the sandbox stopped while the command ran")
			}
			switch r.m.Op {
			case proto.OpStarted:
				if len(r.files) > 0 {
					pty = r.files[0]
					t = openTerminal(stdio.Stdin, stdio.Stdout)
					drain = t.relay(pty)
				}
			case proto.OpExit:
				drain()
				return r.m.Exit.Code, nil
			case proto.OpError:
				return ExitAirlock, r.m.Err
			}
		case s := <-sigs:
			if s == syscall.SIGWINCH {
				if t != nil {
					t.resize(pty)
				}
				continue
			}
			cl.c.Send(&proto.Msg{ID: id, Op: proto.OpSignal, Signal: int(s.(syscall.Signal))})
		}
	}
}
