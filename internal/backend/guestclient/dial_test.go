package guestclient

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/proto"
)

// hostileGuest answers every Dial on the other end of a pair with what
// answer makes of it, as a guest the sandbox took over might.
func hostileGuest(t *testing.T, answer func(c *proto.Conn, m *proto.Msg)) *Client {
	t.Helper()
	host, theirs, err := proto.Pair()
	if err != nil {
		t.Fatal(err)
	}
	g, err := proto.FileConn(theirs)
	theirs.Close()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			m, files, err := g.Recv()
			if err != nil {
				return
			}
			proto.CloseFiles(files)
			answer(g, m)
		}
	}()
	t.Cleanup(func() { host.Close(); g.Close() })
	return New(host)
}

func TestDialTakesOnlyATCPSocketFromTheGuest(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
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
			c.Write([]byte("inside"))
			c.Close()
		}
	}()
	pr, pw, _ := os.Pipe()
	defer pr.Close()
	defer pw.Close()
	ua, ub, _ := proto.Pair()
	defer ua.Close()
	defer ub.Close()
	cases := map[string]struct {
		answer func(c *proto.Conn, m *proto.Msg)
		err    string // "" for a connection
	}{
		"a TCP socket is the connection": {answer: func(c *proto.Conn, m *proto.Msg) {
			tc, _ := net.Dial("tcp", ln.Addr().String())
			f, _ := tc.(*net.TCPConn).File()
			tc.Close()
			c.Send(&proto.Msg{ID: m.ID, Op: proto.OpResult}, f)
			f.Close()
		}},
		"a pipe is refused": {answer: func(c *proto.Conn, m *proto.Msg) {
			c.Send(&proto.Msg{ID: m.ID, Op: proto.OpResult}, pr)
		}, err: "the guest's descriptor"},
		"a Unix socket is refused": {answer: func(c *proto.Conn, m *proto.Msg) {
			c.Send(&proto.Msg{ID: m.ID, Op: proto.OpResult}, ub)
		}, err: "not a TCP socket"},
		"two descriptors are refused": {answer: func(c *proto.Conn, m *proto.Msg) {
			c.Send(&proto.Msg{ID: m.ID, Op: proto.OpResult}, pr, pr)
		}, err: "with 2 descriptors"},
		"no descriptor is refused": {answer: func(c *proto.Conn, m *proto.Msg) {
			c.Send(&proto.Msg{ID: m.ID, Op: proto.OpResult})
		}, err: "with 0 descriptors"},
		"the guest's error is passed on": {answer: func(c *proto.Conn, m *proto.Msg) {
			c.Send(&proto.Msg{ID: m.ID, Op: proto.OpError, Err: &proto.Error{Step: "dial", Message: "connection refused"}})
		}, err: "dial: connection refused"},
		"silence ends with the caller's deadline": {answer: func(*proto.Conn, *proto.Msg) {}, err: "deadline exceeded"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			cl := hostileGuest(t, c.answer)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			conn, err := cl.Dial(ctx, 8000)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("Dial = %v, %v; want an error with %q", conn, err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			b := make([]byte, 16)
			n, _ := conn.Read(b)
			if string(b[:n]) != "inside" {
				t.Errorf("read %q through the handed-over socket", b[:n])
			}
		})
	}
}
