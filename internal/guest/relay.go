package guest

import (
	"crypto/subtle"
	"errors"
	"io"
	"net"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/proto"
)

// startRelay listens inside the sandbox and hands every connection to the
// host's gateway through the Unix socket mounted at r.Socket. The sandbox's
// network namespace has no other way out, so this is the explicit door for
// clients that honour HTTP(S)_PROXY.
func startRelay(r *proto.Relay) error {
	ln, err := net.Listen("tcp", r.Listen)
	if err != nil {
		return err
	}
	if r.Back != "" {
		return startBackRelay(ln, r.Back, r.Token)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go handOver(c, r.Socket)
		}
	}()
	return nil
}

// handOver passes the accepted connection's descriptor to the gateway
// (SCM_RIGHTS, one byte with it) and lets go of it: the gateway then reads
// and writes the sandbox's TCP socket itself. Copying bytes between it and
// the Unix socket here cost a third of the CPU of a proxied download, and a
// process hop per request. (egress's handoverListener is the other end.)
func handOver(c net.Conn, socket string) {
	defer c.Close()
	up, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		return
	}
	defer up.Close()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return
	}
	raw.Control(func(fd uintptr) {
		up.WriteMsgUnix([]byte{0}, unix.UnixRights(int(fd)), nil)
	})
}

// Bounds of the back relay: idle connections the host may keep open, and
// how long a connection to the door waits for one.
const (
	maxBack  = 64
	backWait = 15 * time.Second
)

// startBackRelay joins every connection to the door ln to an idle one the
// host opened to back (see proto.Relay.Back). Anything inside may connect
// to back too: only a connection that opens with token (which only the
// plan carried) is taken for the host's.
func startBackRelay(ln net.Listener, back string, token []byte) error {
	if len(token) < 16 {
		ln.Close()
		return errors.New("the relay's back door has no token")
	}
	bl, err := net.Listen("tcp", back)
	if err != nil {
		ln.Close()
		return err
	}
	idle := make(chan net.Conn, maxBack)
	checking := make(chan struct{}, maxBack)
	go func() {
		for {
			c, err := bl.Accept()
			if err != nil {
				return
			}
			select {
			case checking <- struct{}{}:
			default:
				c.Close()
				continue
			}
			go func() {
				defer func() { <-checking }()
				c.SetReadDeadline(time.Now().Add(backWait))
				got := make([]byte, len(token))
				if _, err := io.ReadFull(c, got); err != nil || subtle.ConstantTimeCompare(got, token) != 1 {
					c.Close()
					return
				}
				c.SetReadDeadline(time.Time{})
				select {
				case idle <- c:
				default:
					c.Close()
				}
			}()
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go joinBack(c, idle)
		}
	}()
	return nil
}

// joinBack announces c on an idle back connection (one byte) and copies
// both ways until either side ends.
func joinBack(c net.Conn, idle <-chan net.Conn) {
	defer c.Close()
	t := time.NewTimer(backWait)
	defer t.Stop()
	var up net.Conn
	for up == nil {
		select {
		case b := <-idle:
			if _, err := b.Write([]byte{1}); err != nil {
				b.Close() // the host let it go: take the next
				continue
			}
			up = b
		case <-t.C:
			return
		}
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() {
		io.Copy(up, c)
		if tc, ok := up.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		done <- struct{}{}
	}()
	go func() {
		io.Copy(c, up)
		if tc, ok := c.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		done <- struct{}{}
	}()
	<-done
	<-done
}

// dialTimeout bounds a published port's connection to a server inside.
const dialTimeout = 5 * time.Second

// dial connects to the sandbox's own 127.0.0.1:port (or [::1]:port) for a published port
// (the host's listener took a connection) and hands the socket to the host,
// which then reads and writes it itself, as handOver does the other way.
// Only loopback: the sandbox's network namespace has nothing else here.
func (g *guest) dial(id uint32, port uint16) {
	if port == 0 {
		g.fail(id, "dial", errors.New("no port"))
		return
	}
	if !g.conn.PassesFiles() {
		g.fail(id, "dial", errors.New("a published port needs a channel that carries descriptors"))
		return
	}
	// IPv4 first, then IPv6: a server on "localhost" may have taken ::1
	// alone (Node's resolver puts it first).
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))), dialTimeout)
	if err != nil {
		c6, err6 := net.DialTimeout("tcp", net.JoinHostPort("::1", strconv.Itoa(int(port))), dialTimeout)
		if err6 != nil {
			g.fail(id, "dial", err)
			return
		}
		c = c6
	}
	defer c.Close()
	f, err := c.(*net.TCPConn).File()
	if err != nil {
		g.fail(id, "dial", err)
		return
	}
	defer f.Close()
	g.reply(&proto.Msg{ID: id, Op: proto.OpResult}, f)
}
