package main

import (
	"github.com/airlock-dev/airlock/internal/cgroup"
	"github.com/airlock-dev/airlock/internal/guest"
)

// guestMain runs this binary as a sandbox's PID 1; it never returns.
func guestMain() { guest.Main() }

// vmInit boots a VM's guest when the kernel runs this binary as its /init
// (the vm backend copies in this binary); it then never returns.
func vmInit() {
	if guest.IsVMInit() {
		guest.VMInit()
	}
}

// sweepStaleCgroups removes the cgroups no record names: a supervisor
// killed before it registered its sandbox left its group behind.
func sweepStaleCgroups() { cgroup.SweepStale("airlock-") }
