//go:build linux

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/airlock-dev/airlock/internal/testutil"
)

// ptySession is an airlock command on a pty of its own, as a user's
// terminal: everything it wrote is kept, and expect waits for text in what
// came after the last match.
type ptySession struct {
	t    *testing.T
	c    *exec.Cmd
	ptm  *os.File
	mu   sync.Mutex
	out  []byte
	from int // expect looks from here
	done chan struct{}
	read chan struct{} // the reader saw the pty's end
	code int
}

func (e *env) startPTY(rows, cols uint16, args ...string) *ptySession {
	e.t.Helper()
	c := e.cmd(args...)
	ptm, err := pty.StartWithSize(c, &pty.Winsize{Rows: rows, Cols: cols})
	if err != nil {
		e.t.Fatal(err)
	}
	s := &ptySession{t: e.t, c: c, ptm: ptm, done: make(chan struct{}), read: make(chan struct{})}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := ptm.Read(buf)
			s.mu.Lock()
			s.out = append(s.out, buf[:n]...)
			s.mu.Unlock()
			if err != nil {
				break
			}
		}
		close(s.read)
	}()
	go func() {
		err := c.Wait()
		s.code = 0
		if ee, ok := err.(*exec.ExitError); ok {
			s.code = ee.ExitCode()
		}
		close(s.done)
	}()
	e.t.Cleanup(func() {
		c.Process.Kill()
		<-s.done
		ptm.Close()
	})
	return s
}

func (s *ptySession) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.out)
}

// expect waits for want in what the session wrote since the last match.
func (s *ptySession) expect(want string) {
	s.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		i := strings.Index(string(s.out[s.from:]), want)
		if i >= 0 {
			s.from += i + len(want)
		}
		s.mu.Unlock()
		if i >= 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("no %q within 15s; the terminal showed %q", want, s.output())
}

func (s *ptySession) send(keys string) {
	if _, err := s.ptm.Write([]byte(keys)); err != nil {
		s.t.Fatalf("type %q: %v", keys, err)
	}
}

// exit waits for the command to end and returns its status.
func (s *ptySession) exit() int {
	s.t.Helper()
	select {
	case <-s.done:
		select { // what it wrote last is read
		case <-s.read:
		case <-time.After(2 * time.Second):
		}
		return s.code
	case <-time.After(15 * time.Second):
		s.t.Fatalf("still running after 15s; the terminal showed %q", s.output())
		return -1
	}
}

// echoTTY reads lines from its terminal and answers each, reports its size
// on SIGWINCH (and on "size"), says when SIGUSR1 came, and exits 7 on "quit".
const echoTTY = `
import os, signal, sys
def size(*_):
    r = os.get_terminal_size(0)
    print("size:%dx%d" % (r.lines, r.columns), flush=True)
signal.signal(signal.SIGWINCH, size)
signal.signal(signal.SIGUSR1, lambda *_: print("got-usr1", flush=True))
print("READY", flush=True)
for line in sys.stdin:
    line = line.strip()
    if line == "quit":
        sys.exit(7)
    if line == "size":
        size()
        continue
    print("got:" + line, flush=True)
`

func supervisorPID(t *testing.T, e *env, name string) int {
	t.Helper()
	var list []struct {
		Name string `json:"name"`
		PID  int    `json:"pid"`
	}
	r := e.run("ls", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("ls --json: %v (%v)", r, err)
	}
	for _, l := range list {
		if l.Name == name {
			return l.PID
		}
	}
	t.Fatalf("no sandbox %s in %v", name, r)
	return 0
}

