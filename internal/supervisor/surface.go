package supervisor

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/term"
)

// keyFilter tells a human's key from what the terminal itself sends: the
// sandbox can write a query (cursor position, colours, title) whose answer
// the terminal types, and an answer holds letters ('g' in "rgb:...") that
// must not answer the prompt. A key is a read of one byte that is not an
// escape; a read of several (an answer, a paste) answers nothing, and
// after an escape nothing does for a moment (an answer's tail may come
// in a read of its own).
type keyFilter struct{ quietUntil time.Time }

const escapeQuiet = 300 * time.Millisecond

func (f *keyFilter) key(b []byte, now time.Time) (byte, bool) {
	if bytes.IndexByte(b, 0x1b) >= 0 {
		f.quietUntil = now.Add(escapeQuiet)
		return 0, false
	}
	if len(b) != 1 || now.Before(f.quietUntil) {
		return 0, false
	}
	return b[0], true
}

// lineSurface is the prompt of a run without -t: a line on stderr, keys
// read one at a time from the controlling terminal (never from the
// command's output, and only while a prompt is up: the rest of the time
// the terminal is the command's).
type lineSurface struct {
	tty, out *os.File
	k        chan byte
	wake     chan struct{}
	armed    atomic.Bool
	mu       sync.Mutex
	saved    *unix.Termios
}

// openLineSurface opens the controlling terminal for the prompt; nil
// when there is none this process can read without being stopped.
func openLineSurface(out *os.File) *lineSurface {
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil
	}
	// The runtime polls it (a character device): a read can be called off.
	if tty.SetReadDeadline(time.Time{}) != nil {
		tty.Close()
		return nil
	}
	l := &lineSurface{tty: tty, out: out, k: make(chan byte, 16), wake: make(chan struct{}, 1)}
	go l.read()
	return l
}

// foreground says whether this process may read the terminal: a
// background job that reads it is stopped (SIGTTIN).
func (l *lineSurface) foreground() bool {
	pg, err := unix.IoctlGetInt(int(l.tty.Fd()), unix.TIOCGPGRP)
	return err == nil && pg == syscall.Getpgrp()
}

func (l *lineSurface) read() {
	b := make([]byte, 256)
	var f keyFilter
	for range l.wake {
		for l.armed.Load() {
			l.tty.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			n, err := l.tty.Read(b)
			if k, ok := f.key(b[:n], time.Now()); n > 0 && ok && l.armed.Load() {
				select {
				case l.k <- k:
				default:
				}
			}
			if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				return
			}
		}
	}
}

func (l *lineSurface) show(text string) {
	fmt.Fprintf(l.out, "\r\n%s", text)
	if !l.foreground() {
		fmt.Fprint(l.out, "(in the background: answer with airlock approvals)\r\n")
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.armed.Load() {
		return
	}
	fd := int(l.tty.Fd())
	if st, err := unix.IoctlGetTermios(fd, ioctlGetTermios); err == nil {
		saved := *st
		l.saved = &saved
		// One key answers: no line editing, no echo; ^C stays a signal.
		st.Lflag &^= unix.ICANON | unix.ECHO
		st.Cc[unix.VMIN], st.Cc[unix.VTIME] = 1, 0
		unix.IoctlSetTermios(fd, ioctlSetTermios, st)
	}
	// What was typed before the question cannot answer it.
	flushInput(fd)
	l.armed.Store(true)
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *lineSurface) hide() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.armed.Load() {
		return
	}
	l.armed.Store(false)
	if l.saved != nil {
		unix.IoctlSetTermios(int(l.tty.Fd()), ioctlSetTermios, l.saved)
		l.saved = nil
	}
	fmt.Fprint(l.out, "\r\n")
}

func (l *lineSurface) note(text string) {
	if text != "" {
		fmt.Fprintf(l.out, "%s\r\n", text)
	}
}

func (l *lineSurface) keys() <-chan byte       { return l.k }
func (l *lineSurface) opened() <-chan struct{} { return nil }
func (l *lineSurface) width() int              { return 0 }

// close gives the terminal back as it was.
func (l *lineSurface) close() {
	l.hide()
	close(l.wake)
	l.tty.Close()
}

// maxHeld bounds the command's output held back while the prompt covers
// its screen; past it the rest is dropped (the redraw after repaints a
// full-screen program's screen).
const maxHeld = 1 << 20

// statusSurface is the prompt of a -t run: the ask keys open it on the
// terminal's last row, over the command's screen; the command's output
// waits meanwhile, and the screen is given back after (a size change makes
// a full-screen program draw it again). It is also the relay between the
// user's terminal and the command's pty.
type statusSurface struct {
	in, out *os.File
	matcher *term.KeyMatcher
	k       chan byte
	open    chan struct{}
	up      atomic.Bool // the prompt takes the keys

	mu     sync.Mutex
	master *os.File
	paused bool
	held   []byte
	gen    int // which show a note's timer may hide
}

