package control

import (
	"errors"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/internal/proto"
	"github.com/airlock-dev/airlock/internal/term"
)

// attachDrain bounds how long the command's last output is relayed after
// it exited.
const attachDrain = time.Second

// Attached is how an attach ended.
type Attached struct {
	Code     int  // the command's exit status, when it ended
	Detached bool // the user typed the detach keys (or the terminal hung up)
}

// Attach connects this terminal (stdio) to the sandbox's main command until
// it ends or the user types detach (a sequence from term.ParseKeys). The
// signals that arrive on sigs are passed on, SIGWINCH as a resize; SIGHUP
// (the terminal went away) detaches.
func (cl *Client) Attach(stdio term.IO, sigs <-chan os.Signal, detach []byte) (Attached, error) {
	rows, cols := term.Size(stdio.Stdin)
	id, replies, err := cl.r.Request(&proto.Msg{Op: proto.OpAttach, Rows: rows, Cols: cols})
	if err != nil {
		return Attached{}, err
	}
	defer cl.r.Done(id)
	var stream *os.File
	select {
	case r, ok := <-replies:
		if !ok {
			return Attached{}, ErrNotRunning
		}
		if r.Op == proto.OpError {
			return Attached{}, r.Err
		}
		if r.Op != proto.OpStarted || len(r.Files) != 1 {
			proto.CloseFiles(r.Files)
			return Attached{}, errors.New("attach: the supervisor sent no terminal")
		}
		stream = r.Files[0]
	}
	defer stream.Close()
	t := term.Open(stdio.Stdin, stdio.Stdout)
	defer t.Restore()

	output := make(chan struct{})
	go func() {
		io.Copy(stdio.Stdout, stream)
		close(output)
	}()
	detached := make(chan struct{})
	go func() { // ends with the process: a read of the user's terminal cannot be called off
		m := term.NewKeyMatcher(detach)
		buf := make([]byte, 4096)
		for {
			n, err := stdio.Stdin.Read(buf)
			pass, seq, _ := m.Feed(buf[:n])
			if len(pass) > 0 {
				if _, err := stream.Write(pass); err != nil {
					return
				}
			}
			if seq >= 0 {
				close(detached)
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		select {
		case r, ok := <-replies:
			if !ok {
				return Attached{}, errors.New("the sandbox stopped while attached")
			}
			switch r.Op {
			case proto.OpExit:
				if output != nil {
					select {
					case <-output:
					case <-time.After(attachDrain):
					}
				}
				return Attached{Code: r.Exit.Code}, nil
			case proto.OpError:
				return Attached{}, r.Err
			}
		case <-output:
			// The stream ended first: the Exit (or the reason) follows.
			output = nil
		case <-detached:
			return Attached{Detached: true}, nil
		case s := <-sigs:
			switch s {
			case syscall.SIGWINCH:
				rows, cols := term.Size(stdio.Stdin)
				cl.r.Send(id, &proto.Msg{Op: proto.OpResize, Rows: rows, Cols: cols})
			case syscall.SIGHUP:
				return Attached{Detached: true}, nil
			default:
				cl.r.Send(id, &proto.Msg{Op: proto.OpSignal, Signal: int(s.(syscall.Signal))})
			}
		}
	}
}
