// Package netstack is the host end of the sandbox's only network interface:
// a gVisor TCP/IP stack in the supervisor process that reads every frame the
// sandbox sends on its link (a TAP device, or a VM's socket: see package
// link). It accepts TCP connections to any address (promiscuous and
// spoofing) and hands each to the caller to decide before the handshake
// completes; it serves the caller's listeners on its own
// addresses (DNS); everything else — other UDP, ICMP, IPv6, ARP for
// strangers — goes nowhere, because no other protocol is registered.
package netstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/fdbased"
	"gvisor.dev/gvisor/pkg/tcpip/link/qdisc/fifo"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/airlock-dev/airlock/internal/link"
)

const (
	nicID = 1
	// maxPendingConnects bounds connection attempts being decided at once;
	// SYNs beyond it are dropped and the sandbox's TCP retries.
	maxPendingConnects = 256
	receiveWindow      = 1 << 20
)

// Config describes the link and what to do with traffic.
type Config struct {
	// Link carries the sandbox's Ethernet frames; the stack owns its
	// descriptor from now on and closes it on Close (or when New fails).
	Link link.Link
	// MTU is the link's IP MTU; a Stream link's frames may be at most
	// this plus an Ethernet header, and a longer one closes the link.
	MTU uint32
	// Addrs are the stack's own IPv4 addresses on the link (the sandbox's
	// default gateway, the DNS server): it answers ARP for them and the
	// caller's listeners bind to them.
	Addrs []netip.Addr
	// Connect decides a TCP connection the sandbox opened to dst, and
	// returns nil to refuse it (the sandbox sees a reset) or the function
	// that serves it once the handshake is complete.
	Connect func(ctx context.Context, dst netip.AddrPort) func(net.Conn)
	// DroppedUDP, if set, hears about each UDP datagram no listener took.
	DroppedUDP func(src, dst netip.AddrPort)
}

// Stack is a running network stack on one link.
type Stack struct {
	s *stack.Stack
	// stop, for a socket link, stops it before Destroy; file, for a TAP
	// link, is closed after Destroy (fdbased uses its number until then).
	stop   func()
	file   *os.File
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
}

// linkAddress is the stack's MAC address on every link.
var linkAddress = tcpip.LinkAddress([]byte{0x02, 0xa1, 0x10, 0xc0, 0x00, 0x01})

// newLink makes the link endpoint for l; on failure l.File is closed.
func newLink(l link.Link, mtu uint32) (ep stack.LinkEndpoint, st *Stack, err error) {
	if err := l.Validate(); err != nil {
		if l.File != nil {
			l.File.Close()
		}
		return nil, nil, err
	}
	if l.Kind != link.TAP {
		e, err := newSockEndpoint(l.Kind, l.File, mtu, linkAddress)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", l, err)
		}
		return e, &Stack{stop: e.stop}, nil
	}
	fd := int(l.File.Fd()) // the link reads and writes it with raw syscalls
	if err := unix.SetNonblock(fd, true); err != nil {
		l.File.Close()
		return nil, nil, fmt.Errorf("%s: %w", l, err)
	}
	e, err := fdbased.New(&fdbased.Options{FDs: []int{fd}, MTU: mtu, EthernetHeader: true, Address: linkAddress})
	if err != nil {
		l.File.Close()
		return nil, nil, fmt.Errorf("%s: %w", l, err)
	}
	return e, &Stack{file: l.File}, nil
}

