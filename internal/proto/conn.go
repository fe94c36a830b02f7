package proto

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Conn sends and receives messages on a Unix stream socket, with attached
// descriptors, or on any byte stream without them (StreamConn: a VM's
// virtio-serial port). Send and Recv are each safe for concurrent use.
type Conn struct {
	uc *net.UnixConn      // nil on a plain stream
	rw io.ReadWriteCloser // the plain stream when uc is nil

	wmu sync.Mutex

	rmu  sync.Mutex
	rbuf bytes.Buffer
	fds  []int // received descriptors not yet claimed by a message, in order
	oob  []byte
	tmp  []byte
}

// NewConn wraps a connected Unix stream socket.
func NewConn(uc *net.UnixConn) *Conn {
	return &Conn{uc: uc, oob: make([]byte, unix.CmsgSpace(4*MaxFDs)), tmp: make([]byte, 64<<10)}
}

// StreamConn frames messages over a byte stream that cannot carry
// descriptors (a virtio-serial port, a pipe pair, a socket QEMU relays):
// Send refuses files with ErrNoFiles and Recv never yields any. rw.Write
// must write all or fail (as os.File and net.Conn do), and rw.Close must
// end a Read in progress: a net.Conn, or an *os.File the runtime polls
// (os.OpenFile of a char device, or a descriptor made non-blocking before
// os.NewFile).
func StreamConn(rw io.ReadWriteCloser) *Conn {
	return &Conn{rw: rw, tmp: make([]byte, 64<<10)}
}

// ErrNoFiles is returned when files are sent on a StreamConn.
var ErrNoFiles = errors.New("proto: this connection cannot carry descriptors")

// PassesFiles reports whether messages on c can carry descriptors.
func (c *Conn) PassesFiles() bool { return c.uc != nil }

// FileConn turns an inherited socket descriptor (e.g. fd 3 in the guest) into a Conn.
func FileConn(f *os.File) (*Conn, error) {
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("proto: socket from fd: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, errors.New("proto: descriptor is not a Unix socket")
	}
	return NewConn(uc), nil
}

// Pair returns two connected Conns' raw sockets: one Conn for this process and
// an *os.File to hand to a child.
func Pair() (*Conn, *os.File, error) {
	fds, err := socketpair()
	if err != nil {
		return nil, nil, fmt.Errorf("proto: socketpair: %w", err)
	}
	mine := os.NewFile(uintptr(fds[0]), "control")
	theirs := os.NewFile(uintptr(fds[1]), "control-guest")
	c, err := FileConn(mine)
	mine.Close()
	if err != nil {
		theirs.Close()
		return nil, nil, err
	}
	return c, theirs, nil
}

// Send writes m as one frame, attaching files (at most MaxFDs). The descriptors
// ride on the frame's first byte, so the receiver has them once it has the frame.
func (c *Conn) Send(m *Msg, files ...*os.File) error {
	if len(files) > MaxFDs {
		return fmt.Errorf("proto: send %s: %d descriptors (limit %d)", m.Op, len(files), MaxFDs)
	}
	if c.uc == nil && len(files) > 0 {
		return fmt.Errorf("proto: send %s with %d descriptors: %w", m.Op, len(files), ErrNoFiles)
	}
	m.NFDs = uint8(len(files))
	frame, err := Encode(m)
	if err != nil {
		return err
	}
	if c.uc == nil {
		c.wmu.Lock()
		defer c.wmu.Unlock()
		if _, err := c.rw.Write(frame); err != nil {
			return fmt.Errorf("proto: send %s: %w", m.Op, err)
		}
		return nil
	}
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	n, _, err := c.uc.WriteMsgUnix(frame, oob, nil)
	if err != nil {
		return fmt.Errorf("proto: send %s: %w", m.Op, err)
	}
	if n < len(frame) { // the rest goes without descriptors
		if _, err := c.uc.Write(frame[n:]); err != nil {
			return fmt.Errorf("proto: send %s: %w", m.Op, err)
		}
	}
	return nil
}

