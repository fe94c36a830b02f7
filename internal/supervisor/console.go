package supervisor

import (
	"errors"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/control"
	"github.com/airlock-dev/airlock/internal/proto"
)

// A detached -t sandbox's console keeps what its command last wrote, so an
// attach can show the screen at once, and queues output to the attached
// client; both are bounded, so neither a command that floods its terminal
// nor a client that stops reading can grow the supervisor: the client is
// cut off instead (it may attach again), and the command never waits.
const (
	replayBytes   = 64 << 10
	attachQueue   = 64 // chunks of up to readChunk bytes
	readChunk     = 32 << 10
	consoleDrain  = 300 * time.Millisecond
	defaultRows   = 24
	defaultCols   = 80
	errFellBehind = "the terminal fell too far behind the command's output and was cut off: airlock attach again"
)

// console is a detached sandbox's terminal: the supervisor reads the
// command's pty all along (nothing stalls while nobody watches) and relays
// it to at most one attached client; a second attach is refused.
type console struct {
	mu      sync.Mutex
	master  *os.File // nil until the command starts
	signal  func(syscall.Signal) error
	ring    []byte // the last replayBytes of output
	wrapped bool   // ring lost its beginning
	att     *attachment
	exit    *proto.Exit // the command's, once it ended
	eof     chan struct{}
	// begun is closed once the command's terminal is there, or the
	// command is over: an attach right after run -d returns waits for it.
	begun     chan struct{}
	beginOnce sync.Once
}

// attachWait bounds how long an attach waits for the command to start.
const attachWait = 10 * time.Second

func newConsole() *console {
	return &console{eof: make(chan struct{}), begun: make(chan struct{})}
}

func (c *console) begin() { c.beginOnce.Do(func() { close(c.begun) }) }

// start takes the command's pty master and begins reading it.
func (c *console) start(master *os.File, signal func(syscall.Signal) error) {
	c.mu.Lock()
	c.master, c.signal = master, signal
	c.mu.Unlock()
	c.begin()
	go func() {
		buf := make([]byte, readChunk)
		for {
			n, err := master.Read(buf)
			if n > 0 {
				c.output(buf[:n])
			}
			if err != nil {
				close(c.eof)
				return
			}
		}
	}()
}

func (c *console) output(b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.ring)+len(b) > replayBytes {
		c.wrapped = true
		if len(b) >= replayBytes {
			c.ring = append(c.ring[:0], b[len(b)-replayBytes:]...)
		} else {
			drop := len(c.ring) + len(b) - replayBytes
			c.ring = append(c.ring[:0], c.ring[drop:]...)
			c.ring = append(c.ring, b...)
		}
	} else {
		c.ring = append(c.ring, b...)
	}
	if c.att != nil {
		c.att.send(append([]byte(nil), b...))
	}
}

// replay is what an attach shows first: the kept output, from a line's
// start when its beginning was lost (not in the middle of an escape).
func (c *console) replay() []byte {
	r := c.ring
	if c.wrapped {
		for i, ch := range r {
			if ch == '\n' {
				r = r[i+1:]
				break
			}
		}
	}
	return append([]byte(nil), r...)
}

