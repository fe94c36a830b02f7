// Command lean is the native backend's guest alone: the sandbox's PID 1,
// built without the rest of airlock so that its start pays only its own
// packages' inits. internal/guestbin's gen builds it with the tag
// airlock_native_guest (no VM guest's FUSE server) and embeds it in the
// airlock binary.
package main

import (
	"io"
	"log"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/guest"
	"github.com/airlock-dev/airlock/internal/trace"
)

// init names the process: executed as /proc/self/fd/N, it would be called
// N (ps, top). Inits run on the main thread, whose name is the process's.
func init() {
	if name, err := unix.BytePtrFromString("airlock"); err == nil {
		unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(name)), 0, 0, 0)
	}
}

// main does what cmd/airlock's main does as `airlock guest`, which the
// native backend runs when no lean guest is built in.
func main() {
	log.SetOutput(io.Discard)
	trace.As("guest")
	trace.MarkCPU("main")
	guest.Main()
}
