// Package link names how a sandbox's Ethernet frames reach the host's
// network stack: a backend hands one over, the netstack serves it. It is a
// leaf so backends can return a link without importing the stack.
package link

import (
	"fmt"
	"os"
)

// Kind is how Ethernet frames travel on a link's descriptor.
type Kind uint8

const (
	// TAP is a TAP device: one frame per read/write.
	TAP Kind = iota + 1
	// Datagram is a SOCK_DGRAM/SOCK_SEQPACKET socket (a socketpair with
	// QEMU's -netdev socket/dgram): one frame per datagram, no header.
	Datagram
	// Stream is a SOCK_STREAM socket: each frame preceded by its length as a
	// 4-byte big-endian integer (QEMU's -netdev stream).
	Stream
)

func (k Kind) String() string {
	switch k {
	case TAP:
		return "tap"
	case Datagram:
		return "datagram"
	case Stream:
		return "stream"
	}
	return fmt.Sprintf("link.Kind(%d)", uint8(k))
}

// Link is one descriptor carrying a sandbox's frames. Whoever serves it owns
// File from then on and closes it.
type Link struct {
	Kind Kind
	File *os.File
}

// Check reports whether l can be served.
func (l Link) Check() error {
	if l.File == nil {
		return fmt.Errorf("link: no descriptor")
	}
	switch l.Kind {
	case TAP, Datagram, Stream:
		return nil
	}
	return fmt.Errorf("link: unknown kind %s", l.Kind)
}
