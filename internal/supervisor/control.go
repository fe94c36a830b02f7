package supervisor

import (
	"context"
	"net"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/backend/native"
	"github.com/airlock-dev/airlock/internal/proto"
)

// serveControl answers airlock commands (exec, kill, file requests) on the
// sandbox's control socket. Each client speaks the same framed protocol as
// the guest; the supervisor relays, adding the sandbox's environment.
func (sv *supervisor) serveControl(ln *net.UnixListener) {
	for {
		uc, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		if !sameUser(uc) {
			uc.Close()
			continue
		}
		go sv.client(proto.NewConn(uc))
	}
}

// sameUser checks the peer's uid: the socket's directory is private already,
// this holds even if someone loosened its mode.
func sameUser(uc *net.UnixConn) bool {
	raw, err := uc.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	return err == nil && cred != nil && int(cred.Uid) == os.Getuid()
}

func (sv *supervisor) client(c *proto.Conn) {
	var (
		mu    sync.Mutex
		procs = map[uint32]*native.Process{}
	)
	defer func() {
		// A client that goes away takes its processes with it: no leftovers
		// from an exec whose terminal closed.
		mu.Lock()
		for _, p := range procs {
			p.Signal(syscall.SIGKILL)
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
				req.Env = MergeEnv(sv.spec.Env, req.Env)
				if req.Dir == "" {
					req.Dir = sv.spec.Native.Workspace
				}
				output := func(stream uint8, data []byte) {
					c.Send(&proto.Msg{ID: id, Op: proto.OpOutput, Stream: stream, Data: data})
				}
				p, err := sv.sb.Exec(req, output, files...)
				proto.CloseFiles(files)
				if err != nil {
					c.Send(&proto.Msg{ID: id, Op: proto.OpError, Err: &proto.Error{Step: "exec", Message: err.Error()}})
					return
				}
				if p.PID != 0 {
					mu.Lock()
					procs[id] = p
					mu.Unlock()
					started := &proto.Msg{ID: id, Op: proto.OpStarted, PID: p.PID}
					if p.PTY != nil {
						c.Send(started, p.PTY)
						p.PTY.Close()
					} else {
						c.Send(started)
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
		case proto.OpSignal, proto.OpStdin, proto.OpStdinClose:
			proto.CloseFiles(files)
			mu.Lock()
			p := procs[m.ID]
			mu.Unlock()
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
		case proto.OpKill:
			proto.CloseFiles(files)
			sv.requestStop("stopped by airlock kill")
			c.Send(&proto.Msg{ID: m.ID, Op: proto.OpResult})
		default:
			proto.CloseFiles(files)
			go func(m proto.Msg) {
				id := m.ID
				r, err := sv.sb.Call(context.Background(), &m)
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
