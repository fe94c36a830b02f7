package netstack

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/fdbased"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/airlock-dev/airlock/internal/link"
)

var (
	gatewayIP = netip.MustParseAddr("10.0.2.2")
	dnsIP     = netip.MustParseAddr("10.0.2.3")
	sandboxIP = netip.MustParseAddr("10.0.2.15")
)

var sandboxMAC = tcpip.LinkAddress([]byte{2, 0, 0, 0, 0, 15})

// kinds are the links every fixture test runs on, each over a socketpair
// of the type a VM's network backend (or, for TAP, the kernel) would use.
var kinds = []struct {
	kind     link.Kind
	sockType int
}{
	{link.TAP, unix.SOCK_SEQPACKET},
	{link.Datagram, unix.SOCK_DGRAM},
	{link.Stream, unix.SOCK_STREAM},
}

// forEachKind runs test once per kind of link.
func forEachKind(t *testing.T, test func(t *testing.T, k link.Kind)) {
	for _, k := range kinds {
		t.Run(k.kind.String(), func(t *testing.T) { test(t, k.kind) })
	}
}

func socketpair(t testing.TB, k link.Kind) (host *os.File, sandbox int) {
	t.Helper()
	for _, kk := range kinds {
		if kk.kind == k {
			fds, err := unix.Socketpair(unix.AF_UNIX, kk.sockType|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			return os.NewFile(uintptr(fds[0]), "link"), fds[1]
		}
	}
	t.Fatalf("no socket type for %s", k)
	return nil, -1
}

// sandboxSide is a second, independent TCP/IP stack on the other end of a
// socketpair, standing in for the sandbox's kernel or a VM (the e2e tests
// use the real kernel and a real TAP device). It frames as k says: the
// fdbased link for TAP and Datagram (so the host's Datagram endpoint meets
// another implementation), ours for Stream (TestStreamWireFormat checks
// that one against bytes framed by hand).
func sandboxSide(t testing.TB, k link.Kind, fd int) *stack.Stack {
	t.Helper()
	var ep stack.LinkEndpoint
	var err error
	var stop func()
	if k == link.Stream {
		var e *sockEndpoint
		e, err = newSockEndpoint(k, os.NewFile(uintptr(fd), "sandbox"), 1500, sandboxMAC)
		ep, stop = e, func() { e.stop() }
	} else {
		ep, err = fdbased.New(&fdbased.Options{FDs: []int{fd}, MTU: 1500, EthernetHeader: true, Address: sandboxMAC})
	}
	if err != nil {
		t.Fatal(err)
	}
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	if e := s.CreateNIC(1, ep); e != nil {
		t.Fatal(e)
	}
	pa := tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber, AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpip.AddrFrom4(sandboxIP.As4()), PrefixLen: 24}}
	if e := s.AddProtocolAddress(1, pa, stack.AddressProperties{}); e != nil {
		t.Fatal(e)
	}
	sub, _ := tcpip.NewSubnet(tcpip.AddrFrom4([4]byte{10, 0, 2, 0}), tcpip.MaskFromBytes([]byte{255, 255, 255, 0}))
	s.SetRouteTable([]tcpip.Route{
		{Destination: sub, NIC: 1},
		{Destination: header.IPv4EmptySubnet, Gateway: tcpip.AddrFrom4(gatewayIP.As4()), NIC: 1},
	})
	t.Cleanup(func() {
		if stop != nil {
			stop() // before Destroy, as Stack.Close does
		}
		s.Destroy()
		if k != link.Stream { // the stream endpoint has closed its own
			unix.Close(fd)
		}
	})
	return s
}

type fixture struct {
	host    *Stack
	sandbox *stack.Stack
	mu      sync.Mutex
	seen    []netip.AddrPort
	dropped []netip.AddrPort
}

