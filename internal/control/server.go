// Package control is a sandbox's control socket: the server a sandbox's
// host runs (exec, signals, stdin, file requests, kill) and the client that
// airlock exec, kill and others use. Both speak the guest's framed protocol.
package control

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"sync"
	"syscall"

	"github.com/airlock-dev/airlock/internal/approval"
	"github.com/airlock-dev/airlock/internal/proto"
)

// ErrNotRunning is the one answer for a sandbox that has stopped.
var ErrNotRunning = errors.New("sandbox is not running")

// Process is a command started through the socket.
type Process interface {
	Wait() (*proto.Exit, error)
	Signal(sig syscall.Signal) error
	Write(b []byte) (int, error)
	CloseStdin() error
	Started() (pid int, pty *os.File)
}

// Target is the sandbox the socket serves.
type Target interface {
	// Exec starts req with the sandbox's environment merged under req.Env.
	Exec(req *proto.Exec, output func(stream uint8, data []byte), files ...*os.File) (Process, error)
	Call(ctx context.Context, m *proto.Msg) (*proto.Msg, error)
	// Approvals is the sandbox's queue, or nil when it asks nobody.
	Approvals() Approvals
	// Console is the main command's terminal when a detached supervisor
	// holds it (run -t -d), or nil.
	Console() Console
}

// Console is a detached sandbox's terminal, which airlock attach connects to.
type Console interface {
	// Attach connects a client whose terminal is rows×cols. It returns the
	// client's end of a byte stream carrying the terminal both ways (what
	// the command last wrote replayed first), or ErrAttached while another
	// client is attached.
	Attach(rows, cols uint16) (*os.File, Attachment, error)
}

// Attachment is one client's connection to a Console.
type Attachment interface {
	Resize(rows, cols uint16)
	Signal(sig syscall.Signal)
	// Wait returns the command's exit once it ended, or the error that
	// ended the attachment first (the client fell too far behind).
	Wait() (*proto.Exit, error)
	// Close ends the attachment (the client went away); the command goes on.
	Close()
}

// ErrNoTerminal and ErrAttached are Attach's refusals.
var (
	ErrNoTerminal = errors.New("it runs without a terminal")
	ErrAttached   = errors.New("another terminal is attached to it")
)

// Approvals is what the socket serves of a sandbox's approval queue.
type Approvals interface {
	Pending() []approval.Request
	Decide(id string, d approval.Decision) error
	Subscribe(buf int) (<-chan approval.Event, func())
}

// Serve answers clients on ln until it is closed. Only the sandbox's own
// user may connect. stop, if set, is called for airlock kill.
func Serve(ln *net.UnixListener, t Target, stop func(why string)) {
	for {
		uc, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		if !sameUser(uc) {
			uc.Close()
			continue
		}
		go serveClient(proto.NewConn(uc), t, stop)
	}
}

// sameUser checks the peer's uid: the socket's directory is private already,
// this holds even if someone loosened its mode.
func sameUser(uc *net.UnixConn) bool {
	raw, err := uc.SyscallConn()
	if err != nil {
		return false
	}
	uid := -1
	raw.Control(func(fd uintptr) { uid, err = peerUID(int(fd)) })
	return err == nil && uid == os.Getuid()
}

func serveClient(c *proto.Conn, t Target, stop func(why string)) {
	var (
		mu      sync.Mutex
		procs   = map[uint32]Process{}
		atts    = map[uint32]Attachment{} // this client's attachments
		watches = map[uint32]func(){}     // approval watches this client holds
		gone    bool                      // the client went away: what starts now is killed
	)
	defer func() {
		// A client that goes away takes its processes with it: no leftovers
		// from an exec whose terminal closed, nor from one still starting.
		mu.Lock()
		gone = true
		for _, p := range procs {
			p.Signal(syscall.SIGKILL)
		}
		for _, stop := range watches {
			stop()
		}
		for _, a := range atts { // detached: the command goes on
			a.Close()
		}
		mu.Unlock()
		c.Close()
	}()
	for {
		m, files, err := c.Recv()
		if err != nil {
			return
		}
		switch m.Op {
		case proto.OpExec:
			go func(id uint32, req *proto.Exec, files []*os.File) {
				defer proto.CloseFiles(files)
				if req == nil || len(req.Argv) == 0 {
					c.Send(&proto.Msg{ID: id, Op: proto.OpError, Err: &proto.Error{Step: "exec", Message: "empty command"}})
					return
				}
				output := func(stream uint8, data []byte) {
					c.Send(&proto.Msg{ID: id, Op: proto.OpOutput, Stream: stream, Data: data})
				}
				p, err := t.Exec(req, output, files...)
				proto.CloseFiles(files)
				if err != nil {
					c.Send(&proto.Msg{ID: id, Op: proto.OpError, Err: &proto.Error{Step: "exec", Message: err.Error()}})
					return
				}
				if pid, pty := p.Started(); pid != 0 {
					mu.Lock()
					procs[id] = p
					if gone {
						p.Signal(syscall.SIGKILL)
					}
					mu.Unlock()
					// Only a terminal's client needs to hear of the start (its
					// pty rides on it); the others wait for Exit, one message
					// and one wake-up fewer per command.
					if pty != nil {
						c.Send(&proto.Msg{ID: id, Op: proto.OpStarted, PID: pid}, pty)
						pty.Close()
					}
				}
				e, err := p.Wait()
				mu.Lock()
				delete(procs, id)
				mu.Unlock()
				if err != nil {
					c.Send(&proto.Msg{ID: id, Op: proto.OpError, Err: &proto.Error{Step: "exec", Message: err.Error()}})
					return
				}
				c.Send(&proto.Msg{ID: id, Op: proto.OpExit, Exit: e})
			}(m.ID, m.Exec, files)
		case proto.OpAttach:
			proto.CloseFiles(files)
			attach(c, t, m, &mu, atts, &gone)
		case proto.OpSignal, proto.OpStdin, proto.OpStdinClose, proto.OpResize:
			proto.CloseFiles(files)
			mu.Lock()
			p, a := procs[m.ID], atts[m.ID]
			mu.Unlock()
			if a != nil {
				switch m.Op {
				case proto.OpSignal:
					a.Signal(syscall.Signal(m.Signal))
				case proto.OpResize:
					a.Resize(m.Rows, m.Cols)
				}
				continue
			}
			if p == nil {
				continue
			}
			switch m.Op {
			case proto.OpSignal:
				p.Signal(syscall.Signal(m.Signal))
			case proto.OpStdin:
				p.Write(m.Data)
			case proto.OpStdinClose:
				p.CloseStdin()
			}
		case proto.OpApprovals, proto.OpDecide, proto.OpWatchApprovals:
			proto.CloseFiles(files)
			serveApprovals(c, t.Approvals(), m, &mu, watches)
		case proto.OpKill:
			proto.CloseFiles(files)
			if stop != nil {
				stop("stopped by airlock kill")
			}
			c.Send(&proto.Msg{ID: m.ID, Op: proto.OpResult})
		default:
			proto.CloseFiles(files)
			go func(m proto.Msg) {
				id := m.ID
				r, err := t.Call(context.Background(), &m)
				if err != nil {
					perr, ok := err.(*proto.Error)
					if !ok {
						perr = &proto.Error{Message: err.Error()}
					}
					c.Send(&proto.Msg{ID: id, Op: proto.OpError, Err: perr})
					return
				}
				r.ID = id
				c.Send(r)
			}(*m)
		}
	}
}