// end is called once the command exited: its last output is read (for a
// moment: a background process may hold the pty), then the attached
// client gets the exit. drain false: airlock is ending it, no moment.
func (c *console) end(e *proto.Exit, drain bool) {
	if drain {
		select {
		case <-c.eof:
		case <-time.After(consoleDrain):
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.exit = e
	c.begin()
	if c.att != nil {
		c.att.finish(e, nil)
		c.att = nil
	}
}

// Attach implements control.Console.
func (c *console) Attach(rows, cols uint16) (*os.File, control.Attachment, error) {
	select {
	case <-c.begun:
	case <-time.After(attachWait):
	}
	f, a, err := c.attach()
	if err != nil {
		return nil, nil, err
	}
	c.redraw(rows, cols)
	return f, a, nil
}

func (c *console) attach() (*os.File, control.Attachment, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.exit != nil || c.master == nil {
		return nil, nil, control.ErrNoTerminal
	}
	if c.att != nil {
		return nil, nil, control.ErrAttached
	}
	fds, err := streamPair()
	if err != nil {
		return nil, nil, err
	}
	// Non-blocking, so the runtime polls it: Close ends a Write in progress.
	mine := os.NewFile(uintptr(fds[0]), "attach")
	theirs := os.NewFile(uintptr(fds[1]), "attach-client")
	a := &attachment{c: c, conn: mine, out: make(chan []byte, attachQueue), done: make(chan struct{})}
	c.att = a
	if r := c.replay(); len(r) > 0 {
		a.send(r)
	}
	go a.write()
	go a.read(c.master)
	// The stream's other end is sent blocking, as the client expects.
	unix.SetNonblock(fds[1], false)
	return theirs, a, nil
}

// redraw gives the command the client's size, changing it twice when it is
// the same: the size change (SIGWINCH) makes a full-screen program draw
// its screen again.
func (c *console) redraw(rows, cols uint16) {
	if rows == 0 || cols == 0 {
		rows, cols = defaultRows, defaultCols
	}
	if cur, err := pty.GetsizeFull(c.master); err == nil && cur.Rows == rows && cur.Cols == cols {
		pty.Setsize(c.master, &pty.Winsize{Rows: rows, Cols: cols - 1})
		time.Sleep(20 * time.Millisecond) // two changes close together may reach it as one
	}
	pty.Setsize(c.master, &pty.Winsize{Rows: rows, Cols: cols})
}

// attachment is one client's connection to the console.
type attachment struct {
	c    *console
	conn *os.File
	out  chan []byte

	once sync.Once
	done chan struct{}
	exit *proto.Exit
	err  error
}

// send queues b for the client, never waiting: a client that is that far
// behind is cut off. Called with c.mu held.
func (a *attachment) send(b []byte) {
	select {
	case <-a.done:
	case a.out <- b:
	default:
		a.c.att = nil
		a.finish(nil, errors.New(errFellBehind))
	}
}

// finish ends the attachment; called with c.mu held.
func (a *attachment) finish(e *proto.Exit, err error) {
	a.once.Do(func() {
		a.exit, a.err = e, err
		close(a.done)
		if e == nil { // cut off or gone: nothing more to send
			a.conn.Close()
		}
	})
}

// write relays the queued output; once the attachment ended with the
// command's exit, what was queued still goes, then the stream closes.
func (a *attachment) write() {
	for {
		select {
		case b := <-a.out:
			if _, err := a.conn.Write(b); err != nil {
				a.gone()
				return
			}
		case <-a.done:
			if a.exit != nil {
				a.conn.SetWriteDeadline(time.Now().Add(consoleDrain))
				for {
					select {
					case b := <-a.out:
						if _, err := a.conn.Write(b); err != nil {
							a.conn.Close()
							return
						}
						continue
					default:
					}
					break
				}
				a.conn.Close()
			}
			return
		}
	}
}

// read relays the client's keys to the command.
func (a *attachment) read(master *os.File) {
	buf := make([]byte, 4096)
	for {
		n, err := a.conn.Read(buf)
		if n > 0 {
			if _, werr := master.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			a.gone()
			return
		}
	}
}

// gone: the client went away.
func (a *attachment) gone() {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	if a.c.att == a {
		a.c.att = nil
	}
	a.finish(nil, errors.New("the client went away"))
}

func (a *attachment) Resize(rows, cols uint16) {
	if rows == 0 || cols == 0 {
		return
	}
	pty.Setsize(a.c.master, &pty.Winsize{Rows: rows, Cols: cols})
}

func (a *attachment) Signal(sig syscall.Signal) {
	a.c.mu.Lock()
	sigf := a.c.signal
	a.c.mu.Unlock()
	if sigf != nil {
		sigf(sig)
	}
}

func (a *attachment) Wait() (*proto.Exit, error) {
	<-a.done
	if a.exit != nil {
		// The output queued before the exit goes first.
		return a.exit, nil
	}
	return nil, a.err
}

func (a *attachment) Close() { a.gone() }
