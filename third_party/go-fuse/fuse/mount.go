package fuse

import (
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
)

var (
	reservedFDs    []*os.File
	reserveFD3Once sync.Once
)

// reserveFD3 keeps fd 3 from ever pointing to a FUSE filesystem.
//
// Patched for airlock: called by mount before it opens one, not from an
// init, which every start of a binary linking go-fuse paid (pipes, and the
// poller they start) whether or not it mounts anything; airlock serves an
// open /dev/fd/N and never mounts through here.
func reserveFD3() {
	reserveFD3Once.Do(func() {
		// Both Darwin and Linux invoke a subprocess with one
		// inherited file descriptor to create the mount. To protect
		// against deadlock, we must ensure that file descriptor 3
		// never points to a FUSE filesystem. We do this by simply
		// grabbing fd 3 and never releasing it. (This is not
		// completely foolproof: a preceding init routine could grab fd 3,
		// and then release it later.)
		for {
			r, w, err := os.Pipe()
			if err != nil {
				panic(fmt.Sprintf("os.Pipe(): %v", err))
			}
			w.Close()
			if r.Fd() > 3 {
				r.Close()
				break
			}
			reservedFDs = append(reservedFDs, r)
		}
	})
}

func getConnection(local *os.File) (int, error) {
	conn, err := net.FileConn(local)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	unixConn := conn.(*net.UnixConn)

	var data [4]byte
	control := make([]byte, 4*256)

	_, oobn, _, _, err := unixConn.ReadMsgUnix(data[:], control[:])
	if err != nil {
		return 0, err
	}

	messages, err := syscall.ParseSocketControlMessage(control[:oobn])
	if err != nil {
		return 0, err
	}
	if len(messages) != 1 {
		return 0, fmt.Errorf("getConnection: expect 1 control message, got %#v", messages)
	}
	message := messages[0]

	fds, err := syscall.ParseUnixRights(&message)
	if err != nil {
		return 0, err
	}
	if len(fds) != 1 {
		return 0, fmt.Errorf("getConnection: expect 1 fd, got %#v", fds)
	}
	fd := fds[0]

	if fd < 0 {
		return 0, fmt.Errorf("getConnection: fd < 0: %d", fd)
	}
	return fd, nil
}
