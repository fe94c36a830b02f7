package guest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"

	"github.com/airlock-dev/airlock/internal/proto"
	"github.com/airlock-dev/airlock/internal/trace"
)

// outputDrain bounds how long exit waits for stream-mode output after the
// process ended: a background child may hold the pipe open forever.
const outputDrain = 2 * time.Second

type process struct {
	pid   int
	pty   *os.File
	stdin chan []byte   // stream mode; nil chunk closes stdin
	done  chan struct{} // closed when the exec request is over
}

func (p *process) control(m *proto.Msg) {
	switch m.Op {
	case proto.OpStdin:
		if p.stdin != nil && len(m.Data) > 0 {
			select {
			case p.stdin <- m.Data:
			case <-p.done:
			}
		}
	case proto.OpStdinClose:
		if p.stdin != nil {
			select {
			case p.stdin <- nil:
			case <-p.done:
			}
		}
	case proto.OpSignal:
		if m.Signal > 0 && m.Signal < 65 {
			syscall.Kill(p.pid, syscall.Signal(m.Signal))
		}
	case proto.OpResize:
		if p.pty != nil {
			setSize(p.pty, m.Rows, m.Cols)
		}
	}
}

func (g *guest) exec(id uint32, req *proto.Exec, passed []*os.File) {
	start := time.Now()
	var (
		stdio   [3]*os.File
		inChild []*os.File // our copies of the child's ends, closed once it started
		p       = &process{done: make(chan struct{})}
		drained sync.WaitGroup
	)
	defer close(p.done) // ends the stdin writer, whatever happened
	defer proto.CloseFiles(passed)
	switch {
	case req.TTY:
		ptm, pts, err := pty.Open()
		if err != nil {
			proto.CloseFiles(passed)
			g.fail(id, "open pty", err)
			return
		}
		if req.Rows > 0 && req.Cols > 0 {
			pty.Setsize(ptm, &pty.Winsize{Rows: req.Rows, Cols: req.Cols})
		}
		if !g.conn.PassesFiles() { // the master stays here: its bytes ride on Stdin/Output
			ptm = pollable(ptm)
			p.feed(ptm)
		}
		p.pty = ptm
		defer ptm.Close()
		stdio = [3]*os.File{pts, pts, pts}
		inChild = []*os.File{pts}
	case req.Stdio == proto.StdioFDs:
		if len(passed) != 3 {
			g.fail(id, "exec", fmt.Errorf("fd stdio needs 3 descriptors, got %d", len(passed)))
			return
		}
		stdio = [3]*os.File{passed[0], passed[1], passed[2]}
	default:
		var err error
		if stdio, inChild, err = g.streams(id, p, &drained); err != nil {
			g.fail(id, "exec pipes", err)
			return
		}
	}

	// exit ends a request whose process never started. The reason goes to
	// its stderr (and with Exit, for a TTY whose pty the host never got).
	exit := func(code int, reason string) {
		if reason != "" {
			fmt.Fprintf(stdio[2], "airlock: %s\n", reason)
		}
		proto.CloseFiles(inChild) // in stream mode the output pipes now reach EOF
		waitTimeout(&drained, outputDrain)
		g.exited(id, req, &proto.Exit{Code: code, Reason: reason, DurationMS: time.Since(start).Milliseconds()})
	}
	dir := req.Dir
	if dir == "" {
		dir = g.workdir
	}
	path, code, err := lookPath(req.Argv[0], req.Env, dir)
	if err != nil {
		exit(code, err.Error())
		return
	}
	attr := &syscall.ProcAttr{
		Dir:   dir,
		Env:   req.Env,
		Files: []uintptr{stdio[0].Fd(), stdio[1].Fd(), stdio[2].Fd()},
		// A new session always: without a controlling terminal of the host's, a
		// process cannot inject input into it (TIOCSTI) or get its signals.
		Sys: &syscall.SysProcAttr{Setsid: true, Setctty: req.TTY, Ctty: 0},
	}
	trace.Mark("exec: request read")
	pid, done, err := g.reaper.start(path, req.Argv, attr)
	trace.Mark("exec: forked")
	if err != nil {
		code := 126
		if errors.Is(err, syscall.ENOENT) {
			code = 127
		}
		exit(code, fmt.Sprintf("%s: %v", req.Argv[0], err))
		return
	}
	proto.CloseFiles(inChild)
	inChild = nil
	p.pid = pid
	g.mu.Lock()
	g.procs[id] = p
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		delete(g.procs, id)
		g.mu.Unlock()
	}()

	started := &proto.Msg{ID: id, Op: proto.OpStarted, PID: pid}
	switch {
	case p.pty != nil && g.conn.PassesFiles():
		g.reply(started, p.pty)
	case p.pty != nil:
		g.reply(started)
		g.forward(id, 1, p.pty, &drained) // after Started, so output follows it
	default:
		g.reply(started)
	}

	var timeout <-chan time.Time
	if req.TimeoutMS > 0 {
		t := time.NewTimer(time.Duration(req.TimeoutMS) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	var ws syscall.WaitStatus
	reason := ""
	select {
	case ws = <-done:
	case <-timeout:
		syscall.Kill(-pid, syscall.SIGKILL) // its whole session
		syscall.Kill(pid, syscall.SIGKILL)
		ws = <-done
		reason = fmt.Sprintf("timed out after %s", time.Duration(req.TimeoutMS)*time.Millisecond)
	}
	waitTimeout(&drained, outputDrain)
	e := &proto.Exit{Code: ws.ExitStatus(), DurationMS: time.Since(start).Milliseconds(), Reason: reason}
	if ws.Signaled() {
		e.Signal = int(ws.Signal())
		e.Code = 128 + e.Signal
	}
	g.exited(id, req, e)
}

// exited reports a request's exit. After the sandbox's Last process the
// guest ends the sandbox at once: the host would kill it on reading the
// exit, and its message and wake-ups before the kill are a fifth of a
// millisecond at the end of every run. The exit is in the host's socket
// before PID 1 goes, and the kernel then ends every process left. A
// process that ends at once (a command not found) may get here before
// Ready has been sent: the host would see the guest die during set-up.
func (g *guest) exited(id uint32, req *proto.Exec, e *proto.Exit) {
	g.reply(&proto.Msg{ID: id, Op: proto.OpExit, Exit: e})
	if req.Last && g.mayEnd {
		<-g.readySent
		os.Exit(0)
	}
}

// streams makes pipes for a stream-mode process and pumps them over the channel.
func (g *guest) streams(id uint32, p *process, drained *sync.WaitGroup) (stdio [3]*os.File, child []*os.File, err error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return stdio, nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return stdio, nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		proto.CloseFiles([]*os.File{inR, inW, outR, outW})
		return stdio, nil, err
	}
	p.feed(inW)
	g.forward(id, 1, outR, drained)
	g.forward(id, 2, errR, drained)
	return [3]*os.File{inR, outW, errW}, []*os.File{inR, outW, errW}, nil
}

