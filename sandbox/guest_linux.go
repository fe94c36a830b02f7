package sandbox

import (
	"github.com/airlock-dev/airlock/internal/cgroup"
	"github.com/airlock-dev/airlock/internal/guest"
)

// guestMain runs this program as a sandbox's PID 1; it never returns.
func guestMain() { guest.Main() }

// sweepStaleCgroups removes the empty cgroups of guests whose owner was
// killed outright.
func sweepStaleCgroups() { cgroup.SweepStale("airlock-") }
