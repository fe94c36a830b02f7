package netstack

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/rawfile"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/airlock-dev/airlock/internal/link"
)

// sockEndpoint is the link endpoint on a VM's socket: a Datagram link (one
// frame per datagram) or a Stream link (each frame preceded by its length,
// link.StreamHeaderSize). It differs from fdbased, which the TAP device
// keeps, in three ways a socket needs:
//
//   - Writes wait for room instead of dropping. A TAP device takes every
//     frame; an AF_UNIX datagram socket queues ten by default
//     (net.unix.max_dgram_qlen), and fdbased drops on EAGAIN, so every
//     burst became retransmissions (0.3 MB/s at worst, measured). A frame
//     half-written to a stream cannot be dropped at all. Waiting moves the
//     queueing into the NIC's FIFO queue.
//   - Its reader can be stopped and waited for before the stack is
//     destroyed (see stop): Destroy waits for a link's goroutines while
//     holding the stack's lock, which a frame being delivered (one that
//     draws a reset, say) may need.
//   - A Stream link's frames are bounded: a length of zero or more than an
//     Ethernet frame at the MTU closes the link.
//
// One goroutine reads and delivers frames; each batch of writes is one
// system call under one lock, so frames never interleave.
type sockEndpoint struct {
	kind link.Kind
	// f is a duplicate of the link's descriptor in Go's poller: reads and
	// writes wait without a thread, and closing it interrupts them.
	f    *os.File
	rc   syscall.RawConn
	mtu  uint32
	addr tcpip.LinkAddress

	mu       sync.Mutex
	attached bool
	started  bool
	wg       sync.WaitGroup

	wmu  sync.Mutex
	wbuf []byte            // Stream: the batch, framed
	hdrs []rawfile.MMsgHdr // Datagram: the batch, one message per frame
}

var _ stack.LinkEndpoint = (*sockEndpoint)(nil)

// maxWriteBuffer is the most a Stream endpoint keeps between writes; a
// larger batch is framed in a buffer of its own.
const maxWriteBuffer = 256 << 10

// newSockEndpoint takes over f (closing it) for a Datagram or Stream link.
func newSockEndpoint(kind link.Kind, f *os.File, mtu uint32, addr tcpip.LinkAddress) (*sockEndpoint, error) {
	defer f.Close()
	if mtu == 0 {
		return nil, errors.New("a socket link needs an MTU to bound its frames")
	}
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	pf := os.NewFile(uintptr(fd), f.Name()) // nonblocking, so pollable
	rc, err := pf.SyscallConn()
	if err != nil {
		pf.Close()
		return nil, err
	}
	return &sockEndpoint{kind: kind, f: pf, rc: rc, mtu: mtu, addr: addr}, nil
}

// maxFrame is the longest Ethernet frame at the link's MTU.
func (e *sockEndpoint) maxFrame() int { return int(e.mtu) + header.EthernetMinimumSize }

// shutdown closes the descriptor: the reader ends, and a write waiting on a
// peer that stopped reading returns.
func (e *sockEndpoint) shutdown() { e.f.Close() }

// stop shuts the link down and waits for its reader, which may be
// delivering a frame; call it before the stack is destroyed.
func (e *sockEndpoint) stop() {
	e.shutdown()
	e.wg.Wait()
}

func (e *sockEndpoint) Attach(d stack.NetworkDispatcher) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if d == nil {
		e.attached = false
		e.shutdown()
		return
	}
	e.attached = true
	if !e.started {
		e.started = true
		e.wg.Add(1)
		go e.readLoop(d)
	}
}

// readLoop delivers frames until the descriptor closes or fails, or the
// peer breaks the framing; either way the link is then closed both ways.
func (e *sockEndpoint) readLoop(d stack.NetworkDispatcher) {
	defer e.wg.Done()
	defer e.shutdown()
	next := e.nextDatagram()
	if e.kind == link.Stream {
		next = link.NewFrameReader(e.f, e.maxFrame()).Next
	}
	for {
		frame, err := next()
		if err != nil {
			return
		}
		if len(frame) < header.EthernetMinimumSize || len(frame) > e.maxFrame() {
			continue
		}
		eth := header.Ethernet(frame)
		// As the fdbased link does: frames for this address or a group.
		if dst := eth.DestinationAddress(); dst != e.addr && dst[0]&1 == 0 {
			continue
		}
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(frame)})
		if _, ok := pkt.LinkHeader().Consume(header.EthernetMinimumSize); ok {
			pkt.NetworkProtocolNumber = eth.Type()
			d.DeliverNetworkPacket(eth.Type(), pkt)
		}
		pkt.DecRef()
	}
}

