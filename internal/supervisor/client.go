package supervisor

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/airlock-dev/airlock/internal/proto"
)

// Client talks to a running sandbox's supervisor over its control socket.
// One goroutine reads replies and routes them by request ID, so requests
// may follow one another (or overlap) on one connection.
type Client struct {
	c      *proto.Conn
	nextID atomic.Uint32

	mu      sync.Mutex
	pending map[uint32]chan reply
	err     error // why the connection ended
}

// reply is one message from the supervisor with the descriptors it carried.
type reply struct {
	m     *proto.Msg
	files []*os.File
}

// Dial connects to the control socket at path.
func Dial(path string) (*Client, error) {
	uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("%w (its supervisor is gone: `airlock ls` shows it as crashed; `airlock prune` cleans up)", errNotRunning)
	}
	cl := &Client{c: proto.NewConn(uc), pending: map[uint32]chan reply{}}
	go cl.read()
	return cl, nil
}

func (cl *Client) read() {
	for {
		m, files, err := cl.c.Recv()
		cl.mu.Lock()
		if err != nil {
			cl.err = err
			for id, ch := range cl.pending {
				close(ch)
				delete(cl.pending, id)
			}
			cl.mu.Unlock()
			return
		}
		ch := cl.pending[m.ID]
		cl.mu.Unlock()
		if ch == nil {
			closeFiles(files)
			continue
		}
		ch <- reply{m, files}
	}
}

// request sends m under a fresh ID and returns the channel its replies arrive on.
func (cl *Client) request(m *proto.Msg, files ...*os.File) (uint32, chan reply, error) {
	id := cl.nextID.Add(1)
	ch := make(chan reply, 64)
	cl.mu.Lock()
	if cl.err != nil {
		cl.mu.Unlock()
		return 0, nil, errNotRunning
	}
	cl.pending[id] = ch
	cl.mu.Unlock()
	m.ID = id
	if err := cl.c.Send(m, files...); err != nil {
		cl.done(id)
		return 0, nil, err
	}
	return id, ch, nil
}

func (cl *Client) done(id uint32) {
	cl.mu.Lock()
	delete(cl.pending, id)
	cl.mu.Unlock()
}

// Close ends the connection; processes started through it are killed.
func (cl *Client) Close() error { return cl.c.Close() }

// Kill stops the sandbox.
func (cl *Client) Kill() error {
	id, ch, err := cl.request(&proto.Msg{Op: proto.OpKill})
	if err != nil {
		return err
	}
	defer cl.done(id)
	if _, ok := <-ch; !ok {
		return errNotRunning
	}
	return nil
}

// Exec runs argv in the sandbox with this process's stdio (or, with tty, a
// pty relayed to this terminal), forwarding signals, and returns the exit code.
func (cl *Client) Exec(req *proto.Exec, stdio IO) (int, error) {
	var files []*os.File
	if req.TTY {
		req.Rows, req.Cols = termSize(stdio.Stdin)
	} else {
		req.Stdio = proto.StdioFDs
		files = []*os.File{stdio.Stdin, stdio.Stdout, stdio.Stderr}
	}
	id, replies, err := cl.request(&proto.Msg{Op: proto.OpExec, Exec: req}, files...)
	if err != nil {
		return ExitAirlock, err
	}
	defer cl.done(id)
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

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
		case r, ok := <-replies:
			if !ok {
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
