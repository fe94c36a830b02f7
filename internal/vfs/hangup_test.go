package vfs

import (
	"context"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// A port outside the runtime's poller — a blocking socket, as the FUSE
// tests' stand-in for the virtio-serial port is, or QEMU's chardev when it
// is handed over blocking — does not end a blocked Read on Close. A guest
// that closed its virtio port without QEMU closing the socket (QEMU keeps
// a chardev connected while the guest side is closed) sends neither a
// message nor an end of stream, so the session must end on the host's
// word alone: each case here ends it otherwise than by the port's EOF,
// with the guest's end open and silent, and ServeStream must return.
func TestServeStreamEndsOnABlockingPortTheGuestLeftOpen(t *testing.T) {
	for _, c := range []struct {
		name string
		end  func(cancel context.CancelFunc, guest *os.File)
		want error
	}{
		{"context cancelled", func(cancel context.CancelFunc, _ *os.File) { cancel() }, context.Canceled},
		// A node id go-fuse never gave out makes its handler panic: the
		// session ends from the server's side while toServer waits for the
		// guest's next message.
		{"handler panic", func(_ context.CancelFunc, guest *os.File) { guest.Write(request(3, 2, 999, make([]byte, 16))) }, ErrBadMessage},
	} {
		t.Run(c.name, func(t *testing.T) {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			must(t, err)
			// Both ends blocking: host is not in the runtime's poller.
			guest, host := os.NewFile(uintptr(fds[0]), "guest"), os.NewFile(uintptr(fds[1]), "host")
			t.Cleanup(func() { hangUp(guest) })
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- ServeStream(ctx, host, NewMemory(0, 0), ServeOptions{}) }()
			handshake(t, guest) // the positive control: the session serves
			c.end(cancel, guest)
			wantEnd(t, done, c.want)
		})
	}
}
