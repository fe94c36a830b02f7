// Package netstack is the host end of the sandbox's only network interface:
// a gVisor TCP/IP stack in the supervisor process that reads every frame the
// sandbox sends on its TAP device. It accepts TCP connections to any address
// (promiscuous and spoofing) and hands each to the caller to decide before
// the handshake completes; it serves the caller's listeners on its own
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
	// TAP is the device (Ethernet frames); the stack owns it from now on
	// and closes it on Close.
	TAP *os.File
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

// Stack is a running network stack on one TAP device.
type Stack struct {
	s      *stack.Stack
	tap    *os.File
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
}

// New starts the stack on cfg.FD.
func New(cfg Config) (*Stack, error) {
	if cfg.Connect == nil {
		return nil, errors.New("netstack: a Connect function is required")
	}
	fd := int(cfg.TAP.Fd()) // the link reads and writes it with raw syscalls
	if err := unix.SetNonblock(fd, true); err != nil {
		cfg.TAP.Close()
		return nil, fmt.Errorf("netstack: TAP descriptor: %w", err)
	}
	link, err := fdbased.New(&fdbased.Options{FDs: []int{fd}, MTU: cfg.MTU, EthernetHeader: true, Address: tcpip.LinkAddress([]byte{0x02, 0xa1, 0x10, 0xc0, 0x00, 0x01})})
	if err != nil {
		cfg.TAP.Close()
		return nil, fmt.Errorf("netstack: link: %w", err)
	}
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	ctx, cancel := context.WithCancel(context.Background())
	st := &Stack{s: s, tap: cfg.TAP, ctx: ctx, cancel: cancel}
	fail := func(what string, e tcpip.Error) (*Stack, error) {
		st.Close()
		return nil, fmt.Errorf("netstack: %s: %s", what, e)
	}
	sack := tcpip.TCPSACKEnabled(true)
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &sack)
	moderate := tcpip.TCPModerateReceiveBufferOption(true)
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &moderate)
	// Frames toward the sandbox are written by a queue's own goroutine, not
	// by whichever goroutine wrote the data (an HTTP/2 frame writer is a new
	// goroutine per frame: the whole stack below it would grow its stack).
	if e := s.CreateNICWithOptions(nicID, link, stack.NICOptions{QDisc: fifo.New(link, 1, 1000)}); e != nil {
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

// Close stops the stack, cancels decisions in progress and closes the TAP
// descriptor. Connections already handed out see errors and end.
func (st *Stack) Close() {
	st.once.Do(func() {
		st.cancel()
		st.s.Destroy() // removes the NIC, which stops the link's readers
		st.tap.Close()
	})
}
