// Package link names the descriptor a sandbox's Ethernet frames travel on
// and how they are framed there: a TAP device for a container, a socket for
// a VM's network backend. It is a leaf: the netstack runs a stack on a Link,
// and whoever starts the sandbox or the VM makes one.
package link

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Kind is how Ethernet frames travel on a link's descriptor.
type Kind uint8

const (
	// TAP is a TAP device: one frame per read or write.
	TAP Kind = iota + 1
	// Datagram is a SOCK_DGRAM or SOCK_SEQPACKET socket: one frame per
	// datagram, no header. For QEMU, one end of a SOCK_DGRAM socketpair
	// whose other end it gets as -netdev socket,fd=N or -netdev dgram
	// (its socket backend takes only SOCK_DGRAM or SOCK_STREAM:
	// net_socket_fd_check in net/socket.c).
	Datagram
	// Stream is a SOCK_STREAM socket, such as QEMU's -netdev stream or
	// -netdev socket,fd=N on a stream socket: each frame is preceded by its
	// length as a 4-byte big-endian integer (see StreamHeaderSize).
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

// Link is a descriptor carrying Ethernet frames, and how they are framed.
type Link struct {
	Kind Kind
	File *os.File
}

func (l Link) String() string {
	if l.File == nil {
		return l.Kind.String() + " link without a descriptor"
	}
	return fmt.Sprintf("%s link on %s (fd %d)", l.Kind, l.File.Name(), l.File.Fd())
}

// ErrKind says a descriptor cannot carry frames the way its Link's Kind
// says they travel.
var ErrKind = errors.New("link: descriptor does not match the link's kind")

// Validate reports why l cannot carry frames: an unknown kind, no
// descriptor, or a descriptor of the wrong sort. A Stream link must be a
// stream socket; a Datagram link a datagram or seqpacket socket; a TAP link a
// character device or a datagram or seqpacket socket (which keeps frame
// boundaries just as a TAP device does; the tests use one). A stream socket
// given as TAP or Datagram would run frames together, so it is refused
// rather than misread.
func (l Link) Validate() error {
	switch l.Kind {
	case TAP, Datagram, Stream:
	default:
		return fmt.Errorf("link: unknown kind %d", uint8(l.Kind))
	}
	if l.File == nil {
		return fmt.Errorf("link: %s link without a descriptor", l.Kind)
	}
	fd := int(l.File.Fd())
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("link: %s: %w", l, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		if l.Kind == TAP && st.Mode&unix.S_IFMT == unix.S_IFCHR {
			return nil
		}
		return fmt.Errorf("%w: %s is not a socket", ErrKind, l)
	}
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		return fmt.Errorf("link: %s: socket type: %w", l, err)
	}
	stream := typ == unix.SOCK_STREAM
	packets := typ == unix.SOCK_DGRAM || typ == unix.SOCK_SEQPACKET
	if (l.Kind == Stream && !stream) || (l.Kind != Stream && !packets) {
		return fmt.Errorf("%w: %s is a socket of type %d", ErrKind, l, typ)
	}
	return nil
}
