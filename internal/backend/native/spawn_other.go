//go:build !amd64

package native

import "syscall"

// spawn is only written for amd64: elsewhere the guest is started with
// os/exec (see startGuest).
func spawn(*spawnAttr) (pid, pidfd int, err error) { return 0, -1, &clone3Error{syscall.ENOSYS} }
