package egress

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// handoverSocket is a listener on a fresh socket and a way to send it one
// message with descriptors, as the guest's relay (or anything in the
// sandbox) would. send returns once the gateway has hung up, having taken
// what it will; it may run on a goroutine of its own.
func handoverSocket(t *testing.T) (*handoverListener, func(data []byte, fds ...int)) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "proxy.sock")
	l, err := listenHandover(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	send := func(data []byte, fds ...int) {
		u, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Error(err)
			return
		}
		defer u.Close()
		var oob []byte
		if len(fds) > 0 {
			oob = unix.UnixRights(fds...)
		}
		if _, _, err := u.WriteMsgUnix(data, oob, nil); err != nil {
			t.Error(err)
			return
		}
		io.Copy(io.Discard, u)
	}
	return l, send
}

// tcpPair is both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func rawFD(t *testing.T, f interface{ File() (*os.File, error) }) int {
	t.Helper()
	dup, err := f.File()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dup.Close() })
	return int(dup.Fd())
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// accepted waits briefly for the listener to yield a connection.
func accepted(l *handoverListener, within time.Duration) net.Conn {
	select {
	case c := <-l.conns:
		return c
	case <-time.After(within):
		return nil
	}
}

func TestAHandedOverTCPConnectionIsServedInPlaceOfTheSocket(t *testing.T) {
	l, send := handoverSocket(t)
	client, server := tcpPair(t)
	go send([]byte{0}, rawFD(t, server))
	c := accepted(l, 5*time.Second)
	if c == nil {
		t.Fatal("the handed-over connection was not accepted")
	}
	defer c.Close()
	if _, ok := c.(*net.TCPConn); !ok {
		t.Fatalf("accepted a %T, want the handed-over *net.TCPConn", c)
	}
	// Bytes flow both ways between the sandbox's client and the gateway.
	client.Write([]byte("CONNECT"))
	buf := make([]byte, 7)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "CONNECT" {
		t.Fatalf("gateway read %q, %v", buf, err)
	}
	c.Write([]byte("200"))
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(client, buf[:3]); err != nil || string(buf[:3]) != "200" {
		t.Fatalf("client read %q, %v", buf[:3], err)
	}
}

// The socket is visible inside the sandbox: whatever else is sent on it is
// dropped, every descriptor it brought closed, and it holds up no real
// handover.
func TestWhatIsNotOneTCPSocketIsRefusedOnTheHandoverSocket(t *testing.T) {
	l, send := handoverSocket(t)
	var p [2]int
	if err := unix.Pipe(p[:]); err != nil { // the test execs nothing: no O_CLOEXEC needed (and none on darwin)
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sp[0])
	defer unix.Close(sp[1])
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	file, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	_, s1 := tcpPair(t)
	_, s2 := tcpPair(t)
	cases := []struct {
		name string
		data []byte
		fds  []int
	}{
		{"bytes, no descriptor", []byte("GET / HTTP/1.1\r\n\r\n"), nil},
		{"a pipe", []byte{0}, []int{p[0]}},
		{"a Unix socket", []byte{0}, []int{sp[0]}},
		{"a UDP socket", []byte{0}, []int{rawFD(t, udp)}},
		{"a regular file", []byte{0}, []int{int(file.Fd())}},
		{"two TCP sockets at once", []byte{0}, []int{rawFD(t, s1), rawFD(t, s2)}},
	}
	before := openFDs(t)
	for _, c := range cases {
		send(c.data, c.fds...)
		if got := accepted(l, 100*time.Millisecond); got != nil {
			got.Close()
			t.Errorf("%s: accepted as a connection (%T)", c.name, got)
		}
	}
	if after := openFDs(t); after != before {
		t.Errorf("%d descriptors open after the refused handovers, %d before: the gateway kept some", after, before)
	}
	// A client that connects and says nothing holds up no real handover.
	silent, err := net.DialUnix("unix", nil, l.ln.Addr().(*net.UnixAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	_, server := tcpPair(t)
	go send([]byte{0}, rawFD(t, server))
	c := accepted(l, 5*time.Second)
	if c == nil {
		t.Fatal("a handover behind a silent client was not accepted")
	}
	c.Close()
}

// A sandbox may hold the gateway's descriptors until none is left: the
// door waits for one to come back instead of closing for good.
func TestTheHandoverSocketOutlastsRunningOutOfDescriptors(t *testing.T) {
	l, send := handoverSocket(t)
	_, server := tcpPair(t)
	fd := rawFD(t, server)
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	low := lim
	low.Cur = uint64(openFDs(t) + 8)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
			restored = true
		}
	}
	defer restore()
	u, err := net.DialUnix("unix", nil, l.ln.Addr().(*net.UnixAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	var fill []int
	for {
		p, err := unix.Dup(0)
		if err != nil {
			break // EMFILE: the gateway can accept nothing now
		}
		fill = append(fill, p)
	}
	time.Sleep(50 * time.Millisecond) // the accept fails, and is retried
	for _, p := range fill {
		unix.Close(p)
	}
	restore()
	if _, _, err := u.WriteMsgUnix([]byte{0}, unix.UnixRights(fd), nil); err != nil {
		t.Fatal(err)
	}
	c := accepted(l, 5*time.Second)
	if c == nil {
		t.Fatal("the connection waiting while descriptors ran out was not taken once they came back")
	}
	c.Close()
	// And the door still takes new ones.
	_, server2 := tcpPair(t)
	go send([]byte{0}, rawFD(t, server2))
	if c := accepted(l, 5*time.Second); c == nil {
		t.Fatal("no handover accepted after the shortage")
	} else {
		c.Close()
	}
}
