package vfs

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// FUSE wire sizes. Messages are self-delimiting: the first u32 of both
// fuse_in_header (40 bytes) and fuse_out_header (16 bytes) is the total
// length, in the host's (and the guest's: same arch) byte order.
const (
	inHeaderSize  = 40
	outHeaderSize = 16
	// msgSlack covers a write request's headers above its data.
	msgSlack = 4096
	// MaxMessage is the largest message either side ever relays: a write
	// of the largest MaxWrite plus its headers.
	MaxMessage = MaxMaxWrite + msgSlack
	// MaxMaxWrite is the largest ServeOptions.MaxWrite.
	MaxMaxWrite = 1 << 20
	// DefaultMaxWrite is the write size negotiated with the guest kernel.
	DefaultMaxWrite = 128 << 10
	// DefaultMaxInFlight bounds the requests the host holds at once.
	DefaultMaxInFlight = 64
)

// FUSE opcodes the relay must tell apart: these get no reply.
const (
	opForget      = 2
	opGetxattr    = 22
	opListxattr   = 23
	opInit        = 26
	opRead        = 15
	opReaddir     = 28
	opIoctl       = 39
	opReaddirplus = 44
	opInterrupt   = 36
	opNotifyReply = 41
	opBatchForget = 42
)

// ErrBadMessage is returned when a stream carries something that is not a
// FUSE message of an allowed size; the session ends.
var ErrBadMessage = errors.New("vfs: bad FUSE message on the stream")

var discardLogger = log.New(io.Discard, "", 0)

// ServeOptions tune ServeStream.
type ServeOptions struct {
	// MaxWrite is the largest write the guest kernel may send (default
	// DefaultMaxWrite, at most MaxMaxWrite). A message longer than
	// MaxWrite plus 4 KiB of headers ends the session.
	MaxWrite int
	// MaxInFlight bounds requests read from the guest and not yet
	// answered (default DefaultMaxInFlight): past it the host stops
	// reading the port, so a flooding guest only fills its own queue.
	MaxInFlight int
	// CacheTimeout is how long the guest kernel may cache names and
	// attributes (0: one second; negative: not at all). Changes made on the
	// host behind the guest's back show after at most this long.
	CacheTimeout time.Duration
	// Owner, if set, is shown as every file's owner and chown is ignored:
	// the host files keep the host user's ownership.
	Owner *Owner
	// Debug, if set, gets go-fuse's per-request trace.
	Debug func(format string, args ...any)
}

func (o *ServeOptions) defaults() error {
	if o.MaxWrite == 0 {
		o.MaxWrite = DefaultMaxWrite
	}
	if o.MaxWrite < 4096 || o.MaxWrite > MaxMaxWrite {
		return fmt.Errorf("vfs: MaxWrite %d outside 4 KiB..%d", o.MaxWrite, MaxMaxWrite)
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	return nil
}

// splitter cuts a byte stream into FUSE messages by their length field.
type splitter struct {
	r        *bufio.Reader
	min, max int
	buf      []byte
}

func newSplitter(r io.Reader, min, max int) *splitter {
	return &splitter{r: bufio.NewReaderSize(r, 64<<10), min: min, max: max, buf: make([]byte, max)}
}

// next returns the next message, valid until the following call. io.EOF
// means the stream ended between messages; anything malformed is
// ErrBadMessage, a stream cut inside a message io.ErrUnexpectedEOF.
func (s *splitter) next() ([]byte, error) {
	if _, err := io.ReadFull(s.r, s.buf[:4]); err != nil {
		return nil, err
	}
	n := int(binary.NativeEndian.Uint32(s.buf[:4]))
	if n < s.min || n > s.max {
		return nil, fmt.Errorf("%w: length %d outside %d..%d", ErrBadMessage, n, s.min, s.max)
	}
	if _, err := io.ReadFull(s.r, s.buf[4:n]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return s.buf[:n], nil
}

// session is one ServeStream.
type session struct {
	port    io.ReadWriteCloser
	fd      int // our end of the SOCK_SEQPACKET pair go-fuse serves
	srv     int // a dup of go-fuse's end, to set its socket options
	served  chan struct{}
	maxMsg  int
	slots   chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	pending map[uint64]bool
	err     error
	once    sync.Once
	waking  sync.WaitGroup // stopServer's waker, which writes to fd
}

// fail ends the session, keeping the first error.
func (s *session) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	s.once.Do(func() {
		close(s.done)
		hangUpPort(s.port)
		s.stopServer()
	})
}

// hangUpPort ends the port so that no read or write on it stays blocked.
// Close alone does not: on a descriptor outside the runtime's poller (a
// blocking socket such as a chardev handed over as is) it only marks the
// file closed and leaves a Read already in read(2) waiting for data that,
// from a guest that closed its side of a virtio port while QEMU keeps the
// socket, never comes; and ServeStream waits for that reader. Whether the
// reader was inside read(2) yet when Close came is a race, which load
// decides. shutdown(2) wakes it either way.
func hangUpPort(port io.Closer) {
	if sc, ok := port.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			raw.Control(func(fd uintptr) { unix.Shutdown(int(fd), unix.SHUT_RDWR) })
		}
	}
	port.Close()
}