func newFixture(t testing.TB, k link.Kind, connect func(netip.AddrPort) func(net.Conn)) *fixture {
	t.Helper()
	hostFile, sandboxFD := socketpair(t, k)
	f := &fixture{}
	var err error
	f.host, err = New(Config{Link: link.Link{Kind: k, File: hostFile}, MTU: 1500, Addrs: []netip.Addr{gatewayIP, dnsIP},
		Connect: func(_ context.Context, dst netip.AddrPort) func(net.Conn) {
			f.mu.Lock()
			f.seen = append(f.seen, dst)
			f.mu.Unlock()
			return connect(dst)
		},
		DroppedUDP: func(_, dst netip.AddrPort) {
			f.mu.Lock()
			f.dropped = append(f.dropped, dst)
			f.mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.host.Close)
	f.sandbox = sandboxSide(t, k, sandboxFD)
	return f
}

func (f *fixture) dial(ctx context.Context, dst string) (*gonet.TCPConn, error) {
	ap := netip.MustParseAddrPort(dst)
	return gonet.DialContextTCP(ctx, f.sandbox, tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(ap.Addr().As4()), Port: ap.Port()}, ipv4.ProtocolNumber)
}

func echo(c net.Conn) { io.Copy(c, c); c.Close() }

func TestConnectionsToAnyAddressReachTheDecider(t *testing.T) {
	forEachKind(t, testConnectionsToAnyAddressReachTheDecider)
}

func testConnectionsToAnyAddressReachTheDecider(t *testing.T, k link.Kind) {
	f := newFixture(t, k, func(netip.AddrPort) func(net.Conn) { return echo })
	for _, dst := range []string{"93.184.216.34:443", "198.18.0.7:80", "10.9.9.9:5432"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := f.dial(ctx, dst)
		cancel()
		if err != nil {
			t.Fatalf("dial %s: %v", dst, err)
		}
		fmt.Fprintf(c, "hello %s\n", dst)
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil || line != "hello "+dst+"\n" {
			t.Errorf("%s: echo = %q, %v", dst, line, err)
		}
		if got := c.LocalAddr().String(); !strings.HasPrefix(got, sandboxIP.String()+":") {
			t.Errorf("local address %s", got)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.seen) != 3 || f.seen[0].String() != "93.184.216.34:443" || f.seen[2].String() != "10.9.9.9:5432" {
		t.Errorf("decider saw %v", f.seen)
	}
}

func TestRefusedConnectionsAreReset(t *testing.T) { forEachKind(t, testRefusedConnectionsAreReset) }

func testRefusedConnectionsAreReset(t *testing.T, k link.Kind) {
	f := newFixture(t, k, func(netip.AddrPort) func(net.Conn) { return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := f.dial(ctx, "203.0.113.9:443")
	if err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("dial = %v, want connection refused", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("refusal took %v; a reset should be immediate", time.Since(start))
	}
}

func TestListenersOnTheStacksOwnAddresses(t *testing.T) {
	forEachKind(t, testListenersOnTheStacksOwnAddresses)
}

func testListenersOnTheStacksOwnAddresses(t *testing.T, k link.Kind) {
	f := newFixture(t, k, func(netip.AddrPort) func(net.Conn) { return nil })
	pc, err := f.host.ListenPacket(netip.AddrPortFrom(dnsIP, 53))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(append([]byte("re:"), buf[:n]...), from)
		}
	}()
	ln, err := f.host.Listen(netip.AddrPortFrom(dnsIP, 53))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go echo(c)
		}
	}()

	laddr := tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(sandboxIP.As4()), Port: 40000}
	raddr := tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(dnsIP.As4()), Port: 53}
	uc, err := gonet.DialUDP(f.sandbox, &laddr, &raddr, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	uc.SetDeadline(time.Now().Add(10 * time.Second))
	uc.Write([]byte("q"))
	buf := make([]byte, 64)
	n, err := uc.Read(buf)
	if err != nil || string(buf[:n]) != "re:q" {
		t.Fatalf("UDP to the stack's listener: %q, %v", buf[:n], err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := f.dial(ctx, "10.0.2.3:53")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "tcp\n")
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "tcp\n" {
		t.Fatalf("TCP to the stack's listener: %q, %v", line, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.seen) != 0 {
		t.Errorf("listener traffic went to the decider: %v", f.seen)
	}
}

func TestOtherUDPIsDropped(t *testing.T) { forEachKind(t, testOtherUDPIsDropped) }

func testOtherUDPIsDropped(t *testing.T, k link.Kind) {
	f := newFixture(t, k, func(netip.AddrPort) func(net.Conn) { return nil })
	laddr := tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(sandboxIP.As4()), Port: 40001}
	raddr := tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4([4]byte{8, 8, 8, 8}), Port: 53}
	uc, err := gonet.DialUDP(f.sandbox, &laddr, &raddr, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		// Sent again each round: under load the first datagram may wait on
		// (or be dropped during) ARP resolution of the gateway.
		uc.Write([]byte("exfiltrate"))
		uc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if n, err := uc.Read(make([]byte, 64)); err == nil {
			t.Fatalf("got %d bytes back from 8.8.8.8:53", n)
		}
		f.mu.Lock()
		d := append([]netip.AddrPort(nil), f.dropped...)
		f.mu.Unlock()
		if len(d) > 0 {
			if d[0].String() != "8.8.8.8:53" {
				t.Errorf("dropped %v", d)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the dropped datagram was not reported")
		}
	}
}
