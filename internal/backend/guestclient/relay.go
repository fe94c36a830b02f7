package guestclient

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
	xterm "golang.org/x/term"

	"github.com/airlock-dev/airlock/internal/proto"
)

// Over a channel that cannot carry descriptors (proto.StreamConn: a VM's
// virtio-serial port) the two kinds of exec that hand descriptors across are
// relayed here, so callers get the same Process as over a socket:
//
//   - a TTY exec gets a pty pair on the host: the caller holds the master as
//     Process.PTY; this side holds the slave in raw mode and pumps it to and
//     from Output/Stdin messages (the guest's own pty does the line
//     discipline), and passes the caller's resizes on as Resize messages;
//   - a StdioFDs exec runs in stream mode: its output is written to the
//     caller's stdout and stderr, the caller's stdin read into Stdin messages.

// resizePoll is how often a relayed TTY's size is checked: resizing the
// master raises no event the slave's holder can wait for.
const resizePoll = 200 * time.Millisecond

// relay takes p's replies over in a goroutine until the process exits or
// the channel ends: Output goes to write, tick (if any) runs every
// resizePoll, and end runs last. Wait waits for it.
func (p *Process) relay(write func(stream uint8, data []byte), tick func(), end func()) {
	done := make(chan struct{})
	p.relayed = done
	go func() {
		defer close(done)
		defer p.c.router.Done(p.id)
		defer end()
		var ticks <-chan time.Time
		if tick != nil {
			t := time.NewTicker(resizePoll)
			defer t.Stop()
			ticks = t.C
		}
		for {
			select {
			case r, ok := <-p.replies:
				if !ok {
					return
				}
				proto.CloseFiles(r.Files)
				switch r.Op {
				case proto.OpOutput:
					write(r.Stream, r.Data)
				case proto.OpExit:
					p.exit = r.Exit
					return
				}
			case <-ticks:
				tick()
			}
		}
	}()
}

// relayTTY gives a started TTY process a local pty as its PTY.
func (p *Process) relayTTY(req *proto.Exec) error {
	ptm, pts, err := pty.Open()
	if err != nil {
		return err
	}
	size := unix.Winsize{Row: req.Rows, Col: req.Cols}
	if err := control(pts, func(fd int) error {
		if _, err := xterm.MakeRaw(fd); err != nil {
			return err
		}
		if size.Row == 0 || size.Col == 0 {
			return nil
		}
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &size)
	}); err != nil {
		ptm.Close()
		pts.Close()
		return err
	}
	p.PTY = ptm
	go func() { // the caller's keystrokes; ends when relay closes pts
		buf := make([]byte, 32<<10)
		for {
			n, err := pts.Read(buf)
			if n > 0 && p.c.router.Send(p.id, &proto.Msg{Op: proto.OpStdin, Data: buf[:n]}) != nil {
				return
			}
			if err != nil {
				if !errors.Is(err, os.ErrClosed) { // the caller closed every copy of the master: hang up
					p.c.router.Send(p.id, &proto.Msg{Op: proto.OpStdinClose})
				}
				return
			}
		}
	}()
	resize := func() {
		var ws *unix.Winsize
		if control(pts, func(fd int) (err error) { ws, err = unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ); return }) != nil || *ws == size {
			return
		}
		size = *ws
		p.c.router.Send(p.id, &proto.Msg{Op: proto.OpResize, Rows: ws.Row, Cols: ws.Col})
	}
	// Output written before pts closes stays readable on the master, which
	// then reads EOF (EIO) like a master whose process is gone.
	p.relay(func(_ uint8, b []byte) { pts.Write(b) }, resize, func() { pts.Close() })
	return nil
}

