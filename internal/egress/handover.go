package egress

import (
	"errors"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The proxy door's socket takes no bytes: the guest's relay accepts each
// TCP connection inside the sandbox and sends its descriptor here (one byte
// with SCM_RIGHTS), and the front door serves that socket itself. Relayed
// through the guest, every byte crossed one more socket and process: a
// third of a proxied download's CPU, and a hop per request.
//
// The socket is mounted inside the sandbox, so anything in it may connect
// and send anything: what comes is accepted only as one TCP socket (the
// kernel's check, net.FileConn), within handoverTimeout, and at most
// maxHandovers wait at once.
const (
	handoverTimeout = 5 * time.Second
	maxHandovers    = 64
)

// handoverListener is a net.Listener of the connections handed over on ln.
type handoverListener struct {
	ln    *net.UnixListener
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func listenHandover(path string) (*handoverListener, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	l := &handoverListener{ln: ln, conns: make(chan net.Conn), done: make(chan struct{})}
	go l.acceptLoop()
	return l, nil
}

func (l *handoverListener) acceptLoop() {
	slots := make(chan struct{}, maxHandovers)
	pause := 5 * time.Millisecond
	for {
		u, err := l.ln.AcceptUnix()
		if err != nil {
			if !transient(err) {
				l.Close()
				return
			}
			// Out of descriptors (the sandbox may hold many connections
			// open): wait, as net/http does, rather than close the door.
			select {
			case <-time.After(pause):
			case <-l.done:
				return
			}
			pause = min(2*pause, time.Second)
			continue
		}
		pause = 5 * time.Millisecond
		select {
		case slots <- struct{}{}:
		case <-l.done:
			u.Close()
			return
		}
		go func() {
			defer func() { <-slots }()
			c, err := receiveConn(u)
			u.Close()
			if err != nil {
				return
			}
			select {
			case l.conns <- c:
			case <-l.done:
				c.Close()
			}
		}()
	}
}

// transient reports whether an accept failed for a reason that passes: a
// resource that comes back (descriptors, memory), a client that went
// away, a signal.
func transient(err error) bool {
	return errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) || errors.Is(err, unix.ENOBUFS) ||
		errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.ECONNABORTED) || errors.Is(err, unix.EINTR)
}

// receiveConn reads one handover from u: a TCP socket, or an error.
func receiveConn(u *net.UnixConn) (net.Conn, error) {
	u.SetReadDeadline(time.Now().Add(handoverTimeout))
	var b [1]byte
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, flags, _, err := u.ReadMsgUnix(b[:], oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range msgs {
			if got, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	if len(fds) != 1 || flags&unix.MSG_CTRUNC != 0 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, errors.New("handover: not one descriptor")
	}
	f := os.NewFile(uintptr(fds[0]), "handed over")
	defer f.Close()
	c, err := net.FileConn(f) // its own copy; fails for anything but a socket
	if err != nil {
		return nil, err
	}
	if _, ok := c.(*net.TCPConn); !ok {
		c.Close()
		return nil, errors.New("handover: not a TCP connection")
	}
	return c, nil
}

func (l *handoverListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoverListener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		err = l.ln.Close()
	})
	return err
}

func (l *handoverListener) Addr() net.Addr { return l.ln.Addr() }
