package guest

import (
	"io"
	"net"
	"sync"

	"github.com/airlock-dev/airlock/internal/proto"
)

// startRelay listens inside the sandbox and passes every connection to the
// host's gateway through the Unix socket mounted at r.Socket. The sandbox's
// network namespace has no other way out, so this is the explicit door for
// clients that honour HTTP(S)_PROXY.
func startRelay(r *proto.Relay) error {
	ln, err := net.Listen("tcp", r.Listen)
	if err != nil {
		return err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go relay(c, r.Socket)
		}
	}()
	return nil
}

func relay(c net.Conn, socket string) {
	defer c.Close()
	up, err := net.Dial("unix", socket)
	if err != nil {
		return
	}
	defer up.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		io.Copy(up, c)
		up.(*net.UnixConn).CloseWrite()
	}()
	io.Copy(c, up)
	if tc, ok := c.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	wg.Wait()
}