// execFDs runs a StdioFDs request in stream mode with files (stdin, stdout,
// stderr) pumped to and from it.
func (c *Client) execFDs(req *proto.Exec, files []*os.File) (*Process, error) {
	if len(files) != 3 {
		return nil, fmt.Errorf("exec %s: fd stdio needs 3 files, got %d", req.Argv[0], len(files))
	}
	// Copies of the caller's files, as the guest would hold: the caller may
	// close its own once Exec returns.
	in, err := watchable(files[0])
	if err != nil {
		return nil, fmt.Errorf("exec %s: stdin: %w", req.Argv[0], err)
	}
	stdout, err := dupFile(files[1])
	if err != nil {
		in.discard()
		return nil, fmt.Errorf("exec %s: stdout: %w", req.Argv[0], err)
	}
	stderr, err := dupFile(files[2])
	if err != nil {
		in.discard()
		stdout.Close()
		return nil, fmt.Errorf("exec %s: stderr: %w", req.Argv[0], err)
	}
	end := func() {
		in.close()
		stdout.Close()
		stderr.Close()
	}
	streamed := *req
	streamed.Stdio = proto.StdioStream
	var p *Process
	var pipeOnce sync.Once
	write := func(stream uint8, b []byte) {
		f := stdout
		if stream == 2 {
			f = stderr
		}
		// A reader that went away gets the process a SIGPIPE, as it would
		// writing there itself (and spares this process one on fd 1 or 2).
		if writeAll(f, b) == syscall.EPIPE && p != nil {
			pipeOnce.Do(func() { p.Signal(syscall.SIGPIPE) })
		}
	}
	p, err = c.Exec(&streamed, write)
	if err != nil || p.exit != nil {
		in.discard()
		end()
		return p, err
	}
	go in.pump(p)
	p.relay(write, nil, end)
	return p, nil
}

// dupFD returns a second descriptor (close-on-exec) for f's open file.
func dupFD(f *os.File) (int, error) {
	fd := -1
	err := control(f, func(raw int) (err error) { fd, err = unix.FcntlInt(uintptr(raw), unix.F_DUPFD_CLOEXEC, 0); return })
	return fd, err
}

// dupFile is dupFD as an *os.File.
func dupFile(f *os.File) (*os.File, error) {
	fd, err := dupFD(f)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// writeAll writes b to f without the runtime's SIGPIPE on a broken stdout.
func writeAll(f *os.File, b []byte) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	if err := rc.Write(func(fd uintptr) bool {
		for len(b) > 0 {
			n, err := unix.Write(int(fd), b)
			switch {
			case err == unix.EAGAIN:
				return false // wait until writable
			case err == unix.EINTR:
			case err != nil:
				werr = err
				return true
			default:
				b = b[n:]
			}
		}
		return true
	}); err != nil {
		return err
	}
	return werr
}

// input is a caller's stdin, read without changing its descriptor's flags
// (the file description is shared with the caller): poll tells when it is
// readable, and a pipe of our own wakes the poll when the process is done.
type input struct {
	fd         int // our dup of the caller's stdin
	wake, stop *os.File
	once       sync.Once
}

func watchable(f *os.File) (*input, error) {
	fd, err := dupFD(f)
	if err != nil {
		return nil, err
	}
	wake, stop, err := os.Pipe()
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &input{fd: fd, wake: wake, stop: stop}, nil
}

// close ends pump; the descriptors close once it returns.
func (in *input) close() { in.once.Do(func() { in.stop.Close() }) }

// discard closes an input whose pump never ran.
func (in *input) discard() {
	in.close()
	in.wake.Close()
	unix.Close(in.fd)
}

// pump sends what the caller's stdin yields to p, and closes p's stdin at
// its end, until close.
func (in *input) pump(p *Process) {
	defer unix.Close(in.fd)
	defer in.wake.Close()
	wakeFD := -1
	control(in.wake, func(fd int) error { wakeFD = fd; return nil })
	buf := make([]byte, 32<<10)
	for {
		fds := []unix.PollFd{{Fd: int32(in.fd), Events: unix.POLLIN}, {Fd: int32(wakeFD), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		if fds[0].Revents == 0 {
			continue
		}
		n, err := unix.Read(in.fd, buf)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue // someone else took it, or the caller's descriptor is non-blocking
		}
		if n > 0 {
			if _, werr := p.Write(buf[:n]); werr != nil {
				return
			}
			continue
		}
		p.CloseStdin() // end of input, or an error reading it
		return
	}
}

// control runs fn on f's descriptor without f.Fd(), which would put a
// pollable file into blocking mode.
func control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	if cerr := rc.Control(func(fd uintptr) { err = fn(int(fd)) }); cerr != nil {
		return cerr
	}
	return err
}
