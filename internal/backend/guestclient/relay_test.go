package guestclient

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/airlock-dev/airlock/internal/guest"
	"github.com/airlock-dev/airlock/internal/proto"
)

// streamGuestEnv makes the test binary the guest agent, serving on fds 3
// (from the host) and 4 (to the host): two pipes, which carry no descriptors.
const streamGuestEnv = "AIRLOCK_TEST_STREAM_GUEST"

func TestMain(m *testing.M) {
	switch os.Getenv(streamGuestEnv) {
	case "stream":
		syscall.SetNonblock(3, true) // pollable, so Close ends a Read
		syscall.SetNonblock(4, true)
		os.Exit(guest.Serve(proto.StreamConn(pipes{os.NewFile(3, "from-host"), os.NewFile(4, "to-host")})))
	case "unix": // the socket the native backend uses, for comparison
		conn, err := proto.FileConn(os.NewFile(3, "control"))
		if err != nil {
			panic(err)
		}
		os.Exit(guest.Serve(conn))
	}
	os.Exit(m.Run())
}

// pipes is one byte stream made of two pipes.
type pipes struct{ r, w *os.File }

func (p pipes) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p pipes) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p pipes) Close() error                { p.w.Close(); return p.r.Close() }

// streamPipes returns the host's stream and the guest's two ends.
func streamPipes(t testing.TB) (host pipes, toGuest, fromGuest *os.File) {
	t.Helper()
	gr, hw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	hr, gw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	return pipes{hr, hw}, gr, gw
}

// startStreamGuest runs the real guest (internal/guest) in a child process
// whose control channel is a pipe pair, as a contained sandbox: no
// capabilities (setpriv empties the bounding set; as root the exec then
// leaves none), seccomp on.
func startStreamGuest(t testing.TB) *Client { return startGuest(t, "stream") }

// startGuest runs the guest on a pipe pair ("stream") or a Unix socket ("unix").
func startGuest(t testing.TB, channel string) *Client {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the contained guest wants an empty bounding set, which setpriv can only make as root")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv (util-linux) to start the guest without capabilities")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(setpriv, "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs", "--", self)
	cmd.Env = append(os.Environ(), streamGuestEnv+"="+channel)
	cmd.Stderr = os.Stderr
	var conn *proto.Conn
	if channel == "unix" {
		c, theirs, err := proto.Pair()
		if err != nil {
			t.Fatal(err)
		}
		conn, cmd.ExtraFiles = c, []*os.File{theirs}
	} else {
		host, gr, gw := streamPipes(t)
		conn, cmd.ExtraFiles = proto.StreamConn(host), []*os.File{gr, gw}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	proto.CloseFiles(cmd.ExtraFiles)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		conn.Close() // the guest sees EOF and exits
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			t.Error("the guest did not exit after its channel closed")
		}
	})
	in := &proto.Init{Hostname: "streamed", Workdir: t.TempDir(), Seccomp: true, Contained: true}
	if err := conn.Send(&proto.Msg{Op: proto.OpInit, Init: in}); err != nil {
		t.Fatal(err)
	}
	ready := make(chan *proto.Msg, 1)
	go func() {
		m, _, err := conn.Recv()
		if err != nil {
			m = &proto.Msg{Op: proto.OpError, Err: &proto.Error{Message: err.Error()}}
		}
		ready <- m
	}()
	select {
	case m := <-ready:
		if m.Op != proto.OpReady {
			t.Fatalf("guest setup: %s %v", m.Op, m.Err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the guest did not report ready")
	}
	return New(conn)
}

// collect gathers a stream-mode process's output.
type collect struct {
	mu       sync.Mutex
	out, err bytes.Buffer
}

func (c *collect) add(stream uint8, b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if stream == 2 {
		c.err.Write(b)
	} else {
		c.out.Write(b)
	}
}

func wait(t *testing.T, p *Process) *proto.Exit {
	t.Helper()
	type result struct {
		e   *proto.Exit
		err error
	}
	ch := make(chan result, 1)
	go func() { e, err := p.Wait(); ch <- result{e, err} }()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("Wait: %v", r.err)
		}
		return r.e
	case <-time.After(20 * time.Second):
		t.Fatal("Wait did not return")
	}
	return nil
}

// readUntil reads r until what it read contains want.
func readUntil(t *testing.T, r io.Reader, want string) string {
	t.Helper()
	got := make(chan string, 1)
	var seen bytes.Buffer
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			seen.Write(buf[:n])
			if strings.Contains(seen.String(), want) || err != nil {
				got <- seen.String()
				return
			}
		}
	}()
	select {
	case s := <-got:
		if !strings.Contains(s, want) {
			t.Fatalf("read %q, never %q", s, want)
		}
		return s
	case <-time.After(20 * time.Second):
		t.Fatalf("no %q within 20s", want)
	}
	return ""
}

