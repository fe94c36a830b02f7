package kubernetes

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The proxy door's connections come back to the host over port-forward
// streams, which only the host can open: it keeps relayIdle streams open to
// the guest's back door (proto.Relay.Back); the guest joins each
// connection to its door to one of them and says so with one byte, and the
// host then hands the connection to the gateway's socket as the guest does
// on the other backends (a TCP socket's descriptor: the gateway takes no
// other), copying bytes between that socket and the stream.
const (
	relayIdle   = 4
	relayActive = 256 // connections relayed at once
)

type hostRelay struct {
	fw     *forwarder
	socket string // the gateway's handover socket
	token  []byte // sent first on each stream (proto.Relay.Token)

	mu    sync.Mutex
	ln    *net.TCPListener // for the TCP pairs, on 127.0.0.1
	slots chan struct{}
	done  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
}

func startHostRelay(fw *forwarder, socket string, token []byte) *hostRelay {
	r := &hostRelay{fw: fw, socket: socket, token: token, slots: make(chan struct{}, relayActive), done: make(chan struct{})}
	for range relayIdle {
		r.spawn()
	}
	return r
}

// spawn keeps one idle stream open to the back door until the guest uses
// it, then starts its replacement and serves it.
func (r *hostRelay) spawn() {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		pause := 100 * time.Millisecond
		for {
			select {
			case <-r.done:
				return
			case r.slots <- struct{}{}:
			}
			st, err := r.fw.Open(backPort)
			if err != nil {
				<-r.slots
				return // the connection is gone
			}
			var b [1]byte
			_, err = st.Write(r.token)
			if err == nil {
				_, err = io.ReadFull(st, b[:])
			}
			if err != nil || b[0] != 1 {
				st.Close()
				<-r.slots
				select {
				case <-r.done:
					return
				case <-time.After(pause):
				}
				pause = min(2*pause, 5*time.Second)
				continue
			}
			r.spawn()
			r.serve(st)
			<-r.slots
			return
		}
	}()
}

// serve hands st's connection to the gateway and copies between them.
func (r *hostRelay) serve(st *stream) {
	defer st.Close()
	near, far, err := r.pair()
	if err != nil {
		return
	}
	defer near.Close()
	err = handOver(far, r.socket)
	far.Close()
	if err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() {
		io.Copy(near, st)
		near.CloseWrite()
		done <- struct{}{}
	}()
	go func() {
		io.Copy(st, near)
		st.CloseWrite()
		done <- struct{}{}
	}()
	select {
	case <-done:
		<-done
	case <-r.done:
	}
}

// pair makes two connected TCP sockets on the loopback. Another local
// process could connect to the listener first: only the connection from
// the one dialled here is taken.
func (r *hostRelay) pair() (near, far *net.TCPConn, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ln == nil {
		if r.ln, err = net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}); err != nil {
			return nil, nil, err
		}
	}
	d, err := net.DialTCP("tcp", nil, r.ln.Addr().(*net.TCPAddr))
	if err != nil {
		return nil, nil, err
	}
	for range 8 {
		r.ln.SetDeadline(time.Now().Add(5 * time.Second))
		a, err := r.ln.AcceptTCP()
		if err != nil {
			d.Close()
			return nil, nil, err
		}
		if a.RemoteAddr().String() == d.LocalAddr().String() {
			return a, d, nil
		}
		a.Close()
	}
	d.Close()
	return nil, nil, errors.New("relay: no pair")
}

// handOver sends c's descriptor to the gateway's socket (see
// egress.handoverListener).
func handOver(c *net.TCPConn, socket string) error {
	up, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		return err
	}
	defer up.Close()
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	if err := raw.Control(func(fd uintptr) {
		_, _, werr = up.WriteMsgUnix([]byte{0}, unix.UnixRights(int(fd)), nil)
	}); err != nil {
		return err
	}
	return werr
}

// Close stops the relay and ends every connection it carries.
func (r *hostRelay) Close() {
	r.once.Do(func() {
		close(r.done)
		r.mu.Lock()
		if r.ln != nil {
			r.ln.Close()
		}
		r.mu.Unlock()
	})
}
