package vfs

import "runtime"

func lockOSThread() { runtime.LockOSThread() }