func TestAttachToADetachedTerminal(t *testing.T) {
	e := newEnv(t)
	if r := e.run("run", "-q", "-t", "-d", "--name", "dev", "--", "python3", "-c", echoTTY); r.code != 0 {
		t.Fatalf("run -t -d: %v", r)
	}
	// The first attach sees what the command wrote before anyone looked,
	// and the command learns this terminal's size.
	a := e.startPTY(30, 100, "attach", "dev")
	a.expect("READY")
	a.send("size\r")
	a.expect("size:30x100")
	a.send("hello\r")
	a.expect("got:hello")
	// A resize of the user's terminal reaches the command.
	if err := pty.Setsize(a.ptm, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	a.expect("size:40x120")
	// A signal to airlock attach reaches the command.
	a.c.Process.Signal(syscall.SIGUSR1)
	a.expect("got-usr1")

	// A second terminal is refused while the first is attached, with one
	// line; the first goes on working.
	b := e.startPTY(24, 80, "attach", "dev")
	if code := b.exit(); code != 125 || !strings.Contains(b.output(), "already has a terminal attached") || strings.Count(strings.TrimSpace(b.output()), "\n") != 0 {
		t.Fatalf("second attach: exit %d, %q; want 125 and one line", code, b.output())
	}
	a.send("still-first\r")
	a.expect("got:still-first")

	// The detach keys leave the command running.
	a.send("marker-before-detach\r")
	a.expect("got:marker-before-detach")
	a.send("\x10\x11")
	if code := a.exit(); code != 0 || !strings.Contains(a.output(), "detached from dev") {
		t.Fatalf("detach: exit %d, %q", code, a.output())
	}
	if r := e.run("ls"); !strings.Contains(r.stdout, "running") {
		t.Fatalf("after detach: %v", r)
	}

	// Coming back shows the screen as it was, and the same size makes the
	// command redraw (its size changes and changes back).
	c := e.startPTY(40, 120, "attach", "--detach-keys", "ctrl-x,x", "dev")
	c.expect("got:marker-before-detach")
	c.expect("size:40x120")
	c.send("again\r")
	c.expect("got:again")
	// ctrl-p alone is a key like any other with other detach keys.
	c.send("\x10\x11x\r")
	c.expect("got:")
	c.send("\x18x")
	if code := c.exit(); code != 0 {
		t.Fatalf("detach with --detach-keys: exit %d, %q", code, c.output())
	}

	// A client killed mid-session wedges nothing: the next attach works.
	d := e.startPTY(40, 120, "attach", "dev")
	d.expect("size:40x120")
	d.c.Process.Signal(syscall.SIGKILL)
	d.exit()
	f := e.startPTY(40, 120, "attach", "dev")
	f.send("after-kill\r")
	f.expect("got:after-kill")
	// The command's exit ends attach with its status.
	f.send("quit\r")
	if code := f.exit(); code != 7 {
		t.Fatalf("attach after the command exited 7: exit %d, %q", code, f.output())
	}
	testutil.WaitFor(t, 10*time.Second, func() bool { return strings.Contains(e.run("ls").stdout, "exited (7)") })
}

func TestAttachBadInput(t *testing.T) {
	e := newEnv(t)
	if r := e.run("run", "-q", "-d", "--name", "plain", "--", "sleep", "100"); r.code != 0 {
		t.Fatalf("run -d: %v", r)
	}
	for name, args := range map[string][]string{
		"a sandbox without a terminal":  {"attach", "plain"},
		"detach keys that are no keys":  {"attach", "--detach-keys", "ctrl-1", "plain"},
		"a sandbox that does not exist": {"attach", "nosuch"},
	} {
		t.Run(name, func(t *testing.T) {
			s := e.startPTY(24, 80, args...)
			code := s.exit()
			out := strings.TrimSpace(s.output())
			if code != 125 || !strings.HasPrefix(out, "airlock: ") || strings.Count(out, "\n") > 1 {
				t.Fatalf("%v: exit %d, %q; want 125 and one line", args, code, out)
			}
		})
	}
	if r := e.run("attach", "plain"); r.code != 125 || !strings.Contains(r.stderr, "needs a terminal") {
		t.Fatalf("attach without a terminal: %v", r)
	}
	if r := e.run("run", "-q", "-t", "-d", "--detach-keys", "nokey", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, "detach") {
		t.Fatalf("run with bad --detach-keys: %v", r)
	}
}

// TestAttachBoundsMemory: a command flooding its terminal while the
// attached client has stopped reading grows neither the supervisor nor
// the queue: the client is cut off, the command never waits.
func TestAttachBoundsMemory(t *testing.T) {
	e := newEnv(t)
	flood := `read go; head -c 100000000 /dev/zero | tr '\0' x; echo; touch ` + filepath.Join(e.ws, "flooded") + `; read x`
	if r := e.run("run", "-q", "-t", "-d", "--name", "flood", "--", "sh", "-c", flood); r.code != 0 {
		t.Fatalf("run -t -d: %v", r)
	}
	pid := supervisorPID(t, e, "flood")
	a := e.startPTY(24, 80, "attach", "flood")
	time.Sleep(300 * time.Millisecond)
	a.send("go\r")
	time.Sleep(100 * time.Millisecond)
	a.c.Process.Signal(syscall.SIGSTOP) // a client that stops reading
	testutil.WaitFor(t, 60*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(e.ws, "flooded"))
		return err == nil
	})
	a.c.Process.Signal(syscall.SIGCONT)
	if code := a.exit(); code != 125 {
		t.Fatalf("a client that stopped reading: exit %d (want 125, cut off)", code)
	}
	if rss := vmRSS(t, pid); rss > 120<<20 {
		t.Fatalf("the supervisor's resident memory is %d MiB after 100 MB of output", rss>>20)
	} else {
		t.Logf("supervisor resident memory after 100 MB of output: %d MiB", rss>>20)
	}
	s := e.startPTY(24, 80, "attach", "flood")
	s.send("\r")
	s.exit()
}

func vmRSS(t *testing.T, pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestKillEndsAnAttach: airlock kill of a sandbox someone is attached to
// ends their attach with the killed command's status, not an error.
func TestKillEndsAnAttach(t *testing.T) {
	e := newEnv(t)
	if r := e.run("run", "-q", "-t", "-d", "--name", "k", "--", "sh", "-c", "echo UP; read x"); r.code != 0 {
		t.Fatalf("run -t -d: %v", r)
	}
	a := e.startPTY(24, 80, "attach", "k")
	a.expect("UP")
	if r := e.run("kill", "k"); r.code != 0 {
		t.Fatalf("kill: %v", r)
	}
	if code := a.exit(); code != 137 {
		t.Fatalf("attach after kill: exit %d, %q; want 137", code, a.output())
	}
}