// New starts the stack on cfg.Link.
func New(cfg Config) (*Stack, error) {
	if cfg.Connect == nil {
		if cfg.Link.File != nil {
			cfg.Link.File.Close()
		}
		return nil, errors.New("netstack: a Connect function is required")
	}
	ep, st, err := newLink(cfg.Link, cfg.MTU)
	if err != nil {
		return nil, fmt.Errorf("netstack: link: %w", err)
	}
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	ctx, cancel := context.WithCancel(context.Background())
	st.s, st.ctx, st.cancel = s, ctx, cancel
	fail := func(what string, e tcpip.Error) (*Stack, error) {
		st.Close()
		return nil, fmt.Errorf("netstack: %s: %s", what, e)
	}
	sack := tcpip.TCPSACKEnabled(true)
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &sack)
	moderate := tcpip.TCPModerateReceiveBufferOption(true)
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &moderate)
	// Handlers before the NIC: the link delivers frames from the moment the
	// NIC exists, and the stack does not synchronise installing a handler
	// with delivering to it (the race detector caught an early SYN).
	fwd := tcp.NewForwarder(s, receiveWindow, maxPendingConnects, func(r *tcp.ForwarderRequest) {
		id := r.ID()
		serve := cfg.Connect(ctx, addrPort(id.LocalAddress, id.LocalPort))
		if serve == nil {
			r.Complete(true)
			return
		}
		var wq waiter.Queue
		ep, e := r.CreateEndpoint(&wq)
		if e != nil {
			r.Complete(true)
			return
		}
		r.Complete(false)
		serve(gonet.NewTCPConn(&wq, ep))
	})
	s.SetTransportProtocolHandler(tcp.ProtocolNumber, fwd.HandlePacket)
	s.SetTransportProtocolHandler(udp.ProtocolNumber, func(id stack.TransportEndpointID, _ *stack.PacketBuffer) bool {
		if cfg.DroppedUDP != nil {
			cfg.DroppedUDP(addrPort(id.RemoteAddress, id.RemotePort), addrPort(id.LocalAddress, id.LocalPort))
		}
		return true
	})
	// Frames toward the sandbox are written by a queue's own goroutine, not
	// by whichever goroutine wrote the data (an HTTP/2 frame writer is a new
	// goroutine per frame: the whole stack below it would grow its stack).
	if e := s.CreateNICWithOptions(nicID, ep, stack.NICOptions{QDisc: fifo.New(ep, 1, 1000)}); e != nil {
		return fail("create NIC", e)
	}
	for _, a := range cfg.Addrs {
		if !a.Is4() {
			return fail("address", &tcpip.ErrBadAddress{})
		}
		pa := tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber, AddressWithPrefix: tcpip.AddrFrom4(a.As4()).WithPrefix()}
		if e := s.AddProtocolAddress(nicID, pa, stack.AddressProperties{}); e != nil {
			return fail("add address", e)
		}
	}
	// Promiscuous: take packets for every destination. Spoofing: answer from
	// those destinations. Together they let one stack stand in for the world.
	if e := s.SetPromiscuousMode(nicID, true); e != nil {
		return fail("promiscuous mode", e)
	}
	if e := s.SetSpoofing(nicID, true); e != nil {
		return fail("spoofing", e)
	}
	s.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: nicID}})

	return st, nil
}

func addrPort(a tcpip.Address, port uint16) netip.AddrPort {
	ip, _ := netip.AddrFromSlice(a.AsSlice())
	return netip.AddrPortFrom(ip, port)
}

func fullAddr(ap netip.AddrPort) tcpip.FullAddress {
	return tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFromSlice(ap.Addr().AsSlice()), Port: ap.Port()}
}

// ListenPacket binds a UDP socket on one of the stack's addresses.
func (st *Stack) ListenPacket(addr netip.AddrPort) (net.PacketConn, error) {
	la := fullAddr(addr)
	return gonet.DialUDP(st.s, &la, nil, ipv4.ProtocolNumber)
}

// Listen binds a TCP listener on one of the stack's addresses; connections
// to it do not go through Connect.
func (st *Stack) Listen(addr netip.AddrPort) (net.Listener, error) {
	return gonet.ListenTCP(st.s, fullAddr(addr), ipv4.ProtocolNumber)
}

// DialTCP opens a TCP connection from one of the stack's own addresses
// (from, port 0 for any) to the sandbox at to: a published port's way in.
// The sandbox's answers reach this endpoint, never Connect.
func (st *Stack) DialTCP(ctx context.Context, from, to netip.AddrPort) (net.Conn, error) {
	c, err := gonet.DialTCPWithBind(ctx, st.s, fullAddr(from), fullAddr(to), ipv4.ProtocolNumber)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Close stops the stack, cancels decisions in progress and closes the
// link's descriptor. Connections already handed out see errors and end.
func (st *Stack) Close() {
	st.once.Do(func() {
		st.cancel()
		if st.stop != nil {
			// Before Destroy, which waits for the link's goroutines holding
			// the stack's lock: a write may wait on a peer that stopped
			// reading, and a frame being delivered may need that lock.
			st.stop()
		}
		st.s.Destroy() // removes the NIC and waits for the link's readers
		if st.file != nil {
			st.file.Close() // only now: fdbased uses the number until it stops
		}
	})
}