// maxWatchBuffer is how many approval events a slow watcher may lag.
const maxWatchBuffer = 256

// serveApprovals answers the approval ops. A sandbox that asks nobody has
// an empty list and refuses decisions.
func serveApprovals(c *proto.Conn, q Approvals, m *proto.Msg, mu *sync.Mutex, watches map[uint32]func()) {
	fail := func(msg string) {
		c.Send(&proto.Msg{ID: m.ID, Op: proto.OpError, Err: &proto.Error{Step: m.Op.String(), Message: msg}})
	}
	switch m.Op {
	case proto.OpApprovals:
		var pending []approval.Request
		if q != nil {
			pending = q.Pending()
		}
		b, _ := json.Marshal(pending)
		c.Send(&proto.Msg{ID: m.ID, Op: proto.OpResult, Data: b})
	case proto.OpDecide:
		var d approval.Decision
		if len(m.Data) > 4096 || json.Unmarshal(m.Data, &d) != nil {
			fail("a decision is JSON: {\"allow\": true, \"scope\": \"once\"}")
			return
		}
		if q == nil {
			fail(approval.ErrUnknown.Error())
			return
		}
		if err := q.Decide(m.Path, d); err != nil {
			fail(err.Error())
			return
		}
		c.Send(&proto.Msg{ID: m.ID, Op: proto.OpResult})
	case proto.OpWatchApprovals:
		if q == nil {
			c.Send(&proto.Msg{ID: m.ID, Op: proto.OpResult}) // nothing will ever come
			return
		}
		events, stop := q.Subscribe(maxWatchBuffer)
		mu.Lock()
		if old := watches[m.ID]; old != nil {
			old()
		}
		watches[m.ID] = stop
		mu.Unlock()
		go func() {
			for e := range events {
				b, _ := json.Marshal(e)
				if c.Send(&proto.Msg{ID: m.ID, Op: proto.OpOutput, Data: b}) != nil {
					stop()
				}
			}
		}()
	}
}

// attach connects the client to the sandbox's console: the stream's end
// goes with Started, Exit (or the error that cut it off) ends it.
func attach(c *proto.Conn, t Target, m *proto.Msg, mu *sync.Mutex, atts map[uint32]Attachment, gone *bool) {
	fail := func(err error) {
		c.Send(&proto.Msg{ID: m.ID, Op: proto.OpError, Err: &proto.Error{Step: "attach", Message: err.Error()}})
	}
	cons := t.Console()
	if cons == nil {
		fail(ErrNoTerminal)
		return
	}
	mu.Lock()
	defer mu.Unlock()
	if *gone || atts[m.ID] != nil {
		return
	}
	f, a, err := cons.Attach(m.Rows, m.Cols)
	if err != nil {
		fail(err)
		return
	}
	atts[m.ID] = a
	err = c.Send(&proto.Msg{ID: m.ID, Op: proto.OpStarted}, f)
	f.Close()
	if err != nil {
		a.Close()
		return
	}
	go func() {
		e, err := a.Wait()
		mu.Lock()
		delete(atts, m.ID)
		mu.Unlock()
		if err != nil {
			fail(err)
			return
		}
		c.Send(&proto.Msg{ID: m.ID, Op: proto.OpExit, Exit: e})
	}()
}
