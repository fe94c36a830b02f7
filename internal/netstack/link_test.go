package netstack

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/airlock-dev/airlock/internal/link"
)

func TestBulkDataBothWays(t *testing.T) { forEachKind(t, testBulkDataBothWays) }

// 8 MiB goes from the sandbox to an echo behind Connect and comes back
// whole: the link carries full-size frames both ways, in order, under
// load.
func testBulkDataBothWays(t *testing.T, k link.Kind) {
	f := newFixture(t, k, func(netip.AddrPort) func(net.Conn) { return echo })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := f.dial(ctx, "192.0.2.80:9")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	data := make([]byte, 8<<20)
	rand.Read(data)
	c.SetDeadline(time.Now().Add(60 * time.Second))
	sent := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		c.CloseWrite()
		sent <- err
	}()
	h := sha256.New()
	n, err := io.Copy(h, c)
	if err != nil || n != int64(len(data)) {
		t.Fatalf("read back %d bytes, %v", n, err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if want := sha256.Sum256(data); !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatal("the data came back changed")
	}
}

// rawStream is the far end of a Stream link, read and written by hand.
func rawStream(t *testing.T) (*Stack, int) {
	t.Helper()
	host, far := socketpair(t, link.Stream)
	st, err := New(Config{Link: link.Link{Kind: link.Stream, File: host}, MTU: 1500, Addrs: []netip.Addr{gatewayIP, dnsIP},
		Connect: func(context.Context, netip.AddrPort) func(net.Conn) { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(); unix.Close(far) })
	tv := unix.NsecToTimeval((5 * time.Second).Nanoseconds())
	if err := unix.SetsockoptTimeval(far, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	return st, far
}

// arpRequest is an Ethernet frame asking, from the sandbox, who has ip.
func arpRequest(ip netip.Addr) []byte {
	b := make([]byte, header.EthernetMinimumSize+header.ARPSize)
	header.Ethernet(b).Encode(&header.EthernetFields{SrcAddr: sandboxMAC, DstAddr: header.EthernetBroadcastAddress, Type: header.ARPProtocolNumber})
	a := header.ARP(b[header.EthernetMinimumSize:])
	a.SetIPv4OverEthernet()
	a.SetOp(header.ARPRequest)
	copy(a.HardwareAddressSender(), sandboxMAC)
	copy(a.ProtocolAddressSender(), sandboxIP.AsSlice())
	copy(a.ProtocolAddressTarget(), ip.AsSlice())
	return b
}

func prefixed(frames ...[]byte) []byte {
	var b []byte
	for _, f := range frames {
		b = link.AppendStreamHeader(b, len(f))
		b = append(b, f...)
	}
	return b
}

// readFrame reads one length-prefixed frame from fd by hand.
func readFrame(t *testing.T, fd int) []byte {
	t.Helper()
	f := fdReader(fd)
	var hdr [4]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		t.Fatalf("frame header: %v", err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n < header.EthernetMinimumSize || n > 1514 {
		t.Fatalf("frame length %d", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(f, b); err != nil {
		t.Fatalf("frame: %v", err)
	}
	return b
}

// fdReader reads a descriptor it does not own (an os.File would close it
// when collected).
type fdReader int

func (r fdReader) Read(p []byte) (int, error) {
	n, err := unix.Read(int(r), p)
	if n == 0 && err == nil {
		return 0, io.EOF
	}
	return max(n, 0), err
}

func wantARPReply(t *testing.T, frame []byte, ip netip.Addr) {
	t.Helper()
	eth := header.Ethernet(frame)
	if eth.Type() != header.ARPProtocolNumber || eth.DestinationAddress() != sandboxMAC || eth.SourceAddress() != linkAddress {
		t.Fatalf("frame %x is not an ARP reply to the sandbox", frame)
	}
	a := header.ARP(frame[header.EthernetMinimumSize:])
	if !a.IsValid() || a.Op() != header.ARPReply || !bytes.Equal(a.ProtocolAddressSender(), ip.AsSlice()) {
		t.Fatalf("ARP %x does not answer for %s", frame[header.EthernetMinimumSize:], ip)
	}
}

// TestStreamWireFormat checks the Stream link against bytes framed by hand
// (QEMU's framing: a 4-byte big-endian length, then the frame): two frames
// in one write, one frame split across writes; each answered by one
// length-prefixed frame.
func TestStreamWireFormat(t *testing.T) {
	_, far := rawStream(t)
	if _, err := unix.Write(far, prefixed(arpRequest(gatewayIP), arpRequest(dnsIP))); err != nil {
		t.Fatal(err)
	}
	wantARPReply(t, readFrame(t, far), gatewayIP)
	wantARPReply(t, readFrame(t, far), dnsIP)

	b := prefixed(arpRequest(gatewayIP))
	for _, piece := range [][]byte{b[:2], b[2:9], b[9:]} {
		if _, err := unix.Write(far, piece); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	wantARPReply(t, readFrame(t, far), gatewayIP)
}

// A hostile length closes the link: the far end reads end of file. Frames
// that are merely not Ethernet, or not for us, are dropped and the link
// lives on.
func TestStreamBadLengthClosesTheLink(t *testing.T) {
	for name, bad := range map[string][]byte{
		"zero length":                  {0, 0, 0, 0},
		"one byte over MTU+header":     link.AppendStreamHeader(nil, 1515),
		"a length of four gigabytes":   {0xff, 0xff, 0xff, 0xff},
		"a length with no frame after": append(link.AppendStreamHeader(nil, 1<<20), make([]byte, 1500)...),
	} {
		t.Run(name, func(t *testing.T) {
			_, far := rawStream(t)
			other := arpRequest(gatewayIP)
			copy(other, []byte{2, 9, 9, 9, 9, 9}) // unicast to a stranger
			junk := make([]byte, 1514)            // to the zero MAC: not us
			alive := prefixed([]byte{1, 2, 3}, other, junk, arpRequest(gatewayIP))
			if _, err := unix.Write(far, alive); err != nil {
				t.Fatal(err)
			}
			wantARPReply(t, readFrame(t, far), gatewayIP)
			if _, err := unix.Write(far, append(bad, prefixed(arpRequest(dnsIP))...)); err != nil {
				t.Fatal(err)
			}
			n, err := unix.Read(far, make([]byte, 64))
			if n != 0 || err != nil {
				t.Fatalf("after a bad length the far end read %d bytes, %v; want end of file", n, err)
			}
		})
	}
}

// Close returns even while the queue's goroutine is blocked writing to a
// peer that stopped reading.
func TestStreamCloseWithAPeerThatStoppedReading(t *testing.T) {
	st, far := rawStream(t)
	req := prefixed(arpRequest(gatewayIP))
	var burst []byte
	for range 1000 {
		burst = append(burst, req...)
	}
	sndbuf, _ := unix.GetsockoptInt(far, unix.SOL_SOCKET, unix.SO_RCVBUF)
	// Replies (46 bytes each) to fill the far end's receive buffer several
	// times over.
	for sent := 0; sent < 8*sndbuf/46; sent += 1000 {
		// A blocking write a signal interrupts (the runtime's preemption)
		// returns what it wrote: the rest must follow, or the framing breaks
		// and the stack rightly closes the link.
		for b := burst; len(b) > 0; {
			n, err := unix.Write(far, b)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			b = b[n:]
		}
	}
	time.Sleep(100 * time.Millisecond)
	done := make(chan struct{})
	go func() { st.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hung on a blocked write")
	}
}

func TestNewRefusesAMismatchedLink(t *testing.T) {
	host, far := socketpair(t, link.Datagram)
	defer unix.Close(far)
	_, err := New(Config{Link: link.Link{Kind: link.Stream, File: host}, MTU: 1500,
		Connect: func(context.Context, netip.AddrPort) func(net.Conn) { return nil }})
	if !errors.Is(err, link.ErrKind) {
		t.Fatalf("New on a datagram socket as Stream = %v", err)
	}
	if host.Fd() != ^uintptr(0) {
		t.Error("the refused descriptor was left open")
	}
}

// After Close (and the far side's teardown) no goroutine of the stack or
// its link is left.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	run := func(t *testing.T, k link.Kind) {
		f := newFixture(t, k, func(netip.AddrPort) func(net.Conn) { return echo })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := f.dial(ctx, "192.0.2.1:7")
		if err != nil {
			t.Fatal(err)
		}
		c.Write(make([]byte, 100<<10))
		io.ReadFull(c, make([]byte, 100<<10))
		// Left open: Close must end the connection's goroutines too.
	}
	for _, k := range kinds {
		t.Run(k.kind.String(), func(t *testing.T) {
			t.Run("warm up", func(t *testing.T) { run(t, k.kind) }) // package-level goroutines start once
			before := runtime.NumGoroutine()
			t.Run("run", func(t *testing.T) { run(t, k.kind) })
			deadline := time.Now().Add(10 * time.Second)
			for runtime.NumGoroutine() > before {
				if time.Now().After(deadline) {
					buf := make([]byte, 1<<20)
					t.Fatalf("%d goroutines before, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// BenchmarkLinkThroughput moves data over one TCP connection through each
// kind of link, sandbox to host (up) and host to sandbox (down).
func BenchmarkLinkThroughput(b *testing.B) {
	const chunk = 64 << 10
	for _, k := range kinds {
		for _, dir := range []string{"up", "down"} {
			b.Run(k.kind.String()+"/"+dir, func(b *testing.B) {
				done := make(chan int64, 1)
				f := newFixture(b, k.kind, func(netip.AddrPort) func(net.Conn) {
					return func(c net.Conn) {
						defer c.Close()
						if dir == "up" {
							n, _ := io.Copy(io.Discard, c)
							done <- n
							return
						}
						buf := make([]byte, chunk)
						for range b.N {
							if _, err := c.Write(buf); err != nil {
								break
							}
						}
					}
				})
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				c, err := f.dial(ctx, "192.0.2.2:5001")
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				b.SetBytes(chunk)
				b.ResetTimer()
				if dir == "up" {
					buf := make([]byte, chunk)
					for range b.N {
						if _, err := c.Write(buf); err != nil {
							b.Fatal(err)
						}
					}
					c.CloseWrite()
					if n := <-done; n != int64(b.N)*chunk {
						b.Fatalf("host read %d bytes", n)
					}
				} else if n, err := io.Copy(io.Discard, c); n != int64(b.N)*chunk {
					b.Fatalf("sandbox read %d bytes, %v", n, err)
				}
			})
		}
	}
}

// rawDatagram is the far end of a Datagram link, read and written by hand.
func rawDatagram(t *testing.T) (*Stack, int) {
	t.Helper()
	host, far := socketpair(t, link.Datagram)
	st, err := New(Config{Link: link.Link{Kind: link.Datagram, File: host}, MTU: 1500, Addrs: []netip.Addr{gatewayIP, dnsIP},
		Connect: func(context.Context, netip.AddrPort) func(net.Conn) { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(); unix.Close(far) })
	tv := unix.NsecToTimeval((5 * time.Second).Nanoseconds())
	if err := unix.SetsockoptTimeval(far, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	return st, far
}

// An AF_UNIX datagram socket holds ten datagrams (net.unix.max_dgram_qlen)
// before a writer gets EAGAIN; the Datagram link waits there rather than
// dropping, so a burst of 500 ARP requests gets 500 replies.
func TestDatagramWritesWaitForRoom(t *testing.T) {
	_, far := rawDatagram(t)
	const n = 500
	for range n {
		if _, err := unix.Write(far, arpRequest(gatewayIP)); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 2048)
	for i := range n {
		m, err := unix.Read(far, buf)
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		wantARPReply(t, buf[:m], gatewayIP)
	}
}

// A datagram longer than an Ethernet frame at the MTU, or shorter than its
// header, is dropped; the link lives on.
func TestDatagramOversizeIsDropped(t *testing.T) {
	_, far := rawDatagram(t)
	big := append(arpRequest(gatewayIP), make([]byte, 1515-42)...)
	for _, d := range [][]byte{big, {1, 2, 3}, arpRequest(dnsIP)} {
		if _, err := unix.Write(far, d); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 2048)
	m, err := unix.Read(far, buf)
	if err != nil {
		t.Fatal(err)
	}
	wantARPReply(t, buf[:m], dnsIP)
}
