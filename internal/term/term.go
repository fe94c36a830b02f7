// Package term is the user's side of a TTY session: raw mode on the user's
// terminal, relaying to and from a sandbox's pty, resizing, and the host's
// stdio and signals a foreground command gets.
package term

import (
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/creack/pty"
	xterm "golang.org/x/term"
)

// ttyDrain bounds how long output is relayed after the process ended: a
// background process may keep the pty open.
const ttyDrain = 300 * time.Millisecond

// Terminal is the user's side of a TTY session: raw mode on the user's
// terminal and two copy loops to and from the sandbox's pty master.
type Terminal struct {
	in, out *os.File
	restore func()
}

// Restore puts the user's terminal back as it was.
func (t *Terminal) Restore() {
	t.restore()
}

// Size reports the user's terminal size, or 0x0 when stdin is no terminal.
func Size(f *os.File) (rows, cols uint16) {
	if w, h, err := xterm.GetSize(int(f.Fd())); err == nil {
		return uint16(h), uint16(w)
	}
	return 0, 0
}

func Open(in, out *os.File) *Terminal {
	t := &Terminal{in: in, out: out, restore: func() {}}
	if xterm.IsTerminal(int(in.Fd())) {
		if st, err := xterm.MakeRaw(int(in.Fd())); err == nil {
			t.restore = func() { xterm.Restore(int(in.Fd()), st) }
		}
	}
	return t
}

// relay copies between the user and the pty master until the master reports
// the other side closed; the returned func waits for output to drain.
func (t *Terminal) Relay(master *os.File) (drain func()) {
	go io.Copy(master, t.in) // ends when the process exits and master is closed
	done := make(chan struct{})
	go func() {
		io.Copy(t.out, master)
		close(done)
	}()
	return func() {
		select {
		case <-done:
		case <-time.After(ttyDrain):
		}
	}
}

// resize copies the user's terminal size onto the pty.
func (t *Terminal) Resize(master *os.File) {
	pty.InheritSize(t.in, master)
}

// IO is a host process's own stdio, which a foreground command gets.
type IO struct {
	Stdin, Stdout, Stderr *os.File
}

// Forwarded are the signals passed on to a foreground command.
var Forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH}

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool { return xterm.IsTerminal(int(f.Fd())) }

// Printable keeps a sandbox-chosen string (a host name, a reason) from
// carrying terminal escapes onto the user's screen: control characters
// become '?'.
func Printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return '?'
		}
		return r
	}, s)
}