// Recv reads the next message and the descriptors it carries. It returns io.EOF
// when the peer closed cleanly between frames.
func (c *Conn) Recv() (*Msg, []*os.File, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for {
		if m, files, ok, err := c.next(); ok || err != nil {
			return m, files, err
		}
		n, oobn, err := c.read()
		if oobn > 0 {
			if perr := c.takeRights(c.oob[:oobn]); perr != nil {
				return nil, nil, perr
			}
		}
		c.rbuf.Write(c.tmp[:n])
		if err != nil {
			if n > 0 {
				continue
			}
			if errors.Is(err, io.EOF) {
				if c.rbuf.Len() > 0 {
					return nil, nil, io.ErrUnexpectedEOF
				}
				return nil, nil, io.EOF
			}
			return nil, nil, err
		}
		if n == 0 && oobn == 0 {
			if c.rbuf.Len() > 0 {
				return nil, nil, io.ErrUnexpectedEOF
			}
			return nil, nil, io.EOF
		}
	}
}

// read fills c.tmp (and c.oob on a socket) with what the peer sent next.
func (c *Conn) read() (n, oobn int, err error) {
	if c.uc == nil {
		for n == 0 && err == nil { // a Reader may return nothing; only an error ends the stream
			n, err = c.rw.Read(c.tmp)
		}
		return max(n, 0), 0, err
	}
	n, oobn, _, _, err = c.uc.ReadMsgUnix(c.tmp, c.oob)
	return max(n, 0), max(oobn, 0), err // negative on some errors
}

// next decodes one buffered frame if a whole one is there.
func (c *Conn) next() (*Msg, []*os.File, bool, error) {
	b := c.rbuf.Bytes()
	if len(b) < 4 {
		return nil, nil, false, nil
	}
	n := int(uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]))
	if n > MaxFrame {
		return nil, nil, false, fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, n)
	}
	if len(b) < 4+n {
		return nil, nil, false, nil
	}
	m, err := Decode(b[4 : 4+n])
	c.rbuf.Next(4 + n)
	if err != nil {
		return nil, nil, false, err
	}
	if int(m.NFDs) > len(c.fds) {
		return nil, nil, false, fmt.Errorf("proto: %s frame announces %d descriptors, %d arrived", m.Op, m.NFDs, len(c.fds))
	}
	files := make([]*os.File, m.NFDs)
	for i := range files {
		files[i] = os.NewFile(uintptr(c.fds[i]), fmt.Sprintf("fd-%d", c.fds[i]))
	}
	c.fds = c.fds[m.NFDs:]
	return m, files, true, nil
}

func (c *Conn) takeRights(oob []byte) error {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return fmt.Errorf("proto: control message: %w", err)
	}
	for _, cm := range msgs {
		fds, err := unix.ParseUnixRights(&cm)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
		}
		c.fds = append(c.fds, fds...)
		if len(c.fds) > 4*MaxFDs { // a peer flooding descriptors it never claims
			return errors.New("proto: too many unclaimed descriptors")
		}
	}
	return nil
}

// Close closes the socket and any descriptors received but never claimed.
func (c *Conn) Close() error {
	if c.uc == nil {
		return c.rw.Close()
	}
	err := c.uc.Close() // first, so a Recv blocked in read returns and frees rmu
	c.rmu.Lock()
	for _, fd := range c.fds {
		syscall.Close(fd)
	}
	c.fds = nil
	c.rmu.Unlock()
	return err
}

// CloseWrite half-closes the connection so the peer's Recv sees EOF. A
// stream must support it (a *net.UnixConn or *net.TCPConn does).
func (c *Conn) CloseWrite() error {
	if c.uc != nil {
		return c.uc.CloseWrite()
	}
	if cw, ok := c.rw.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("proto: this stream cannot be half-closed")
}

// CloseFiles closes descriptors that arrived with a message and are not needed.
func CloseFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}