// stopServer makes go-fuse's readers return an error, which ends Serve
// quietly (an end of stream would make each reader log a "short read" on
// the process-wide logger): reads on both ends time out from now on, and
// harmless INTERRUPTs of no request wake the readers already blocked
// until Serve has returned (served closes).
func (s *session) stopServer() {
	tv := unix.NsecToTimeval(int64(time.Millisecond))
	for _, fd := range []int{s.srv, s.fd} {
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	}
	wake := make([]byte, inHeaderSize+8)
	binary.NativeEndian.PutUint32(wake[0:], uint32(len(wake)))
	binary.NativeEndian.PutUint32(wake[4:], opInterrupt)
	binary.NativeEndian.PutUint64(wake[8:], 1<<63)
	s.waking.Add(1)
	go func() {
		defer s.waking.Done()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			for range 4 {
				unix.SendmsgN(s.fd, wake, nil, nil, unix.MSG_DONTWAIT)
			}
			select {
			case <-s.served:
				return
			case <-t.C:
			}
		}
	}()
}

// ServeStream serves root to a guest whose /dev/fuse byte stream is port
// (guest→host: requests; host→guest: replies and notifications) until the
// guest closes the port, ctx ends or the stream goes wrong. It returns nil
// when the guest closed the stream between messages. port is closed on
// return. The guest kernel does the path walk and permission checks
// (default_permissions); every path the provider sees stays in it.
func ServeStream(ctx context.Context, port io.ReadWriteCloser, root Provider, o ServeOptions) error {
	defer port.Close()
	if err := o.defaults(); err != nil {
		return err
	}
	raw, err := nodeFS(root, o)
	if err != nil {
		return fmt.Errorf("vfs: root: %w", err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("vfs: socketpair: %w", err)
	}
	maxMsg := o.MaxWrite + msgSlack
	for _, fd := range fds {
		if err := bufSizes(fd, 2*maxMsg); err != nil {
			unix.Close(fds[0])
			unix.Close(fds[1])
			return err
		}
	}
	srvDup, err := unix.FcntlInt(uintptr(fds[1]), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return err
	}
	defer unix.Close(srvDup)
	s := &session{port: port, fd: fds[0], srv: srvDup, maxMsg: maxMsg, slots: make(chan struct{}, o.MaxInFlight),
		done: make(chan struct{}), served: make(chan struct{}), pending: map[uint64]bool{}}
	defer unix.Close(fds[0])

	var pumps sync.WaitGroup
	pumps.Add(3)
	go func() {
		defer pumps.Done()
		select {
		case <-ctx.Done():
			s.fail(ctx.Err())
		case <-s.done:
		}
	}()
	go func() { defer pumps.Done(); s.fail(s.toServer()) }()
	go func() { defer pumps.Done(); s.fail(s.toGuest()) }()

	logger := discardLogger
	if o.Debug != nil {
		logger = log.New(logfWriter(o.Debug), "", 0)
	}
	mo := &fuse.MountOptions{
		MaxWrite:                o.MaxWrite,
		MaxBackground:           o.MaxInFlight / 2,
		MaxInflightRequestBytes: o.MaxInFlight * maxMsg,
		DisableSplice:           true, // a socket, not /dev/fuse
		DisableXAttrs:           true, // providers have none; the guest must not set overlay.* on an upper
		Name:                    "airlock",
		Logger:                  logger,
		Debug:                   o.Debug != nil,
		PanicHandler: func(v any) fuse.Status {
			// Only a malformed request gets here: end the session.
			go s.fail(fmt.Errorf("%w: handler panic: %v", ErrBadMessage, v))
			return fuse.EIO
		},
	}
	// go-fuse owns fds[1] from here ("/dev/fd/N": already open, no mount).
	srv, err := fuse.NewServer(raw, fmt.Sprintf("/dev/fd/%d", fds[1]), mo)
	if err != nil {
		s.fail(fmt.Errorf("vfs: FUSE init: %w", err))
	} else {
		srv.Serve()
		s.fail(nil)
	}
	close(s.served)
	// fd is closed on return and its number may go to the next socket the
	// process opens: the waker must be done writing to it by then.
	s.waking.Wait()
	pumps.Wait()
	if errors.Is(s.err, io.EOF) {
		return nil
	}
	return s.err
}

// bufSizes lets one socket queue hold two of the largest messages (a
// SOCK_SEQPACKET message must fit in the send buffer whole).
func bufSizes(fd, n int) error {
	for _, opt := range [][2]int{{unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}, {unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}} {
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt[0], n) != nil {
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt[1], n)
		}
	}
	got, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF)
	if err != nil {
		return err
	}
	if got < n/2+msgSlack { // the kernel doubles what it is given
		return fmt.Errorf("vfs: socket buffer %d too small for messages of %d bytes (lower MaxWrite or raise net.core.wmem_max)", got, n/2)
	}
	return nil
}

