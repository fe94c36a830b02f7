package kubernetes

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/transport/spdy"
)

// portForwardProtocol is the kubelet's port-forward subprotocol.
const portForwardProtocol = "portforward.k8s.io"

// forwarder holds one port-forward connection to a Pod through the API
// server: each Open is a new stream on it to a TCP port on the Pod's
// loopback, as `kubectl port-forward` makes, but handed to the caller
// instead of served on a local port (which any local user could reach).
type forwarder struct {
	conn httpstream.Connection
	next atomic.Int64
}

// dialForward upgrades a connection to pod's portforward subresource.
func (c *Client) dialForward(pod string) (*forwarder, error) {
	rt, upgrader, err := spdy.RoundTripperFor(c.Config)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: port-forward transport: %w", err)
	}
	d := spdy.NewDialer(upgrader, &http.Client{Transport: rt, Timeout: 30 * time.Second}, http.MethodPost, c.portForwardURL(pod))
	conn, proto, err := d.Dial(portForwardProtocol)
	if err != nil {
		return nil, c.apiError("port-forward to pod "+pod, err)
	}
	if proto != portForwardProtocol {
		conn.Close()
		return nil, fmt.Errorf("kubernetes: port-forward to pod %s: the server speaks %q", pod, proto)
	}
	return &forwarder{conn: conn}, nil
}

// Open opens a stream to port on the Pod's loopback. The stream's Close
// ends it both ways.
func (f *forwarder) Open(port int) (*stream, error) {
	id := strconv.FormatInt(f.next.Add(1), 10)
	h := http.Header{}
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	h.Set(corev1.PortHeader, strconv.Itoa(port))
	h.Set(corev1.PortForwardRequestIDHeader, id)
	errStream, err := f.conn.CreateStream(h)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: port-forward error stream: %w", err)
	}
	errStream.Close() // nothing to send on it
	h.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := f.conn.CreateStream(h)
	if err != nil {
		f.conn.RemoveStreams(errStream)
		return nil, fmt.Errorf("kubernetes: port-forward data stream: %w", err)
	}
	s := &stream{f: f, data: data, errs: errStream, failed: make(chan struct{})}
	go func() {
		// The kubelet writes here when it cannot reach the port.
		b, _ := io.ReadAll(io.LimitReader(errStream, 1024))
		if len(b) > 0 {
			s.errMsg.Store(string(b))
			close(s.failed)
			s.Close()
		}
	}()
	return s, nil
}

// Close ends the connection and every stream on it.
func (f *forwarder) Close() error { return f.conn.Close() }

// Closed is closed when the connection has ended.
func (f *forwarder) Closed() <-chan bool { return f.conn.CloseChan() }

// stream is one port-forwarded TCP connection: an io.ReadWriteCloser
// whose Close ends a Read in progress (proto.StreamConn needs that).
type stream struct {
	f      *forwarder
	data   httpstream.Stream
	errs   httpstream.Stream
	errMsg atomic.Value
	failed chan struct{}
	once   sync.Once
	// onEnd, if set, runs once when a read fails: the Pod's end seen from
	// here (set before the first read).
	onEnd   func()
	endOnce sync.Once
}

func (s *stream) Read(p []byte) (int, error) {
	n, err := s.data.Read(p)
	if err != nil && s.onEnd != nil {
		s.endOnce.Do(s.onEnd)
	}
	return n, err
}
func (s *stream) Write(p []byte) (int, error) { return s.data.Write(p) }

// CloseWrite ends what is sent; reads go on.
func (s *stream) CloseWrite() error { return s.data.Close() }

func (s *stream) Close() error {
	s.once.Do(func() {
		s.data.Reset()
		s.errs.Reset()
		s.f.conn.RemoveStreams(s.data, s.errs)
	})
	return nil
}

// Err is what the kubelet said when the port could not be reached, or "".
func (s *stream) Err() string {
	if v, ok := s.errMsg.Load().(string); ok {
		return v
	}
	return ""
}
