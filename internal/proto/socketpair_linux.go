package proto

import "golang.org/x/sys/unix"

// socketpair is a connected pair of stream sockets, close-on-exec.
func socketpair() ([2]int, error) {
	return unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
}