// expectsReply reports whether a request opcode gets an answer.
func expectsReply(op uint32) bool {
	switch op {
	case opForget, opBatchForget, opInterrupt, opNotifyReply:
		return false
	}
	return true
}

// toServer moves guest requests to go-fuse, at most MaxInFlight unanswered.
func (s *session) toServer() error {
	sp := newSplitter(s.port, inHeaderSize, s.maxMsg)
	for first := true; ; first = false {
		msg, err := sp.next()
		if errors.Is(err, syscall.ECONNRESET) {
			err = io.EOF // the guest went away with replies unread: the usual end, as on write
		}
		if err != nil {
			return err
		}
		op := binary.NativeEndian.Uint32(msg[4:8])
		// go-fuse takes whatever comes first as the handshake.
		if first != (op == opInit) {
			return fmt.Errorf("%w: opcode %d where INIT must be first and only", ErrBadMessage, op)
		}
		unique := binary.NativeEndian.Uint64(msg[8:16])
		if err := s.checkReplySize(op, msg[inHeaderSize:]); err != nil {
			return err
		}
		if expectsReply(op) {
			select {
			case s.slots <- struct{}{}:
			case <-s.done:
				return nil
			}
			s.mu.Lock()
			dup := unique == 0 || s.pending[unique]
			s.pending[unique] = true
			s.mu.Unlock()
			if dup {
				return fmt.Errorf("%w: request id %d reused", ErrBadMessage, unique)
			}
		}
		if err := writeMsg(s.fd, msg); err != nil {
			return err
		}
	}
}

// checkReplySize refuses requests that name the size of their reply
// beyond what the kernel ever asks (MaxWrite): go-fuse allocates that
// buffer before anything else, so a READ of 4 GiB would cost the host
// 4 GiB.
func (s *session) checkReplySize(op uint32, body []byte) error {
	var at int
	switch op {
	case opRead, opReaddir, opReaddirplus:
		at = 16 // fuse_read_in.size
	case opGetxattr, opListxattr:
		at = 0 // fuse_getxattr_in.size
	case opIoctl:
		at = 28 // fuse_ioctl_in.out_size
	default:
		return nil
	}
	if len(body) < at+4 {
		return fmt.Errorf("%w: opcode %d without its arguments", ErrBadMessage, op)
	}
	if n := binary.NativeEndian.Uint32(body[at:]); int64(n) > int64(s.maxMsg) {
		return fmt.Errorf("%w: opcode %d asks for a %d-byte reply", ErrBadMessage, op, n)
	}
	return nil
}

