package control

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/proto"
	"github.com/airlock-dev/airlock/internal/term"
)

// fakeProcess "runs" by writing to the stdout it was handed, then exits
// with code, unless signalled first.
type fakeProcess struct {
	code     int
	signals  chan syscall.Signal // every signal, as the test sees them
	killed   chan struct{}
	once     sync.Once
	finished chan struct{}
}

func (p *fakeProcess) Wait() (*proto.Exit, error) {
	select {
	case <-p.killed:
		return &proto.Exit{Code: 137, Signal: 9}, nil
	case <-p.finished:
		return &proto.Exit{Code: p.code}, nil
	}
}

func (p *fakeProcess) Signal(s syscall.Signal) error {
	p.signals <- s
	if s == syscall.SIGKILL {
		p.once.Do(func() { close(p.killed) })
	}
	return nil
}
func (p *fakeProcess) Write(b []byte) (int, error)      { return len(b), nil }
func (p *fakeProcess) CloseStdin() error                { return nil }
func (p *fakeProcess) Started() (pid int, pty *os.File) { return 42, nil }

type fakeTarget struct {
	mu    sync.Mutex
	argv  []string
	block bool          // the command runs until signalled
	hold  chan struct{} // if set, Exec returns once it is closed (a start under way)
	procs []*fakeProcess
}

func (t *fakeTarget) Exec(req *proto.Exec, _ func(uint8, []byte), files ...*os.File) (Process, error) {
	if t.hold != nil {
		<-t.hold
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.argv = req.Argv
	p := &fakeProcess{code: 7, signals: make(chan syscall.Signal, 8), killed: make(chan struct{}), finished: make(chan struct{})}
	if len(files) == 3 {
		io.WriteString(files[1], "out:"+req.Argv[0])
	}
	if !t.block {
		close(p.finished)
	}
	t.procs = append(t.procs, p)
	return p, nil
}

func (t *fakeTarget) Approvals() Approvals { return nil }

func (t *fakeTarget) Console() Console { return nil }

func (t *fakeTarget) Call(_ context.Context, m *proto.Msg) (*proto.Msg, error) {
	return nil, &proto.Error{Message: "no files here: " + m.Path}
}

func serve(t *testing.T, target Target, stop func(string)) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "ctl.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go Serve(ln, target, stop)
	return sock
}

func stdio(t *testing.T) (term.IO, *os.File) {
	t.Helper()
	in, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); r.Close(); w.Close() })
	return term.IO{Stdin: in, Stdout: w, Stderr: w}, r
}

func TestExecRunsOnTheTargetWithTheCallersStdioAndReturnsTheExitCode(t *testing.T) {
	target := &fakeTarget{}
	cl, err := Dial(serve(t, target, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	io, out := stdio(t)
	code, err := cl.Exec(&proto.Exec{Argv: []string{"make", "test"}}, io, nil)
	if err != nil || code != 7 {
		t.Fatalf("Exec = %d, %v; want the command's 7", code, err)
	}
	io.Stdout.Close()
	got := make([]byte, 64)
	n, _ := out.Read(got)
	if string(got[:n]) != "out:make" {
		t.Errorf("the command wrote %q to the caller's stdout, want out:make", got[:n])
	}
}

func TestKillAsksTheHostToStop(t *testing.T) {
	why := make(chan string, 1)
	cl, err := Dial(serve(t, &fakeTarget{}, func(w string) { why <- w }))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.Kill(); err != nil {
		t.Fatalf("Kill = %v", err)
	}
	select {
	case w := <-why:
		if w == "" {
			t.Error("stop called without a reason")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Kill never reached the host")
	}
}

func TestAClientThatGoesAwayTakesItsProcessesWithIt(t *testing.T) {
	target := &fakeTarget{block: true}
	sock := serve(t, target, nil)
	cl, err := Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		io, _ := stdio(t)
		cl.Exec(&proto.Exec{Argv: []string{"sleep"}}, io, nil)
		close(done)
	}()
	p := target.started(t)
	cl.Close()
	wantKilled(t, p, "the abandoned command")
	<-done
}

func TestAClientThatGoesAwayWhileItsCommandStartsTakesItWithIt(t *testing.T) {
	target := &fakeTarget{block: true, hold: make(chan struct{})}
	uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: serve(t, target, nil), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	c := proto.NewConn(uc)
	if err := c.Send(&proto.Msg{ID: 1, Op: proto.OpExec, Exec: &proto.Exec{Argv: []string{"sleep"}}}); err != nil {
		t.Fatal(err)
	}
	// The client goes away while the command starts (airlock exec ended by
	// a signal it had not caught yet): the server sees the end of the
	// stream and closes its side, which the client reads as EOF.
	uc.CloseWrite()
	uc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := c.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("the server did not end the connection: %v", err)
	}
	close(target.hold) // the start completes after the client is gone
	wantKilled(t, target.started(t), "the command started for a client that was gone")
}

// started waits for the target's one command to start and returns it.
func (t *fakeTarget) started(tb testing.TB) *fakeProcess {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		t.mu.Lock()
		if len(t.procs) == 1 {
			defer t.mu.Unlock()
			return t.procs[0]
		}
		t.mu.Unlock()
		if time.Now().After(deadline) {
			tb.Fatal("the command never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// wantKilled fails unless p's first signal, within 5 s, is SIGKILL.
func wantKilled(t *testing.T, p *fakeProcess, what string) {
	t.Helper()
	select {
	case s := <-p.signals:
		if s != syscall.SIGKILL {
			t.Errorf("%s got %v, want SIGKILL", what, s)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s was never killed", what)
	}
}

func TestDialingAStoppedSandboxSaysItIsNotRunning(t *testing.T) {
	_, err := Dial(filepath.Join(t.TempDir(), "gone.sock"))
	if !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Dial(no socket) = %v, want ErrNotRunning", err)
	}
}

func TestFileRequestsAreRelayedWithTheTargetsError(t *testing.T) {
	sock := serve(t, &fakeTarget{}, nil)
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	conn := proto.NewConn(c.(*net.UnixConn))
	defer conn.Close()
	if err := conn.Send(&proto.Msg{ID: 5, Op: proto.OpReadFile, Path: "/etc/x"}); err != nil {
		t.Fatal(err)
	}
	m, _, err := conn.Recv()
	if err != nil || m.ID != 5 || m.Op != proto.OpError || m.Err == nil || m.Err.Message != "no files here: /etc/x" {
		t.Fatalf("reply = %+v, %v; want the target's error for request 5", m, err)
	}
}
