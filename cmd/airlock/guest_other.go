//go:build !linux

package main

import (
	"fmt"
	"os"
)

// guestMain refuses: a sandbox's guest (its PID 1) is Linux's.
func guestMain() {
	fmt.Fprintln(os.Stderr, "airlock guest: a sandbox's guest runs on Linux only")
	os.Exit(125)
}

// vmInit has nothing to boot: no VM runs this binary as its /init here.
func vmInit() {}

// sweepStaleCgroups has nothing to sweep: cgroups are Linux's.
func sweepStaleCgroups() {}
