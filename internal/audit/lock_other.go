//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package audit

import "os"

// lockFile is a no-op where flock is missing: rotations by several processes are
// then not serialized.
func lockFile(*os.File) func() { return func() {} }