// nextDatagram returns a reader of one datagram per call, into a buffer one
// byte longer than the longest frame so that a longer one shows (and is
// dropped). A read of nothing ends the link: it is how a SEQPACKET peer's
// close reads, and an empty datagram carries no frame.
func (e *sockEndpoint) nextDatagram() func() ([]byte, error) {
	buf := make([]byte, e.maxFrame()+1)
	return func() ([]byte, error) {
		var n int
		var errno error
		err := e.rc.Read(func(fd uintptr) bool {
			n, errno = unix.Read(int(fd), buf)
			for errno == unix.EINTR {
				n, errno = unix.Read(int(fd), buf)
			}
			return errno != unix.EAGAIN
		})
		switch {
		case err != nil:
			return nil, err
		case errno != nil:
			return nil, errno
		case n <= 0:
			return nil, errors.New("end of link")
		}
		return buf[:n], nil
	}
}

func (e *sockEndpoint) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	if e.kind == link.Stream {
		return e.writeStream(pkts)
	}
	return e.writeDatagrams(pkts)
}

// writeStream writes the batch as one write of length-prefixed frames.
func (e *sockEndpoint) writeStream(pkts stack.PacketBufferList) (int, tcpip.Error) {
	b := e.wbuf[:0]
	for _, pkt := range pkts.AsSlice() {
		b = link.AppendStreamHeader(b, pkt.Size())
		for _, v := range pkt.AsSlices() {
			b = append(b, v...)
		}
	}
	if cap(b) <= maxWriteBuffer {
		e.wbuf = b
	}
	if _, err := e.f.Write(b); err != nil {
		e.shutdown() // a partial frame would desynchronise the peer
		return 0, &tcpip.ErrClosedForSend{}
	}
	return pkts.Len(), nil
}

// writeDatagrams sends the batch with sendmmsg, one datagram per frame.
func (e *sockEndpoint) writeDatagrams(pkts stack.PacketBufferList) (int, tcpip.Error) {
	hdrs := e.hdrs[:0]
	for _, pkt := range pkts.AsSlice() {
		var iov []unix.Iovec
		for _, v := range pkt.AsSlices() {
			iov = rawfile.AppendIovecFromBytes(iov, v, rawfile.MaxIovs)
		}
		var h rawfile.MMsgHdr
		h.Msg.Iov = &iov[0]
		h.Msg.SetIovlen(len(iov))
		hdrs = append(hdrs, h)
	}
	sent := 0
	var errno unix.Errno
	err := e.rc.Write(func(fd uintptr) bool {
		for sent < len(hdrs) {
			var n int
			n, errno = rawfile.NonBlockingSendMMsg(int(fd), hdrs[sent:])
			if errno == unix.EINTR {
				continue
			}
			if errno == unix.EAGAIN {
				return false // wait for room
			}
			if errno != 0 {
				return true
			}
			sent += n
		}
		return true
	})
	clear(hdrs) // keep no pointers into the packets
	e.hdrs = hdrs[:0]
	switch {
	case err != nil:
		return sent, &tcpip.ErrClosedForSend{}
	case errno != 0:
		return sent, tcpip.TranslateErrno(errno)
	}
	return sent, nil
}

func (e *sockEndpoint) MTU() uint32                             { return e.mtu }
func (e *sockEndpoint) SetMTU(uint32)                           {}
func (e *sockEndpoint) MaxHeaderLength() uint16                 { return header.EthernetMinimumSize }
func (e *sockEndpoint) LinkAddress() tcpip.LinkAddress          { return e.addr }
func (e *sockEndpoint) SetLinkAddress(tcpip.LinkAddress)        {}
func (e *sockEndpoint) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareEther }
func (e *sockEndpoint) Wait()                                   { e.wg.Wait() }
func (e *sockEndpoint) Close()                                  { e.shutdown() }
func (e *sockEndpoint) SetOnCloseAction(func())                 {}

func (e *sockEndpoint) Capabilities() stack.LinkEndpointCapabilities {
	return stack.CapabilityResolutionRequired
}

func (e *sockEndpoint) IsAttached() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.attached
}

func (e *sockEndpoint) AddHeader(pkt *stack.PacketBuffer) {
	eth := header.Ethernet(pkt.LinkHeader().Push(header.EthernetMinimumSize))
	eth.Encode(&header.EthernetFields{
		SrcAddr: pkt.EgressRoute.LocalLinkAddress,
		DstAddr: pkt.EgressRoute.RemoteLinkAddress,
		Type:    pkt.NetworkProtocolNumber,
	})
}

func (e *sockEndpoint) ParseHeader(pkt *stack.PacketBuffer) bool {
	b, ok := pkt.LinkHeader().Consume(header.EthernetMinimumSize)
	if ok {
		pkt.NetworkProtocolNumber = header.Ethernet(b).Type()
	}
	return ok
}