func TestGuestOverAStream(t *testing.T) {
	c := startStreamGuest(t)
	before := runtime.NumGoroutine()
	defer func() { // every relay and pump ended with its process
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<20)
			t.Errorf("%d goroutines left over:\n%s", n-before, buf[:runtime.Stack(buf, true)])
		}
	}()

	t.Run("exit code, stdout and stderr", func(t *testing.T) {
		var o collect
		p, err := c.Exec(&proto.Exec{Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}}, o.add)
		if err != nil {
			t.Fatal(err)
		}
		if e := wait(t, p); e.Code != 3 || o.out.String() != "out\n" || o.err.String() != "err\n" {
			t.Fatalf("exit %+v, stdout %q, stderr %q", e, o.out.String(), o.err.String())
		}
	})

	t.Run("not found is 127", func(t *testing.T) {
		p, err := c.Exec(&proto.Exec{Argv: []string{"no-such-command-here"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if e := wait(t, p); e.Code != 127 || p.PID != 0 {
			t.Fatalf("exit %+v, pid %d", e, p.PID)
		}
	})

	t.Run("stdin", func(t *testing.T) {
		var o collect
		p, err := c.Exec(&proto.Exec{Argv: []string{"cat"}}, o.add)
		if err != nil {
			t.Fatal(err)
		}
		p.Write([]byte("hello "))
		p.Write([]byte("there"))
		p.CloseStdin()
		if e := wait(t, p); e.Code != 0 || o.out.String() != "hello there" {
			t.Fatalf("exit %+v, stdout %q", e, o.out.String())
		}
	})

	t.Run("signal", func(t *testing.T) {
		p, err := c.Exec(&proto.Exec{Argv: []string{"sleep", "100"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		p.Signal(syscall.SIGTERM)
		if e := wait(t, p); e.Code != 128+15 || e.Signal != 15 {
			t.Fatalf("exit %+v, want SIGTERM", e)
		}
	})

	t.Run("a TTY relays its pty: tty, resize, keys", func(t *testing.T) {
		p, err := c.Exec(&proto.Exec{Argv: []string{"sh", "-c", "tty; while :; do stty size; sleep 0.1; done"}, TTY: true, Rows: 24, Cols: 80}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if p.PTY == nil {
			t.Fatal("a TTY exec over a stream has no PTY")
		}
		defer p.PTY.Close()
		readUntil(t, p.PTY, "/dev/pts/")
		readUntil(t, p.PTY, "24 80")
		if err := pty.Setsize(p.PTY, &pty.Winsize{Rows: 33, Cols: 101}); err != nil { // as term.Resize does
			t.Fatal(err)
		}
		readUntil(t, p.PTY, "33 101")
		p.PTY.Write([]byte{3}) // ^C through the guest's line discipline
		if e := wait(t, p); e.Code != 128+2 {
			t.Fatalf("exit %+v, want SIGINT", e)
		}
		// After the exit the master reads to its end, as when the process's pty closes.
		done := make(chan error, 1)
		go func() { _, err := io.Copy(io.Discard, p.PTY); done <- err }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the PTY did not end after the exit")
		}
	})

	t.Run("a TTY's output stays readable after the exit", func(t *testing.T) {
		p, err := c.Exec(&proto.Exec{Argv: []string{"sh", "-c", "printf 'last words'"}, TTY: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer p.PTY.Close()
		if e := wait(t, p); e.Code != 0 {
			t.Fatalf("exit %+v", e)
		}
		b, _ := io.ReadAll(p.PTY) // ends with EIO
		if !strings.Contains(string(b), "last words") {
			t.Fatalf("PTY after exit read %q", b)
		}
	})

	t.Run("closing the PTY hangs the process up", func(t *testing.T) {
		p, err := c.Exec(&proto.Exec{Argv: []string{"sleep", "100"}, TTY: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		p.PTY.Close()
		if e := wait(t, p); e.Code != 128+1 {
			t.Fatalf("exit %+v, want SIGHUP", e)
		}
	})

	t.Run("StdioFDs from the host", func(t *testing.T) {
		inR, inW, _ := os.Pipe()
		outR, outW, _ := os.Pipe()
		errR, errW, _ := os.Pipe()
		defer func() { proto.CloseFiles([]*os.File{inR, inW, outR, outW, errR, errW}) }()
		inW.Write([]byte("from the host\n"))
		inW.Close()
		p, err := c.Exec(&proto.Exec{Argv: []string{"sh", "-c", "cat; echo e >&2; exit 5"}, Stdio: proto.StdioFDs}, nil, inR, outW, errW)
		if err != nil {
			t.Fatal(err)
		}
		if e := wait(t, p); e.Code != 5 {
			t.Fatalf("exit %+v", e)
		}
		outW.Close()
		errW.Close()
		out, _ := io.ReadAll(outR)
		serr, _ := io.ReadAll(errR)
		if string(out) != "from the host\n" || string(serr) != "e\n" {
			t.Fatalf("stdout %q, stderr %q", out, serr)
		}
	})

	t.Run("StdioFDs: a reader gone is a SIGPIPE", func(t *testing.T) {
		outR, outW, _ := os.Pipe()
		outR.Close()
		defer outW.Close()
		null, _ := os.Open(os.DevNull)
		defer null.Close()
		p, err := c.Exec(&proto.Exec{Argv: []string{"yes"}, Stdio: proto.StdioFDs}, nil, null, outW, os.Stderr)
		if err != nil {
			t.Fatal(err)
		}
		if e := wait(t, p); e.Code != 128+int(syscall.SIGPIPE) {
			t.Fatalf("exit %+v, want SIGPIPE", e)
		}
	})

	t.Run("StdioFDs ends with the process while stdin stays open", func(t *testing.T) {
		inR, inW, _ := os.Pipe()
		defer inR.Close()
		defer inW.Close()
		null, _ := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		defer null.Close()
		p, err := c.Exec(&proto.Exec{Argv: []string{"true"}, Stdio: proto.StdioFDs}, nil, inR, null, null)
		if err != nil {
			t.Fatal(err)
		}
		if e := wait(t, p); e.Code != 0 {
			t.Fatalf("exit %+v", e)
		}
		// The pump gave up its hold: what is written now stays for the next reader.
		inW.Write([]byte("x"))
		time.Sleep(50 * time.Millisecond)
		inR.SetReadDeadline(time.Now().Add(time.Second))
		if n, err := inR.Read(make([]byte, 1)); n != 1 {
			t.Fatalf("stdin after the exit: %d bytes, %v", n, err)
		}
	})

	t.Run("the guest refuses StdioFDs it cannot get", func(t *testing.T) {
		id, replies, err := c.router.Request(&proto.Msg{Op: proto.OpExec, Exec: &proto.Exec{Argv: []string{"true"}, Stdio: proto.StdioFDs}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.router.Done(id)
		if r := <-replies; r.Op != proto.OpError || !strings.Contains(r.Err.Error(), "descriptors") {
			t.Fatalf("reply %s %v, want an error about descriptors", r.Op, r.Err)
		}
	})

	t.Run("files", func(t *testing.T) {
		ctx := context.Background()
		if _, err := c.Call(ctx, &proto.Msg{Op: proto.OpWriteFile, Path: "note.txt", Data: []byte("over the stream"), Mode: 0o600}); err != nil {
			t.Fatal(err)
		}
		r, err := c.Call(ctx, &proto.Msg{Op: proto.OpReadFile, Path: "note.txt"})
		if err != nil || string(r.Data) != "over the stream" {
			t.Fatalf("read back %q, %v", r.Data, err)
		}
	})
}

// A guest that answers with garbage ends the session: requests and
// processes see ErrClosed, a relayed PTY ends, nothing hangs.
func TestGarbageFromTheGuestEndsTheSession(t *testing.T) {
	host, gr, gw := streamPipes(t)
	defer gr.Close()
	defer gw.Close()
	c := New(proto.StreamConn(host))
	defer c.router.Close()
	fake := proto.StreamConn(pipes{gr, gw})
	go func() {
		m, _, err := fake.Recv()
		if err != nil {
			return
		}
		fake.Send(&proto.Msg{ID: m.ID, Op: proto.OpStarted, PID: 7})
		fake.Send(&proto.Msg{ID: m.ID, Op: proto.OpOutput, Stream: 1, Data: []byte("before ")})
		gw.Write([]byte{0, 0, 0, 4, 0xde, 0xad, 0xbe, 0xef})
	}()
	p, err := c.Exec(&proto.Exec{Argv: []string{"sh"}, TTY: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.PTY.Close()
	done := make(chan error, 1)
	go func() { _, err := p.Wait(); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Wait = %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait hangs after garbage")
	}
	readUntil(t, p.PTY, "before ")
	if _, err := c.Call(context.Background(), &proto.Msg{Op: proto.OpStat, Path: "x"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Call after garbage = %v, want ErrClosed", err)
	}
	if err := c.router.Err(); err == nil || !strings.Contains(err.Error(), "decode") {
		t.Fatalf("the session ended with %v, want the decode error", err)
	}
	// The host closed its end: the guest's side reads EOF, so it ends too.
	gr.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, gr); err != nil {
		t.Fatalf("the guest's end after garbage: %v, want EOF", err)
	}
}

// An exec round trip (start `true`, wait for its exit) on the real guest,
// over a stream and over the Unix socket side by side.
func BenchmarkExecRoundTrip(b *testing.B) {
	for _, channel := range []string{"stream", "unix"} {
		b.Run(channel, func(b *testing.B) {
			c := startGuest(b, channel)
			for b.Loop() {
				p, err := c.Exec(&proto.Exec{Argv: []string{"/bin/true"}}, nil)
				if err != nil {
					b.Fatal(err)
				}
				if e, err := p.Wait(); err != nil || e.Code != 0 {
					b.Fatal(e, err)
				}
			}
		})
	}
}