func newStatusSurface(in, out *os.File, askKeys []byte) *statusSurface {
	return &statusSurface{in: in, out: out, matcher: term.NewKeyMatcher(askKeys), k: make(chan byte, 16), open: make(chan struct{}, 1)}
}

// relay copies between the user's terminal and the pty master until the
// command is gone; the returned func waits (a moment) for the output.
func (s *statusSurface) relay(master *os.File) (drain func()) {
	s.mu.Lock()
	s.master = master
	s.mu.Unlock()
	go func() { // ends when the process exits and master is closed
		buf := make([]byte, 4096)
		var f keyFilter
		for {
			n, err := s.in.Read(buf)
			b := buf[:n]
			for len(b) > 0 {
				if s.up.Load() {
					if k, ok := f.key(b, time.Now()); ok {
						select {
						case s.k <- k:
						default:
						}
					}
					break
				}
				pass, seq, rest := s.matcher.Feed(b)
				if len(pass) > 0 {
					if _, err := master.Write(pass); err != nil {
						return
					}
				}
				if seq < 0 {
					break
				}
				select {
				case s.open <- struct{}{}:
				default:
				}
				time.Sleep(50 * time.Millisecond) // the prompt comes up: what follows is its
				b = rest
			}
			if err != nil {
				return
			}
		}
	}()
	done := make(chan struct{})
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := master.Read(buf)
			if n > 0 {
				s.mu.Lock()
				if !s.paused {
					s.out.Write(buf[:n])
				} else if len(s.held)+n <= maxHeld {
					s.held = append(s.held, buf[:n]...)
				}
				s.mu.Unlock()
			}
			if err != nil {
				close(done)
				return
			}
		}
	}()
	return func() {
		select {
		case <-done:
		case <-time.After(consoleDrain):
		}
		s.up.Store(false)
		s.mu.Lock()
		s.restore() // what the prompt held back, if it was up
		s.mu.Unlock()
	}
}

// row writes text on the last row, the cursor kept; called with mu held.
func (s *statusSurface) row(text string) {
	rows, cols := term.Size(s.in)
	if rows == 0 {
		rows, cols = defaultRows, defaultCols
	}
	fmt.Fprintf(s.out, "\x1b7\x1b[%s;1H\x1b[2K\x1b[7m%s\x1b[0m", strconv.Itoa(int(rows)), truncate(text, int(cols)-1))
}

func (s *statusSurface) show(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	s.paused = true
	s.row(text)
	s.up.Store(true)
}

func (s *statusSurface) hide() {
	s.up.Store(false)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	s.restore()
}

// restore clears the row, puts the cursor back, lets the held output out
// and has the command redraw; called with mu held.
func (s *statusSurface) restore() {
	if !s.paused {
		return
	}
	rows, _ := term.Size(s.in)
	if rows == 0 {
		rows = defaultRows
	}
	fmt.Fprintf(s.out, "\x1b[%d;1H\x1b[2K\x1b8", rows)
	s.out.Write(s.held)
	s.held, s.paused = nil, false
	if m := s.master; m != nil {
		go func() {
			if ws, err := pty.GetsizeFull(m); err == nil && ws.Cols > 1 {
				pty.Setsize(m, &pty.Winsize{Rows: ws.Rows, Cols: ws.Cols - 1})
				time.Sleep(20 * time.Millisecond)
				pty.Setsize(m, ws)
			}
		}()
	}
}

// note shows text on the row for a moment (a bell alone for ""), unless
// the prompt is up.
func (s *statusSurface) note(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.up.Load() {
		return
	}
	if text == "" {
		if !s.paused {
			s.out.Write([]byte{'\a'})
		}
		return
	}
	// The output goes on meanwhile (a note is not worth holding it back,
	// and may be written over); its row is cleared after a moment.
	s.gen++
	gen := s.gen
	s.row(text)
	fmt.Fprint(s.out, "\x1b8")
	time.AfterFunc(2*time.Second, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.gen == gen && !s.paused {
			rows, _ := term.Size(s.in)
			if rows == 0 {
				rows = defaultRows
			}
			fmt.Fprintf(s.out, "\x1b7\x1b[%d;1H\x1b[2K\x1b8", rows)
		}
	})
}

func (s *statusSurface) keys() <-chan byte       { return s.k }
func (s *statusSurface) opened() <-chan struct{} { return s.open }
func (s *statusSurface) width() int {
	_, cols := term.Size(s.in)
	if cols == 0 {
		cols = defaultCols
	}
	return int(cols) - 1
}