// toGuest moves go-fuse's replies and notifications to the guest.
func (s *session) toGuest() error {
	buf := make([]byte, s.maxMsg+msgSlack)
	for {
		n, _, flags, _, err := unix.Recvmsg(s.fd, buf, nil, 0)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			select {
			case <-s.done:
				return nil
			default: // a reply is being written: wait on
				continue
			}
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.EOF
		}
		if flags&unix.MSG_TRUNC != 0 || n < outHeaderSize || int(binary.NativeEndian.Uint32(buf[:4])) != n {
			return fmt.Errorf("vfs: bad reply from the FUSE server (%d bytes)", n)
		}
		if unique := binary.NativeEndian.Uint64(buf[8:16]); unique != 0 {
			s.mu.Lock()
			if s.pending[unique] {
				delete(s.pending, unique)
				<-s.slots
			}
			s.mu.Unlock()
		}
		if _, err := s.port.Write(buf[:n]); err != nil {
			if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
				return io.EOF // the guest went away: the usual end
			}
			return err
		}
	}
}

// writeMsg writes one whole message to a packet socket or /dev/fuse.
func writeMsg(fd int, msg []byte) error {
	for {
		n, err := unix.Write(fd, msg)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n != len(msg) {
			return io.ErrShortWrite
		}
		return nil
	}
}

type logfWriter func(string, ...any)

func (f logfWriter) Write(p []byte) (int, error) { f("%s", p); return len(p), nil }

// GuestRelay pumps FUSE messages between the guest kernel's /dev/fuse
// (fuseDev) and the port to the host, holding no file system logic: one
// request per read from /dev/fuse goes to the port as is; the port's stream
// is cut at each message's length and written to /dev/fuse one message per
// write. Messages longer than MaxMessage end the relay. It returns nil when
// the file system is unmounted (ENODEV) or the host closes the port between
// messages. The caller closes fuseDev afterwards, which aborts a mount the
// host no longer serves.
func GuestRelay(fuseDev *os.File, port io.ReadWriter) error {
	errc := make(chan error, 2)
	go func() {
		buf := make([]byte, MaxMessage)
		for {
			n, err := fuseDev.Read(buf)
			switch {
			case errors.Is(err, syscall.ENODEV) || err == io.EOF:
				errc <- nil
				return
			case errors.Is(err, syscall.EINTR), errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.EAGAIN):
				continue
			case err != nil:
				errc <- fmt.Errorf("vfs: read /dev/fuse: %w", err)
				return
			}
			if _, err := port.Write(buf[:n]); err != nil {
				errc <- fmt.Errorf("vfs: write to host: %w", err)
				return
			}
		}
	}()
	go func() {
		sp := newSplitter(port, outHeaderSize, MaxMessage)
		for {
			msg, err := sp.next()
			if err == io.EOF {
				errc <- nil
				return
			}
			if err != nil {
				errc <- fmt.Errorf("vfs: from host: %w", err)
				return
			}
			// ENOENT: the request was interrupted and is gone; fine.
			if _, err := fuseDev.Write(msg); err != nil && !errors.Is(err, syscall.ENOENT) {
				if errors.Is(err, syscall.ENODEV) {
					errc <- nil
				} else {
					errc <- fmt.Errorf("vfs: write /dev/fuse: %w", err)
				}
				return
			}
		}
	}()
	return <-errc
}

// MountFUSE mounts a FUSE file system at target (in the guest, as root)
// and returns its /dev/fuse for GuestRelay. Options: allow_other so the
// guest's unprivileged agent user can use a mount root made;
// default_permissions so the guest kernel checks modes against the
// attributes served (the host then sees only what the guest's own
// permission checks let through); nosuid and nodev so nothing served can
// gain privilege inside the guest.
func MountFUSE(target string) (*os.File, error) {
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/fuse: %w", err)
	}
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other,default_permissions", fd)
	if err := unix.Mount("airlock", target, "fuse.airlock", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("mount fuse on %s: %w", target, err)
	}
	return os.NewFile(uintptr(fd), "/dev/fuse"), nil
}
