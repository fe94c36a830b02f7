//go:build !linux

package memtrim

import "runtime/debug"

// Trim returns the heap's free pages to the kernel (the executable's
// mappings are Linux's to drop: see trim_linux.go).
func Trim() { debug.FreeOSMemory() }
