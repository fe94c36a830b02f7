package supervisor

import (
	"io"
	"os"
	"time"

	"github.com/creack/pty"
	"golang.org/x/term"
)

// ttyDrain bounds how long output is relayed after the process ended: a
// background process may keep the pty open.
const ttyDrain = 300 * time.Millisecond

// terminal is the user's side of a TTY session: raw mode on the user's
// terminal and two copy loops to and from the sandbox's pty master.
type terminal struct {
	in, out *os.File
	restore func()
}

// Size reports the user's terminal size, or 0x0 when stdin is no terminal.
func termSize(f *os.File) (rows, cols uint16) {
	if w, h, err := term.GetSize(int(f.Fd())); err == nil {
		return uint16(h), uint16(w)
	}
	return 0, 0
}

func openTerminal(in, out *os.File) *terminal {
	t := &terminal{in: in, out: out, restore: func() {}}
	if term.IsTerminal(int(in.Fd())) {
		if st, err := term.MakeRaw(int(in.Fd())); err == nil {
			t.restore = func() { term.Restore(int(in.Fd()), st) }
		}
	}
	return t
}

// relay copies between the user and the pty master until the master reports
// the other side closed; the returned func waits for output to drain.
func (t *terminal) relay(master *os.File) (drain func()) {
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
func (t *terminal) resize(master *os.File) {
	pty.InheritSize(t.in, master)
}
