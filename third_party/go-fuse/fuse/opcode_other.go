//go:build !linux && !darwin

package fuse

// addOSHandlers: no handlers beyond the common ones here (patched for
// airlock: see handlers).
func addOSHandlers() {}
