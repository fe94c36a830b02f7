package netstack

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/airlock-dev/airlock/internal/link"
)

// streamEndpoint is a link endpoint on a Stream link: Ethernet frames each
// preceded by a 4-byte big-endian length (link.StreamHeaderSize). One
// goroutine reads and delivers frames; writes are whole batches under one
// lock, so frames from different goroutines never interleave.
type streamEndpoint struct {
	// f is pollable: closing it wakes the reader and any blocked writer.
	f    *os.File
	mtu  uint32
	addr tcpip.LinkAddress

	mu       sync.Mutex
	attached bool
	started  bool
	wg       sync.WaitGroup

	wmu  sync.Mutex
	wbuf []byte
}

var _ stack.LinkEndpoint = (*streamEndpoint)(nil)

// maxWriteBuffer is the most a streamEndpoint keeps between writes; a
// batch larger than that is written from a buffer of its own.
const maxWriteBuffer = 256 << 10

// newStreamEndpoint takes f (closing it) for a descriptor of its own in
// nonblocking mode, so that Go's poller waits on it and Close interrupts.
func newStreamEndpoint(f *os.File, mtu uint32, addr tcpip.LinkAddress) (*streamEndpoint, error) {
	defer f.Close()
	if mtu == 0 {
		return nil, fmt.Errorf("a stream link needs an MTU to bound its frames")
	}
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup %s: %w", f.Name(), err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	return &streamEndpoint{f: os.NewFile(uintptr(fd), f.Name()), mtu: mtu, addr: addr}, nil
}

// shutdown closes the descriptor: the reader ends, and a write blocked on a
// peer that stopped reading returns (the queue's goroutine, which Destroy
// waits for, may be in one).
func (e *streamEndpoint) shutdown() { e.f.Close() }

func (e *streamEndpoint) Attach(d stack.NetworkDispatcher) {
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

// readLoop delivers frames until the descriptor fails or closes, or the
// peer announces a frame of a length no Ethernet frame at this MTU has;
// either way the link is closed in both directions.
func (e *streamEndpoint) readLoop(d stack.NetworkDispatcher) {
	defer e.wg.Done()
	defer e.shutdown()
	fr := link.NewFrameReader(e.f, int(e.mtu)+header.EthernetMinimumSize)
	for {
		frame, err := fr.Next()
		if err != nil {
			return
		}
		if len(frame) < header.EthernetMinimumSize {
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

// WritePackets writes the batch as one write of length-prefixed frames.
// The write blocks while the peer is not reading (back-pressure, not loss:
// a frame half-written cannot be dropped from a stream).
func (e *streamEndpoint) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	e.wmu.Lock()
	defer e.wmu.Unlock()
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

func (e *streamEndpoint) MTU() uint32                             { return e.mtu }
func (e *streamEndpoint) SetMTU(uint32)                           {}
func (e *streamEndpoint) MaxHeaderLength() uint16                 { return header.EthernetMinimumSize }
func (e *streamEndpoint) LinkAddress() tcpip.LinkAddress          { return e.addr }
func (e *streamEndpoint) SetLinkAddress(tcpip.LinkAddress)        {}
func (e *streamEndpoint) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareEther }
func (e *streamEndpoint) Wait()                                   { e.wg.Wait() }
func (e *streamEndpoint) Close()                                  { e.shutdown() }
func (e *streamEndpoint) SetOnCloseAction(func())                 {}

func (e *streamEndpoint) Capabilities() stack.LinkEndpointCapabilities {
	return stack.CapabilityResolutionRequired
}

func (e *streamEndpoint) IsAttached() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.attached
}

func (e *streamEndpoint) AddHeader(pkt *stack.PacketBuffer) {
	eth := header.Ethernet(pkt.LinkHeader().Push(header.EthernetMinimumSize))
	eth.Encode(&header.EthernetFields{
		SrcAddr: pkt.EgressRoute.LocalLinkAddress,
		DstAddr: pkt.EgressRoute.RemoteLinkAddress,
		Type:    pkt.NetworkProtocolNumber,
	})
}

func (e *streamEndpoint) ParseHeader(pkt *stack.PacketBuffer) bool {
	b, ok := pkt.LinkHeader().Consume(header.EthernetMinimumSize)
	if ok {
		pkt.NetworkProtocolNumber = header.Ethernet(b).Type()
	}
	return ok
}