// feed writes the host's Stdin messages to w, and closes w when the host
// closes stdin (for a TTY's master: a hangup) or the request ends.
func (p *process) feed(w *os.File) {
	p.stdin = make(chan []byte, 64)
	go func() {
		defer w.Close()
		for {
			select {
			case b := <-p.stdin:
				if b == nil {
					return
				}
				if _, err := w.Write(b); err != nil {
					return
				}
			case <-p.done:
				return
			}
		}
	}()
}

// forward sends what r yields as Output messages on stream until r ends,
// then closes r.
func (g *guest) forward(id uint32, stream uint8, r *os.File, drained *sync.WaitGroup) {
	drained.Add(1)
	go func() {
		defer drained.Done()
		defer r.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				g.reply(&proto.Msg{ID: id, Op: proto.OpOutput, Stream: stream, Data: append([]byte(nil), buf[:n]...)})
			}
			if err != nil {
				return
			}
		}
	}()
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) {
	c := make(chan struct{})
	go func() { wg.Wait(); close(c) }()
	select {
	case <-c:
	case <-time.After(d):
	}
}

// lookPath resolves a command as a shell would, with the shell's exit codes:
// 127 when it is not found, 126 when it cannot be executed.
func lookPath(name string, env []string, dir string) (string, int, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := executable(p); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return "", 127, fmt.Errorf("%s: no such file or directory", name)
			}
			return "", 126, fmt.Errorf("%s: %v", name, err)
		}
		return p, 0, nil
	}
	pathEnv := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	var denied error
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, name)
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		err := executable(p)
		if err == nil {
			return p, 0, nil
		}
		if !errors.Is(err, fs.ErrNotExist) && denied == nil {
			denied = err
		}
	}
	if denied != nil {
		return "", 126, fmt.Errorf("%s: %v", name, denied)
	}
	return "", 127, fmt.Errorf("%s: command not found", name)
}

func executable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() {
		return errors.New("is a directory")
	}
	if err := syscall.Access(p, 1 /* X_OK */); err != nil {
		return fmt.Errorf("permission denied")
	}
	return nil
}
