// Package publish serves a sandbox's published ports: a listener on the host
// for each, whose connections are dialed into the sandbox and audited. It is
// only a way in: the sandbox answers the connection it is given and reaches
// nothing through it.
package publish

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/config"
)

// Bounds on what the host's clients can make the supervisor hold: a
// connection is dialed into the sandbox within dialTimeout, and at most
// maxConns are open at once across the sandbox's ports (one more is closed
// at once and audited).
const (
	dialTimeout = 10 * time.Second
	maxConns    = 256
)

// Dial connects to port inside the sandbox.
type Dial func(ctx context.Context, port uint16) (net.Conn, error)

// Server is a sandbox's published ports, listening.
type Server struct {
	ports []config.Published // as bound: a port the host picked is filled in
	lns   []net.Listener

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // both ends of every open connection
	closed bool
	wg     sync.WaitGroup
	slots  chan struct{}
}

// Listen binds every port, or none: an error names the -p entry and what to
// do, and closes what was bound before it.
func Listen(ports []config.Published) (*Server, error) {
	s := &Server{conns: map[net.Conn]struct{}{}, slots: make(chan struct{}, maxConns)}
	for _, p := range ports {
		ln, err := net.Listen("tcp", p.Host.String())
		if err != nil {
			s.Close()
			return nil, bindError(p, err)
		}
		bound := p
		if ap, ok := ln.Addr().(*net.TCPAddr); ok {
			bound.Host = netip.AddrPortFrom(p.Host.Addr(), uint16(ap.Port))
		}
		s.lns = append(s.lns, ln)
		s.ports = append(s.ports, bound)
	}
	return s, nil
}

// bindError says why p's address could not be had, and what to do.
func bindError(p config.Published, err error) error {
	spec := p.String()
	if p.Host.Port() == 0 {
		spec = p.Host.Addr().String() + "::" + strconv.Itoa(int(p.Sandbox))
	}
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("-p %s: %s is already in use on this host: publish on another HOST_PORT (or give SANDBOX_PORT alone for a free one)", spec, p.Host)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return fmt.Errorf("-p %s: %s is not an address of this host: use one it has (127.0.0.1 by default)", spec, p.Host.Addr())
	case errors.Is(err, syscall.EACCES):
		return fmt.Errorf("-p %s: this user may not listen on port %d: use a HOST_PORT of 1024 or more", spec, p.Host.Port())
	}
	return fmt.Errorf("-p %s: listen on %s: %v", spec, p.Host, err)
}

// Ports are the ports as bound, in the order given.
func (s *Server) Ports() []config.Published { return append([]config.Published(nil), s.ports...) }

// Serve accepts on every port until Close: each connection is dialed into
// the sandbox and the two are joined; record hears one inbound record per
// connection when it ends.
func (s *Server) Serve(dial Dial, record func(audit.Record)) {
	for i, ln := range s.lns {
		s.wg.Add(1)
		go s.accept(ln, s.ports[i], dial, record)
	}
}

func (s *Server) accept(ln net.Listener, p config.Published, dial Dial, record func(audit.Record)) {
	defer s.wg.Done()
	pause := 5 * time.Millisecond
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && !errors.Is(err, net.ErrClosed) && !s.isClosed() {
				// Out of descriptors, say: wait, as net/http does, rather
				// than stop serving the port.
				time.Sleep(pause)
				pause = min(2*pause, time.Second)
				continue
			}
			return
		}
		pause = 5 * time.Millisecond
		select {
		case s.slots <- struct{}{}:
		default:
			c.Close()
			r := inbound(c, p)
			r.Decision, r.Reason = audit.Deny, fmt.Sprintf("more than %d connections open to the sandbox's published ports", maxConns)
			record(r)
			continue
		}
		if !s.track(c) {
			<-s.slots
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.slots }()
			s.serve(c, p, dial, record)
		}()
	}
}

// inbound is the record of c, a connection to p.
func inbound(c net.Conn, p config.Published) audit.Record {
	r := audit.Record{Kind: audit.KindInbound, Port: int(p.Sandbox),
		Extra: map[string]string{"peer": c.RemoteAddr().String(), "listen": p.Host.String()}}
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		r.IP = ap.Addr().Unmap().String()
	}
	return r
}

// serve joins the host's connection c with one into the sandbox.
func (s *Server) serve(c net.Conn, p config.Published, dial Dial, record func(audit.Record)) {
	defer s.untrack(c)
	start := time.Now()
	r := inbound(c, p)
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	in, err := dial(ctx, p.Sandbox)
	cancel()
	if err != nil {
		r.Decision, r.Duration = audit.Error, audit.Millis(time.Since(start))
		r.Reason = fmt.Sprintf("nothing answered on the sandbox's port %d: %v", p.Sandbox, err)
		record(r)
		return
	}
	if !s.track(in) {
		in.Close()
		return
	}
	defer s.untrack(in)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.BytesIn = join(in, c)
	}()
	r.BytesOut = join(c, in)
	wg.Wait()
	r.Decision, r.Duration = audit.Allow, audit.Millis(time.Since(start))
	record(r)
}

// join copies from src to dst until src ends, then passes the end on (a
// half-close where dst has one, so a request's end reaches the server
// while its answer still flows), and returns the bytes copied.
func join(dst, src net.Conn) int64 {
	n, err := io.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil {
		cw.CloseWrite()
	} else {
		dst.Close()
		src.Close()
	}
	return n
}

// track adds c to the open connections, or closes it and says false once
// the server is closed.
func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *Server) untrack(c net.Conn) {
	c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// Close stops listening, ends every open connection and waits for their
// records to be written.
func (s *Server) Close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.closed = true
	for _, ln := range s.lns {
		ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}
